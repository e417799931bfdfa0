"""Limits on the engines' work: stretched for the machine read at the start, and one paragraph when one fires."""

import pytest

from gpulab import host
from gpulab.cluster.ipp_engines import EngineTimeout
from gpulab.cluster.time_limits import WIDTH, Limit, compact

IDLE = host.Snapshot(cores=4, load=0.0, ranks=4)
BUSY = host.Snapshot(cores=2, load=4.0, ranks=4)


def test_a_limit_is_stretched_by_the_work_per_core_at_the_start():
    assert Limit.start(120, 4, state=IDLE).seconds == 120  # a core per rank, nothing else: the idle limit
    busy = Limit.start(120, 4, state=BUSY)
    assert busy.seconds == pytest.approx(120 * (4 + 4.0) / 2)
    assert busy.text() == ("480 s (120 s on an idle machine with a core per rank, stretched 4.0x for this machine "
                           "at the start: 2 cores, load 4.0, 4 ranks (2 per core))")
    assert Limit.start(3, 4, state=IDLE).text() == "3 s (at the start: 4 cores, load 0.0, 4 ranks (1 per core))"


def test_engines_on_slurm_nodes_keep_the_limit_as_written():
    limit = Limit.start(120, 4, stretch=False, state=BUSY)
    assert limit.seconds == 120 and "cores of their own" in limit.text()
    assert "idle" not in limit.passed("x on 4 engines did not finish", {0: ""})  # this machine's load is no reason


def test_the_limit_reads_the_machine_when_it_starts(monkeypatch):
    read = []
    monkeypatch.setattr(host, "snapshot", lambda ranks=None: read.append(ranks) or BUSY)
    assert Limit.start(10, 4).seconds == 40 and read == [4]


def test_a_limit_that_fires_says_what_where_how_busy_and_what_to_try(monkeypatch):
    monkeypatch.setattr(host, "load", lambda: 7.5)  # the machine when the limit fires
    limit = Limit.start(120, 4, state=BUSY)
    text = limit.passed("fit() on 4 engines did not finish",
                        {0: "barrier (fit.py:80)", 2: "barrier (fit.py:80)", 3: ""}, {1}, "; engine 1: ValueError: x",
                        "The engines on this machine were killed: call engines.restart().")
    assert text.startswith("fit() on 4 engines did not finish within 480 s (120 s on an idle machine")
    assert "now load 7.5." in text
    assert "Engines 0 and 2 were at barrier (fit.py:80). Engine 3: no stack recorded." in text
    assert "Engine 1 finished; engine 1: ValueError: x." in text
    assert "call engines.restart(). Try: the unfinished engines probably wait in a collective" in text
    assert "rerun when the machine is idle, or with fewer ranks than cores" in text
    assert text.endswith("work that is slow rather than stuck takes a larger timeout=.")
    assert "\n" not in text  # one paragraph


def test_an_idle_machine_gets_no_advice_to_wait_for_one():
    text = Limit.start(3, 4, state=IDLE).passed("slow() on 4 engines did not finish", {0: "", 1: "", 2: "", 3: ""})
    assert "idle" not in text.split("Try:")[1] and "collective" not in text  # nobody finished: no peer to blame
    assert "Engines 0, 1, 2 and 3: no stack recorded." in text


def test_stacks_are_shown_by_function_file_and_line():
    stack = 'File "/x/gpulab/engine/perf/fit.py", line 80 in fit <- ... <- File "/home/me/nb.py", line 3 in <module>'
    assert compact(stack) == "fit (fit.py:80) <- ... <- <module> (nb.py:3)"
    assert compact("cell line 3: comm.barrier()") == "cell line 3: comm.barrier()"
    assert compact("no stack recorded") == ""


def test_ipython_shows_the_paragraph_instead_of_a_traceback():
    paragraph = Limit.start(120, 4, state=BUSY).passed("fit() on 4 engines did not finish", {0: "fit (fit.py:80)"})
    try:
        raise EngineTimeout(paragraph)
    except EngineTimeout as err:
        lines = err._render_traceback_()
    assert lines[0].startswith("EngineTimeout: fit() on 4 engines did not finish within 480 s")
    assert " ".join(lines) == f"EngineTimeout: {paragraph}"
    assert all(len(line) <= WIDTH for line in lines)
    assert not any("Traceback" in line or 'File "' in line for line in lines)
