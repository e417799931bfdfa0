"""gpulab: learn and measure how deep-learning training moves data between GPUs.

Two halves share one harness:
- ``gpulab.bcast``: MPI broadcast algorithms on point-to-point calls, their
  measuring, a cost model and an autotuner (Awan et al., "MPI or NCCL?").
- ``gpulab.engine``: a 4D-parallel (3D tensor x data) GPT in numpy/CuPy with
  hand-written backward passes (Singh et al., AxoNN): ``gpt`` (serial),
  ``parallel`` (the engine), ``perf`` (performance model), ``training``.

Beside them: ``workloads`` (real networks' parameters, above the broadcast),
``machines`` (the profiles both models read), ``cli`` (every ``gpulab``
command), ``cluster`` and ``widgets`` (notebook engines and explorers), and
the ground floor ``backend``, ``launch``, ``mpi_cuda``, ``fakedevice``.
Importing any of them never initialises MPI: only the functions that
communicate do.
"""

__version__ = "0.1.0"
