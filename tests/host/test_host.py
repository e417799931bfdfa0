"""gpulab.host: the machine's state beside a measurement, and time limits that allow for it."""

import pytest

from gpulab import host
from gpulab.host import MAX_STRETCH, Snapshot, stretch, time_limit


def test_the_machine_sentence_states_cores_and_the_share_of_each_rank(monkeypatch):
    monkeypatch.setattr(host, "cores", lambda: 2)
    monkeypatch.setattr(host, "load", lambda: 1.5)
    text = host.describe(ranks=4)
    assert "2 cores" in text and "load 1.5" in text and "0.5 core each" in text and "take turns" in text
    monkeypatch.setattr(host, "load", lambda: None)
    assert host.describe() == "This machine gives the notebook 2 cores."


def test_a_snapshot_says_how_busy_the_machine_was_and_what_to_try():
    idle = Snapshot(cores=2, load=0.3, ranks=2)
    assert not idle.busy and idle.ranks_per_core == 1
    assert "idle" not in idle.advice() and "fewer ranks" not in idle.advice()
    busy = Snapshot(cores=2, load=6.0, ranks=4)
    assert busy.busy and busy.ranks_per_core == 2
    assert "idle" in busy.advice() and "fewer ranks than cores" in busy.advice()
    assert busy.text() == "2 cores, load 6.0, 4 ranks (2 per core)"
    assert Snapshot(**{k: v for k, v in busy.to_dict().items() if k != "ranks_per_core"}) == busy


def test_the_snapshot_of_this_machine_reads_it(monkeypatch):
    monkeypatch.setattr(host, "cores", lambda: 16)
    monkeypatch.setattr(host, "load", lambda: 2.5)
    assert host.snapshot(4) == Snapshot(16, 2.5, 4)


@pytest.mark.parametrize("ranks, load, expected", [
    (1, 0.0, 1.0),     # a core for the one rank: the idle machine's limit
    (2, 0.0, 1.0),     # a core per rank
    (4, 0.0, 2.0),     # two ranks per core take turns
    (4, 20.0, 12.0),   # and twenty other runnable processes on two cores
    (8, 100.0, MAX_STRETCH),  # capped: past it something hangs rather than waits
])
def test_limits_stretch_with_the_work_per_core(ranks, load, expected):
    state = Snapshot(cores=2, load=load, ranks=ranks)
    assert stretch(ranks, state) == pytest.approx(expected)
    assert time_limit(120, ranks, state) == pytest.approx(120 * expected)


def test_an_unknown_load_counts_as_idle():
    assert stretch(2, Snapshot(cores=2, load=None)) == 1.0
