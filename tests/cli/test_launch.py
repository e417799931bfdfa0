"""The environment of the job that a ``gpulab`` command relaunches itself in (``gpulab.launch.relaunch``)."""

import pytest

import gpulab.launch
from gpulab.launch import LAUNCHED, THREAD_LIMITS, relaunch


class Recorded:
    """Stands in for the mpiexec process: records how it was started, and ends at once."""
    started = []

    def __init__(self, argv, env, **kwargs):
        self.started.append((argv, env))

    def wait(self):
        return 0

    def poll(self):
        return 0


@pytest.fixture
def started(monkeypatch):
    for var in THREAD_LIMITS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(gpulab.launch.subprocess, "Popen", Recorded)
    Recorded.started = []
    return Recorded.started


def test_ranks_of_a_job_get_one_blas_thread_unless_the_user_chose(started, monkeypatch):
    # four ranks with OpenBLAS's default (a thread per core) ran 4 x cores threads on the cores
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert relaunch(4, ["train"], env={"EXTRA": "x"}) == 0
    (argv, env), = started
    assert argv[-2:] == ["gpulab.cli", "train"]
    assert env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert env["OMP_NUM_THREADS"] == "3" and env["EXTRA"] == "x" and env[LAUNCHED] == "1"


def test_a_job_of_one_rank_keeps_the_libraries_defaults(started):
    relaunch(1, ["train"])
    (_, env), = started
    assert not set(THREAD_LIMITS) & set(env)
