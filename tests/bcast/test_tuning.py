"""The tuning table, select() and algorithm="auto": sources, ranges, margin, file lookup, multi-rank use."""

import json
import subprocess
import sys

import pytest

from gpulab.bcast import Decision
from gpulab.bcast.algorithms.registry import candidates
from gpulab.bcast.cost.hockney import Machine
from gpulab.bcast.selection.auto import reload, select
from gpulab.bcast.selection.tuning import ENV, build_table, choose_measured, load, lookup, table_path, update
from gpulab.machines import Link, LinkLevel
from tests.mpi_harness import ROOT, run_mpi

MACHINE = Machine("m", Link(LinkLevel(2e-6, 2e-10), LinkLevel(5e-6, 7e-11), 8192, True),
                  Link(LinkLevel(2e-6, 2e-10), LinkLevel(5e-6, 7e-11), 8192, True), overhead=1e-6, cores=2, fitted_p=4)


class Comm:
    def __init__(self, size):
        self.size = size


def row(algorithm, nbytes, us, **options):
    return {"algorithm": algorithm, "options": options, "nbytes": nbytes, "avg_us": us, "valid": True}


@pytest.fixture
def no_table(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "missing.json"))
    reload()  # select() reads the variable once, like the file
    yield tmp_path
    reload()


def test_table_path_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert table_path() == tmp_path / "cache" / "gpulab" / "bcast_tuning.json"
    monkeypatch.setenv(ENV, str(tmp_path / "env.json"))
    assert table_path() == tmp_path / "env.json"
    assert table_path(tmp_path / "explicit.json") == tmp_path / "explicit.json"


def test_margin_keeps_mpi_unless_clearly_beaten():
    assert choose_measured([row("mpi", 1, 100.0), row("chain", 1, 95.0)])[0]["algorithm"] == "mpi"
    assert choose_measured([row("mpi", 1, 100.0), row("chain", 1, 80.0)])[0]["algorithm"] == "chain"
    assert choose_measured([row("mpi", 1, 100.0), row("chain", 1, 80.0)], margin=0.3)[0]["algorithm"] == "mpi"


def test_build_table_ranges_and_lookup():
    rows = [row("mpi", 1024, 10.0), row("binomial", 1024, 20.0),
            row("mpi", 4096, 12.0), row("binomial", 4096, 30.0),
            row("mpi", 65536, 100.0), row("chain", 65536, 50.0, chunk_bytes=16384),
            row("mpi", 1 << 20, 900.0), row("chain", 1 << 20, 500.0, chunk_bytes=16384)]
    table = build_table(rows, p=4)
    ranges = table["ranges"]
    assert [(r["algorithm"], r["lo"], r["hi"]) for r in ranges] == [("mpi", 0, 16384), ("chain", 16384, None)]
    assert ranges[0]["measured_at"] == [1024, 4096] and ranges[1]["options"] == {"chunk_bytes": 16384}
    data = {"tables": {"4": table}}
    assert lookup(data, 0, 4)["algorithm"] == "mpi" and lookup(data, 16383, 4)["algorithm"] == "mpi"
    assert lookup(data, 16384, 4)["algorithm"] == "chain" and lookup(data, 10**12, 4)["algorithm"] == "chain"
    assert lookup(data, 100, 8) is None  # no table for p = 8


def test_candidates_cover_every_algorithm_with_sensible_options():
    names = {name for name, _ in candidates(1 << 20, 8)}
    assert names == {"mpi", "linear", "binomial", "knomial", "scatter_allgather_rd", "scatter_allgather_ring",
                     "chain", "binary_tree", "split_binary_tree"}
    small = candidates(1000, 2)
    assert ("chain", {"chunk_bytes": 1000}) in small  # no chunk is larger than the message
    assert not any(name == "knomial" for name, _ in small)  # radix 3 needs p > 3


def test_select_falls_back_to_mpi_bcast(no_table, monkeypatch):
    for name in ("GPULAB_MACHINE", "GPULAB_TOPOLOGY"):
        monkeypatch.delenv(name, raising=False)
    reload()
    d = select(100_000, Comm(16))
    assert select(100_000, Comm(16)) is d  # decided once, then looked up
    assert isinstance(d, Decision) and d.source == "native"
    assert (d.name, d.options) == ("mpi", {})
    assert "MPICH runs beta" in d.reason and "scatter_allgather_rd on 16" in d.reason


def test_select_uses_model_then_table(tmp_path):
    path = tmp_path / "t.json"
    update(path, p=4, model=MACHINE.to_dict())
    d = select(1 << 20, Comm(4), path)
    assert d.source == "model" and "fitted model" in d.reason
    assert select(1 << 20, Comm(4), path) == d  # deterministic
    assert select(1 << 20, Comm(6), path).source == "model"  # nearest fitted p stands in
    table = build_table([row("mpi", 1024, 10.0), row("knomial", 1024, 5.0, radix=3)], p=4)
    update(path, p=4, table=table)
    d = select(5000, Comm(4), path)
    assert (d.source, d.name, d.options) == ("table", "knomial", {"radix": 3}) and "p=4" in d.reason
    assert select(5000, Comm(5), path).source == "model"  # the table is for p = 4 only
    assert set(json.loads(path.read_text())["models"]) == {"4"}  # update kept the model


