"""One record adds an algorithm: a toy registered for the test runs, is priced, tuned and named everywhere."""

import math

import pytest

from gpulab.bcast import ALGORITHMS
from gpulab.bcast.algorithms import registry
from gpulab.bcast.cost.hockney import Link, Machine, best_chunk, choices, pipeline_shape, predict
from tests.bcast.toy_algorithm import NAME, registered
from tests.mpi_harness import run_mpi

A, B = 5e-6, 1e-9
PLAIN = Machine("plain", Link.plain(A, B), Link.plain(A, B))


@pytest.fixture
def toy():
    with registered() as record:
        yield record
    assert NAME not in ALGORITHMS and NAME not in registry.REGISTRY


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_toy_broadcasts_bit_for_bit_like_mpi_bcast(n):
    per_rank = run_mpi(n, "tests.bcast.toy_algorithm:check_toy", timeout=120)
    assert all(r["checked"] > 0 for r in per_rank), per_rank
    assert not any(r["wrong"] for r in per_rank), "\n".join(w for r in per_rank for w in r["wrong"])
    assert not any(r["left_registered"] for r in per_rank)


@pytest.mark.parametrize("p", [2, 3, 8])
def test_the_model_prices_the_toy_from_its_schedules(toy, p):
    # the reverse chain is a chain: the first chunk crosses p - 1 links, each later one a message later
    assert pipeline_shape(NAME, p, True) == pipeline_shape(NAME, p, False) == (p - 1, 1)
    n, chunk = 1 << 20, 1 << 16
    k = n // chunk
    textbook = (p + k - 2) * (A + chunk * B)
    assert predict(NAME, n, p, PLAIN, chunk_bytes=chunk) == pytest.approx(textbook, rel=1e-12)
    best = best_chunk(NAME, n, p, PLAIN)
    assert all(predict(NAME, n, p, PLAIN, chunk_bytes=best) <= predict(NAME, n, p, PLAIN, chunk_bytes=c) * (1 + 1e-12)
               for c in (1 << 10, 1 << 14, 1 << 16, 1 << 18, n))
    assert (NAME, {"chunk_bytes": best}) in choices(n, p, PLAIN)


def test_the_tuner_and_the_default_lists_take_the_toy(toy):
    swept = [options for name, options in registry.candidates(1 << 20, 8) if name == NAME]
    assert swept == [{"chunk_bytes": c} for c in registry.CHUNKS if c < 1 << 20]  # every one below the message
    assert [o for a, o in registry.candidates(1000, 2) if a == NAME] == [{"chunk_bytes": 1000}]
    assert NAME in registry.names() and NAME in registry.level_names() and NAME in registry.pipelined_names()
    assert not math.isnan(predict("hierarchical", 1 << 20, 8, PLAIN, ranks_per_node=4, inter=NAME, intra=NAME))


def test_options_are_checked_by_the_toy_s_signature(toy):
    from gpulab.bcast.entry import _check_options, option_names

    assert option_names(NAME) == ("chunk_bytes",)
    with pytest.raises(TypeError, match="does not take option"):
        _check_options(NAME, {"radix": 3})
    with pytest.raises(ValueError, match="chunk_bytes must be a positive integer"):
        _check_options(NAME, {"chunk_bytes": 0})
    _check_options("hierarchical", {"inter": NAME, "intra_options": {}})  # a flat algorithm: a level


def test_the_drawings_show_the_toy_backwards(toy):
    from gpulab.bcast.plots.drawings import planned_events

    hops = [(e["src"], e["dst"]) for e in sorted(planned_events(NAME, 4, 100), key=lambda e: e["step"])]
    assert hops == [(0, 3), (3, 2), (2, 1)]


def test_bench_accepts_the_toy_by_name_and_forgets_it_after(monkeypatch, capsys):
    import gpulab.cli.bench
    from gpulab.cli import main

    started = []
    monkeypatch.setattr(gpulab.cli.bench, "relaunch", lambda n, argv, **kw: started.append(n) or 0)
    for var in ("GPULAB_LAUNCHED", "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(var, raising=False)
    argv = ["bench", "bcast", "-n", "2", "--algorithms", f"chain,{NAME}", "--inter", NAME]
    with registered():
        assert main(argv) == 0
    assert len(started) == 1  # checked, then handed to mpiexec
    with pytest.raises(SystemExit):  # once removed, the name is unknown again
        main(argv)
    assert f"invalid choice: '{NAME}'" in capsys.readouterr().err
