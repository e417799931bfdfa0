"""The Slurm batch script for engines: one job, one MPI rank per GPU, started with srun.

    print(slurm_script(8, partition="gpu", account="abc", gpus_per_node=4))

ipyparallel fills {n}, {cluster_id}, {output_file} and {program_and_args}
(the ipengine command) when it submits; the other fields come from
``start_engines(..., launcher="slurm")``. Directives whose value is empty
(no partition or account given, ``gpus_per_node=0``) are left out, so the
site's defaults apply. ``mpi`` is srun's ``--mpi`` plugin: ``pmi2`` for the
``mpich`` wheel, often ``pmix`` for a site's MPI. Edit a copy of
SLURM_TEMPLATE for your site (modules, constraints, QoS) and pass it as
``slurm_template=``.

The ``mpich`` wheel under ``srun --mpi=pmi2`` needs ``MPIR_CVAR_CH4_NETMOD=ofi``
(``PMI2_WHEEL_ENV``, exported by the script when that wheel is installed):
Slurm's pmi2 plugin reads each PMI-1 request with a single read of at most
1024 bytes, and MPICH's UCX netmod puts a 4096-byte business card into the
key-value store as hex values of up to 1022 characters, so a request can
arrive cut in two and a peer decodes a corrupt UCX address (an assertion on
the address version, then a hang). The OFI netmod's card is 64 bytes. Engines
also need ``MPIR_CVAR_CH4_OFI_ENABLE_INJECT=0``: they sit idle in ipyparallel
between tasks, making no MPI progress, and a small message that OFI buffered
on an idle engine (an injected send) would never leave it (a peer then waits
in a gather for ever).

``ended_in_output`` reads why Slurm ended a job from the job's output, the one record left once
Slurm has forgotten the job.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import re
import subprocess

from traitlets.config import Config

SLURM_TEMPLATE = """\
#!/bin/bash
#SBATCH --job-name=gpulab-engines-{cluster_id}
#SBATCH --partition={partition}
#SBATCH --account={account}
#SBATCH --nodes={nodes}
#SBATCH --ntasks={n}
#SBATCH --ntasks-per-node={ranks_per_node}
#SBATCH --gpus-per-node={gpus_per_node}
#SBATCH --time={time}
#SBATCH --output={output_file}
#SBATCH --export=ALL
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
{mpi_env}
{owner_watch}
srun --mpi={mpi} --kill-on-bad-exit=1 --cpu-bind=none {program_and_args}
"""

# what the mpich wheel's engines need under srun --mpi=pmi2 (see the module docstring)
PMI2_WHEEL_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "MPIR_CVAR_CH4_OFI_ENABLE_INJECT": "0"}


def mpi_env_line(mpi: str) -> str:
    """The job script's ``export`` line for this MPI under ``srun --mpi=MPI`` ("" when none is needed)."""
    try:
        importlib.metadata.version("mpich")  # a site MPI replaces the wheel (docs/cluster.md)
    except importlib.metadata.PackageNotFoundError:
        return ""
    if mpi != "pmi2":
        return ""
    return "export " + " ".join(f"{k}={v}" for k, v in PMI2_WHEEL_ENV.items()) + \
        "  # the mpich wheel under Slurm's pmi2 (gpulab.cluster.slurm)"


def owner_watch_line(owner_job: str | None) -> str:
    """The job script's line that cancels the engines' job once the job that submitted it (a JupyterLab
    spawned by batchspawner) is no longer running, however that one ended: a server culled by the hub,
    stopped, or killed takes the processes that would have cancelled the engines with it. "" outside a job."""
    if not owner_job or not re.fullmatch(r"[0-9_]+", owner_job):
        return ""
    # scontrol, not squeue: squeue forgets a finished job after MinJobAge and says nothing about a failed
    # query; only an answer naming the owner as gone cancels (a slurmctld that is busy for a moment does not)
    state = f"scontrol -o show job {owner_job} 2>&1"
    return (f"( while ! {state} | grep -Eq 'JobState=({'|'.join(OWNER_GONE)})|Invalid job id'; do sleep 2; done; "
            f"scancel $SLURM_JOB_ID ) &  # ends with the job that started these engines (gpulab.cluster.slurm)")