def test_load_rejects_other_versions(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError, match="version"):
        load(path)


def test_auto_with_table_and_model_moves_data_on_3_ranks(tmp_path):
    path = tmp_path / "t.json"
    rows = [row("mpi", 1024, 10.0), row("split_binary_tree", 1024, 1.0, chunk_bytes=100),
            row("mpi", 65536, 100.0), row("knomial", 65536, 10.0, radix=3),
            row("mpi", 1 << 20, 1000.0), row("chain", 1 << 20, 10.0, chunk_bytes=65536)]
    update(path, p=3, table=build_table(rows, p=3))
    update(path, p=2, model=MACHINE.to_dict())
    sizes = [0, 1, 1000, 3000, 65536, 300_001, 1 << 21]
    chosen = run_mpi(3, "tests.bcast.model_cases:auto_moves_data", table=str(path), sizes=sizes, timeout=120)
    assert [c[1] for c in chosen[0]] == ["split_binary_tree"] * 4 + ["knomial", "chain", "chain"]
    on_two = run_mpi(2, "tests.bcast.model_cases:auto_moves_data", table=str(path), sizes=sizes, timeout=120)
    assert {c[0] for c in on_two[0]} == {"model"}


def test_plain_bcast_reads_the_env_table(tmp_path):
    path = tmp_path / "t.json"
    update(path, p=2, table=build_table([row("mpi", 64, 9.0), row("linear", 64, 1.0)], p=2))
    sources = run_mpi(2, "tests.bcast.model_cases:auto_via_env", sizes=[10, 100_000], env={ENV: str(path)},
                      timeout=60)
    assert sources[0] == ["table", "table"]


def test_sweep_builds_a_valid_table_on_2_ranks():
    table = run_mpi(2, "tests.bcast.model_cases:tiny_sweep", sizes=[512, 8192], timeout=120)[0]
    assert table["p"] == 2 and [r["lo"] for r in table["ranges"]][0] == 0
    assert all(m["valid"] for m in table["measured"])
    measured = {m["algorithm"] for m in table["measured"]}
    assert {"mpi", "binomial", "chain", "split_binary_tree", "scatter_allgather_ring"} <= measured


def test_cli_tune_fit_and_bcast_write_the_table(tmp_path):
    path = tmp_path / "t.json"
    base = [sys.executable, "-m", "gpulab.cli", "tune"]
    fit = subprocess.run(base + ["fit", "-n", "2", "--sizes", "64,8K,64K", "--time-budget", "0.002",
                                 "--table", str(path), "--quiet"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert fit.returncode == 0, fit.stderr + fit.stdout
    assert "alpha" in fit.stdout and json.loads(path.read_text())["models"]["2"]["fitted_ranks"] == 2
    tune = subprocess.run(base + ["bcast", "-n", "2", "--sizes", "1K,16K", "--chunks", "4K", "--radices", "3",
                                  "--time-budget", "0.002", "--no-fit", "--table", str(path), "--quiet",
                                  "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "h.png")],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert tune.returncode == 0, tune.stderr + tune.stdout
    data = json.loads(path.read_text())
    assert set(data["tables"]) == {"2"} and set(data["models"]) == {"2"}  # the fit survived the sweep
    assert "algorithm='auto' uses" in tune.stdout and (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_confirms_the_runner_up_when_the_winner_fails(monkeypatch):
    """linear wins the sweep by luck and loses every confirmation; chain really is faster."""
    import gpulab.bcast.measurement.measure
    from gpulab.bcast.measurement.experiments import sweep

    calls = []

    def fake_measure(comm, name, nbytes, **options):
        calls.append(name)
        first = calls.count(name) == 1
        us = {"mpi": 100.0, "linear": 50.0 if first else 150.0, "chain": 70.0}.get(name, 200.0)
        return {"algorithm": name, "options": {k: v for k, v in options.items() if k == "chunk_bytes"},
                "nbytes": nbytes, "avg_us": us, "valid": True}

    monkeypatch.setattr(gpulab.bcast.measurement.measure, "measure_bcast", fake_measure)
    rows = sweep(Comm(2), [1 << 20], chunks=(1 << 16,), radices=())
    table = build_table(rows, p=2)
    assert [(r["algorithm"], r["options"]) for r in table["ranges"]] == [("chain", {"chunk_bytes": 1 << 16})]
    confirmed = {r["algorithm"]: r["confirm_speedups"] for r in rows if "confirm_speedups" in r}
    assert min(confirmed["linear"]) < 1 < min(confirmed["chain"])
