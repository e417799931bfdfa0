"""MPI engines behind a notebook: start them, run work on them within a time bound, stop them.

    from gpulab.cluster import start_engines
    with start_engines(4) as engines:                  # local mpiexec, controller on 127.0.0.1
        ranks = engines.run(my_function, timeout=30)   # one result per MPI rank, in rank order
        engines.client, engines.view                   # ipyparallel Client; blocking DirectView (%%px)

In a notebook, keep the handle across cells and call ``engines.stop()`` at the
end. A kernel that exits, restarts or is killed takes its engines with it (a
reaper process watches it), and a later ``start_engines`` stops any cluster a
dead kernel left in the profile.

On a Slurm cluster, the engines run as one batch job, one rank per GPU:
``start_engines(8, launcher="slurm", partition="gpu", account="abc",
gpus_per_node=4, time="00:30:00")`` (or ``GPULAB_LAUNCHER=slurm`` and friends in
the environment, see docs/cluster.md); ``print(slurm_script(8, partition="gpu"))``
shows the job script, rendered from ``SLURM_TEMPLATE``. A job that Slurm ends
(scancel, time limit) raises EngineDied naming the job and its state.

Nothing waits forever: ``engines.run(fn, timeout=...)`` raises EngineTimeout /
EngineDied / EngineFailed naming the engines and the line each one is stuck
at, and a ``%%px`` cell running past ``cell_timeout`` (default 300 s) ends the
engines, the notebook showing the stuck line; ``engines.restart()`` recovers.
Each limit is written for an idle machine with a core per rank and stretched for
a busy or oversubscribed one (``time_limits``); one that fires says so in one paragraph.

Modules: ``start`` (start_engines: where the engines run), ``ipp_engines`` (Engines, the ipyparallel
handle, and its errors), ``ipc_sockets`` (engines reached over unix sockets, as on an emulated cluster),
``time_limits`` (limits stretched for this machine, the paragraph of one that fires),
``engine_side`` (what runs on each engine: the hang watchdog; the GPU pinning, ``pin_gpu``,
lives in ``gpulab.launch`` because ``gpulab train`` and ``gpulab bench`` pin
too, without ipyparallel), ``slurm`` (batch template, why Slurm ended a job), ``processes``
(reaper, stale-cluster cleanup), ``bcast_runner`` and ``mesh_runner`` (what the notebooks' widgets
have the engines run: ``EngineRunner``, ``MeshRunner``; imported by their module, so that importing
``gpulab.cluster`` does not import the broadcast and the engine). A real throwaway Slurm on one
machine, for the tests and for trying these paths, lives with the tests: ``tests/testbeds/slurm``.
"""

from gpulab.lazy_exports import lazy_exports

# public name -> its module; importing the package imports none of them, so that ``gpulab.cluster.processes``
# and ``slurm`` work where ipyparallel is not installed (a bare GPU machine running the tests)
_PUBLIC = {**dict.fromkeys(("EngineDied", "EngineFailed", "EngineProblem", "EngineTimeout", "Engines"), "ipp_engines"),
           "stop_stale_clusters": "processes", "SLURM_TEMPLATE": "slurm", "slurm_script": "slurm",
           "start_engines": "start"}
lazy_exports(globals(), {**{name: f"{__name__}.{module}" for name, module in _PUBLIC.items()},
                         "pin_gpu": "gpulab.launch"})