# the owner job's states after which its engines have nobody to serve (COMPLETING: it is ending)
OWNER_GONE = ("COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
              "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def slurm_fields(n: int, *, partition: str = "", account: str = "", gpus_per_node: int = 4,
                 ranks_per_node: int | None = None, time: str = "00:30:00", mpi: str = "pmi2",
                 owner_job: str | None = None) -> dict:
    """The template's gpulab fields; by default one rank per GPU, as many nodes as that needs.
    ``owner_job``: the Slurm job the engines end with (default: the job this process runs in, if any)."""
    if n < 1 or gpus_per_node < 0:
        raise ValueError(f"need n >= 1 and gpus_per_node >= 0, got n={n}, gpus_per_node={gpus_per_node}")
    ranks_per_node = ranks_per_node or max(gpus_per_node, 1)
    owner_job = os.environ.get("SLURM_JOB_ID") if owner_job is None else owner_job
    return {"partition": partition, "account": account, "gpus_per_node": gpus_per_node,
            "ranks_per_node": ranks_per_node, "nodes": math.ceil(n / ranks_per_node), "time": time,
            "mpi": mpi or "none", "mpi_env": mpi_env_line(mpi), "owner_watch": owner_watch_line(owner_job)}


def _drop_empty_directives(text: str) -> str:
    """Leave out '#SBATCH --x=' lines without a value (and --gpus-per-node=0): Slurm's defaults apply."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not re.fullmatch(r"#SBATCH --[\w-]+=(0)?\s*", line) or line.startswith("#SBATCH --ntasks"))


def slurm_script(n: int, *, template: str = SLURM_TEMPLATE, **fields) -> str:
    """The script as sbatch will see it, with ipyparallel's own fields left as {placeholders}."""
    ns = slurm_fields(n, **fields)
    ns.update(n=n, cluster_id="{cluster_id}", output_file="{output_file}", program_and_args="{program_and_args}")
    return _drop_empty_directives(template.format(**ns))


def submit_command(environ=None) -> list[str]:
    """sbatch, without the Slurm variables of an enclosing job (a JupyterLab that is itself a Slurm job).

    A job exports its settings to its processes (SLURM_EXPORT_ENV, SLURM_CPUS_PER_TASK, ...); a
    nested sbatch would pass them on, and the engines' srun would obey them (dropping the
    variables the engines need, or asking for the wrong number of CPUs).
    """
    environ = os.environ if environ is None else environ
    inherited = sorted(k for k in environ if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))
                       and k != "SLURM_CONF")
    return ["env", *(f"--unset={k}" for k in inherited), "sbatch"] if inherited else ["sbatch"]


def request_problem(n: int, *, template: str = SLURM_TEMPLATE, environ=None, **fields) -> str:
    """"" if Slurm could ever run the engines' job (``sbatch --test-only``), else Slurm's reason, so that a
    request larger than the partition fails at once with that reason instead of a bare sbatch error."""
    script = slurm_script(n, template=template, **fields).replace("{cluster_id}", "check").replace(
        "{output_file}", "/dev/null").replace("{program_and_args}", "true")
    try:
        done = subprocess.run([*submit_command(environ), "--test-only"], input=script, capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):  # no answer is no refusal: the submission will say more
        return ""
    if done.returncode == 0:
        return ""
    asked = slurm_fields(n, **fields)
    where = f"partition {asked['partition']}" if asked["partition"] else "the default partition"
    return (f"Slurm cannot run {n} engines as asked ({asked['nodes']} node(s) x {asked['ranks_per_node']} ranks, "
            f"{asked['gpus_per_node']} GPU(s) per node, {where}): "
            f"{' '.join(done.stderr.split()) or f'sbatch --test-only exited with {done.returncode}'}. "
            "Ask for fewer engines (or another partition).")


def slurm_config(n: int, *, template: str = SLURM_TEMPLATE, **fields) -> Config:
    """ipyparallel config that submits the engines with this template."""
    config = Config()
    config.SlurmEngineSetLauncher.submit_command = submit_command()
    # gpulab's fields are filled here, ipyparallel's ({n}, {program_and_args}, ...) when it submits
    config.SlurmEngineSetLauncher.batch_template = slurm_script(n, template=template, **fields)
    config.SlurmEngineSetLauncher.engine_args = ["--mpi"]  # ipengine initialises MPI: engine id = rank
    config.SlurmEngineSetLauncher.namespace = slurm_fields(n, **fields)
    return config


# slurmstepd's line in a job's output when Slurm ends it: "*** JOB 5 ON n1 CANCELLED AT <time> DUE TO TIME LIMIT ***"
_STEPD_END = re.compile(r"\*\*\* JOB (\d+) ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))? \*\*\*")
_STEPD_REASONS = {None: "CANCELLED", "TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}


def ended_in_output(job_id: str, output: str) -> str:
    """The state Slurm's own line in a job's output gives for job ``job_id`` (TIMEOUT, CANCELLED, ...), or
    "": after MinJobAge seconds (300 by default) ``scontrol`` no longer knows an ended job, and without
    accounting the output is the one record left of why it ended."""
    for found in _STEPD_END.finditer(output):
        if found.group(1) == job_id:
            reason = found.group(2)
            return _STEPD_REASONS[reason] if reason in _STEPD_REASONS else reason.replace(" ", "_")
    return ""
