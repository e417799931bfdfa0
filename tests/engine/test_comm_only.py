"""`gpulab model rank --comm-only`: AxoNN's communication-only ranking, against its formulas by hand."""

import dataclasses

import pytest

from gpulab.engine.perf.comm_only import comm_only_rank, comm_only_s
from gpulab.engine.perf.machines import machine
from gpulab.engine.perf.predict import gpt_config, rank

M = machine("perlmutter")


def _axonn_get_bw(ip, my):
    """Megatron-AxoNN examples/comm_model.py get_bw(ip, my, "perlmutter"), GB/s."""
    if ip == 1:
        return {2: 76, 4: 225}.get(my, 80)
    if ip == 2:
        return 76 if my == 2 else 40
    return 20


def _axonn_model_v2(B, S, K, H, Gd, Gr, Gc, Gdata, transpose):
    """comm_model.model_v2 in bytes and GB/s, the transposed layer with K on the col term (the kit's fix)."""
    t = B / Gdata / Gd * S
    dp = 4 * (Gdata - 1) / Gdata * K * H * H / (Gc * Gr * Gd) * 2
    depth = 3 * (Gd - 1) / Gd * K * H * H / (Gc * Gr) * 2
    if not transpose:
        row, col = 2 * (Gr - 1) / Gr * t * H / Gc * 2, 2 * 2 * (Gc - 1) / Gc * t * K * H / Gr * 2
    else:
        row, col = 2 * 2 * (Gr - 1) / Gr * t * H / Gc * 2, 2 * (Gc - 1) / Gc * t * K * H / Gr * 2
    time = 0.0
    for vol, size, ip in ((col, Gc, 1), (row, Gr, Gc), (depth, Gd, Gc * Gr), (dp, Gdata, Gc * Gr * Gd)):
        if size > 1:
            time += vol / (_axonn_get_bw(ip, size) * 1e9)
    return time


@pytest.mark.parametrize("shape", [(2, 2, 4, 8), (4, 1, 16, 2), (1, 8, 2, 4), (1, 1, 1, 128)])
def test_comm_only_is_axonns_model_by_hand(shape):
    cfg = gpt_config("gpt-20b")
    R, C, D, P = shape
    B, S, H = 256, 2048, cfg.n_embd
    want = cfg.n_layer * sum(_axonn_model_v2(B, S, K, H, D, R, C, P, tr)
                             for K, tr in ((3, False), (1, True), (4, False), (4, True)))
    got = comm_only_s(cfg, shape, B, M)
    assert got["comm_s"] == pytest.approx(want, rel=1e-12)
    assert set(got["groups"]) == {g for g, n in zip(("row", "col", "depth", "data"), shape) if n > 1}


def test_no_latency_and_no_compute_in_it():
    cfg = gpt_config("gpt-20b")
    slow = dataclasses.replace(M, intra=dataclasses.replace(M.intra, alpha=1e-2), peak_flops=M.peak_flops / 100)
    for shape in [(2, 2, 4, 8), (1, 1, 64, 2)]:
        assert comm_only_s(cfg, shape, 256, slow)["comm_s"] == comm_only_s(cfg, shape, 256, M)["comm_s"]


def test_ranking_covers_the_full_models_candidates_and_says_where_each_stands(capsys):
    cfg = gpt_config("gpt-20b")
    rows = comm_only_rank(cfg, 256, 512, M)
    full = rank(cfg, 256, 512, M, recompute=True, flash_attention=True)
    assert sorted(tuple(r["shape"]) for r in rows) == sorted(tuple(p["shape"]) for p in full)
    assert [r["comm_s"] for r in rows] == sorted(r["comm_s"] for r in rows)
    assert sorted(r["full_place"] for r in rows) == list(range(1, len(full) + 1))
    first = next(r for r in rows if r["full_place"] == 1)
    assert first["shape"] == full[0]["shape"] and first["full_iter_s"] == pytest.approx(full[0]["iter_s"])

    from gpulab.cli import main
    assert main(["model", "rank", "--comm-only", "--world", "256", "--model", "gpt-20b", "--machine",
                 "perlmutter", "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "communication only (AxoNN's model)" in out and "pick: " in out and "by the full model" in out
    assert len([line for line in out.splitlines() if line[:3].strip().isdigit()]) == 5


def test_a_machine_fitted_here_gives_each_group_its_fitted_all_reduce_rate():
    """No bandwidth table: a group's rate is the ring all-reduce's wire bytes over the fitted seconds per byte."""
    from gpulab.engine.perf.comm_only import wire_bandwidth
    from gpulab.engine.perf.fitted_machine import FittedMachine
    from gpulab.engine.perf.rings import ring
    from tests.engine.util import tiny_config

    line = {f"{op}/{g}": [1e-4, 1e-9 * g] for op in ("all_reduce", "all_gather", "reduce_scatter") for g in (2, 4)}
    fitted = FittedMachine(name="line", ranks=4, cores=2, collectives=line, matmul_rate=1e10, elementwise_rate=1e9,
                           kernel_overhead=1e-6, share=1.0, machine_peak=4e10, overlap={"poll": 0.0},
                           memory_bytes=1e9)
    for g in (2, 4):
        assert wire_bandwidth(fitted, g, 1) == pytest.approx(ring("all_reduce", g)[1] / (1e-9 * g), rel=1e-9)
    cfg = tiny_config((2, 1, 1, 2))
    got = comm_only_s(cfg, (2, 1, 1, 2), 8, fitted)
    assert set(got["groups"]) == {"row", "data"} and got["comm_s"] > 0
    # a slower fitted link, the same bytes: the time scales with it
    slow = dataclasses.replace(fitted, collectives={k: [a, 2 * b] for k, (a, b) in line.items()})
    assert comm_only_s(cfg, (2, 1, 1, 2), 8, slow)["comm_s"] == pytest.approx(2 * got["comm_s"], rel=1e-9)
