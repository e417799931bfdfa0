"""A scoreboard job's limit is written for an idle machine and stretched for this one, read before the job
starts; one that fires is one line in the claim's row, not a traceback."""

import pytest

from gpulab import host
from gpulab.scoreboard import jobs
from gpulab.scoreboard.jobs import Bench, JobFailed

SLOW_JOB = ["-c", "import time; time.sleep(4)"]  # 4 s on one rank, past a 1 s limit


def machine(monkeypatch, cores, load):
    monkeypatch.setattr(host, "snapshot", lambda ranks=None: host.Snapshot(cores, load, ranks))


@pytest.mark.timeout(120)
def test_a_slow_job_passes_a_limit_stretched_for_a_busy_machine_and_fails_an_idle_ones(monkeypatch):
    monkeypatch.setattr(jobs, "JOB_TIMEOUT", {True: 1, False: 1})
    machine(monkeypatch, cores=1, load=19.0)  # the rank and 19 other runnable processes on one core: 20x
    Bench(quick=True).run(1, SLOW_JOB)
    machine(monkeypatch, cores=1, load=0.0)
    with pytest.raises(JobFailed) as failed:
        Bench(quick=True).run(1, SLOW_JOB)
    assert "passed its 1 s limit" in str(failed.value) and "\n" not in str(failed.value)
