"""Why the engines' Slurm job ended, once Slurm no longer lists it: slurmstepd's line in the job's output.

The output below is what the testbed's Slurm (Debian's slurm-wlm) wrote for a batch job past its
1-minute time limit (``srun sleep 300`` under ``--time=00:01:00``)."""

from types import SimpleNamespace

from gpulab.cluster.ipp_engines import Engines
from gpulab.cluster.slurm import ended_in_output

TIME_LIMIT_OUTPUT = """\
slurmstepd-n1: error: *** STEP 1.0 ON n1 CANCELLED AT 2026-12-04T13:08:11 DUE TO TIME LIMIT ***
slurmstepd-n1: error: *** JOB 1 ON n1 CANCELLED AT 2026-12-04T13:08:11 DUE TO TIME LIMIT ***
srun: Job step aborted: Waiting up to 4 seconds for job step to finish.
srun: error: n1: task 0: Terminated
"""


def test_slurms_own_line_gives_the_state():
    assert ended_in_output("1", TIME_LIMIT_OUTPUT) == "TIMEOUT"
    assert ended_in_output("12", TIME_LIMIT_OUTPUT) == ""  # another job's line (and job 1's step line) say nothing
    assert ended_in_output("7", "slurmstepd: error: *** JOB 7 ON n2 CANCELLED AT 2026-12-04T13:08:11 ***") \
        == "CANCELLED"  # scancel
    assert ended_in_output("7", "*** JOB 7 ON n2 CANCELLED AT 2026-12-04T13:08:11 DUE TO PREEMPTION ***") \
        == "PREEMPTED"
    assert ended_in_output("7", "engine 0 exited\n") == ""


def _engines_of_a_forgotten_job(output: str) -> Engines:
    """Engines whose job 1 scontrol no longer knows (state ""), without starting any."""
    engines = Engines.__new__(Engines)
    engines._job_checked = 0
    engines.cluster = SimpleNamespace(engine_set=SimpleNamespace(job_id="1", output_file="", get_output=lambda: output))
    engines._job_state = lambda: ""
    return engines


def test_a_job_slurm_forgot_is_reported_with_the_reason_its_output_gives():
    assert _engines_of_a_forgotten_job(TIME_LIMIT_OUTPUT)._job_ended() == \
        "the Slurm job 1 of the engines ended (TIMEOUT)"
    assert _engines_of_a_forgotten_job("engine 0 exited\n")._job_ended() == \
        "the Slurm job 1 of the engines ended (no longer in the queue)"
