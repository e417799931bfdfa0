"""The performance model's terms against the engine, the machine profiles, predict/rank, the CLI.

Timing accuracy is not tested here (no timing assertions in tests): the model
against measured iterations is docs/engine_perfmodel.md.
"""

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

from gpulab.engine import grid_shapes
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.fitted_machine import FittedMachine
from gpulab.engine.perf.flops import model_flops, params_count, rank_work
from gpulab.engine.perf.machines import MACHINES, machine
from gpulab.engine.perf.predict import GPT_SIZES, candidate_shapes, gpt_config, predict, rank
from gpulab.engine.perf.rings import ring
from gpulab.engine.perf.terms import activation_values, axonn_layer_volumes, comm_rows
from gpulab.engine.perf.volume import collective_calls, totals
from gpulab.machines import SCHEMA_VERSION
from tests.engine.util import tiny_config

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [(1, 1, 1, 4), (2, 1, 2, 1), (1, 2, 2, 2), (2, 2, 1, 2), (4, 2, 1, 1), (1, 1, 8, 1)]


def _expand(rows):
    out = Counter()
    for r in rows:
        out[(r["group"], r["op"])] += r["count"]
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("overlap", [None, Overlap(cache=True), Overlap.everything(bucket_bytes=512)])
@pytest.mark.parametrize("zero1", [False, True])
def test_folded_rows_send_what_the_engine_sends(shape, overlap, zero1):
    cfg = tiny_config(shape, n_layer=3)
    calls = collective_calls(cfg, shape, 8 * shape[2] * shape[3], 8, grad_norm=True, overlap=overlap,
                             distributed_optimizer=zero1)
    rows = comm_rows(cfg, shape, 8 * shape[2] * shape[3], 8, overlap, distributed_optimizer=zero1)
    got = totals([{**r, "nbytes": r["nbytes"] * r["count"]} for r in rows], by="group", value="nbytes")
    want = totals(calls, by="group", value="nbytes")
    # each side pads its buckets to a multiple of the group (< one value per member and bucket); with buckets
    # the folded rows estimate how many there are, so their padding may differ from the planned buckets'
    item = np.dtype(cfg.dtype).itemsize
    padding = {g: item * (sum(r["count"] * r["group_size"] for r in rows if r["group"] == g and r["layer"] in
                           ("grads", "params")) + sum(c["group_size"] for c in calls if c["group"] == g))
               for g in want} if zero1 and overlap is not None and overlap.buckets else {}
    assert got.keys() == want.keys()
    assert all(abs(got[g] - want[g]) <= max(1e-6 * want[g], padding.get(g, 0)) for g in want), (got, want)
    if overlap is None or not overlap.buckets:  # bucket counts are estimated from sizes, not planned
        assert _expand(rows) == Counter((c["group"], c["op"]) for c in calls)


@pytest.mark.parametrize("shape", [(2, 4, 2, 2), (4, 2, 1, 8), (8, 1, 2, 1)])
@pytest.mark.parametrize("K, transposed, layer", [(3, False, "attn.c_attn"), (1, True, "attn.c_proj"),
                                                  (4, False, "mlp.c_fc"), (4, True, "mlp.c_proj")])
def test_axonn_volumes_corrected_match_the_engine_and_the_bug_does_not(shape, K, transposed, layer):
    from gpulab.engine import GPTConfig

    R, C, D, P = shape
    H, B, S = 64, 16, 8
    cfg = GPTConfig(vocab_size=64, block_size=S, n_layer=1, n_head=8, n_embd=H)
    engine = [r for r in collective_calls(cfg, shape, B, S) if r["layer"] == f"h.0.{layer}"]
    wire = {g: sum(r["wire_bytes"] for r in engine if r["group"] == g and r["op"] == "all_reduce") / 8
            for g in ("row", "col")}
    fwd_group = "row" if transposed else "col"  # AxoNN counts forward twice (recomputation)
    model = axonn_layer_volumes(K, H, B, S, shape, transposed)
    model[fwd_group] /= 2
    assert model["row"] == pytest.approx(wire["row"]) and model["col"] == pytest.approx(wire["col"])
    if transposed and K > 1:
        bug = axonn_layer_volumes(K, H, B, S, shape, transposed, axonn_bug=True)
        bug[fwd_group] /= 2
        assert bug["row"] != pytest.approx(wire["row"]) or bug["col"] != pytest.approx(wire["col"])


def test_flops_and_parameter_counts():
    for name in GPT_SIZES:
        nominal = float(name.split("-")[1][:-1]) * 1e9
        assert abs(params_count(gpt_config(name)) / nominal - 1) < 0.06, name
    cfg = tiny_config((2, 1, 1, 1))
    for shape in grid_shapes(4):
        if shape[1] == 1:  # with col 1 nothing is computed twice: the ranks' matmuls add up to the model
            total = sum(rank_work(cfg, shape, 8, 8)["matmul_flops"] for _ in range(4))
            assert total == pytest.approx(model_flops(cfg, 8, 8))
    assert rank_work(cfg, (1, 4, 1, 1), 8, 8)["matmul_flops"] * 4 > model_flops(cfg, 8, 8)


def test_machine_profiles_cite_every_number():
    for name in MACHINES:
        m = machine(name)
        keys = " ".join(m.sources)
        for needed in ("peak_flops", "memory_GB", "mem_bandwidth_GBps", "intra.bandwidth", "inter.bandwidth",
                       "intra.alpha", "inter.alpha", "ranks_per_node", "matmul_efficiency"):
            assert needed in keys, (name, needed)
        assert all(len(v) > 20 for v in m.sources.values())
    pm = machine("perlmutter")
    assert pm.ranks_per_node == 4 and pm.bandwidth(4, 1) == 225e9  # AxoNN's measured table
    assert pm.level(4, 1) is pm.intra and pm.level(2, 4) is pm.inter
    h = machine("dgx-h100")
    assert h.bandwidth(8, 1) == h.intra.bandwidth and h.bandwidth(2, 8) == h.inter.bandwidth
    steps, factor = ring("all_reduce", 8)
    assert (steps, factor) == (14, 1.75)
    assert h.collective_s("all_gather", 8, 1, 1e9) == pytest.approx(7 * h.intra.alpha + 0.875e9 / h.intra.bandwidth)
    with pytest.raises(KeyError, match="unknown machine"):
        machine("summit")


def test_overlap_and_memory_in_predictions():
    cfg, m = gpt_config("gpt-20b"), machine("perlmutter")
    shape = (4, 2, 4, 32)
    off = predict(cfg, shape, 1024, m, None, recompute=True, flash_attention=True)
    on = predict(cfg, shape, 1024, m, Overlap(oar=True, ors=True, oag=True, buckets=True,
                                               bucket_bytes=64 << 20), recompute=True, flash_attention=True)
    assert off["hidden_comm_s"] == 0 and on["hidden_comm_s"] > 0 and on["iter_s"] < off["iter_s"]
    assert off["comm_s"] <= on["comm_s"] < 1.01 * off["comm_s"]  # buckets: the same bytes, more latencies
    cached = predict(cfg, shape, 1024, m, Overlap(cache=True), recompute=True, flash_attention=True)
    assert cached["memory"]["weight_cache"] > 0 and cached["comm_s"] < off["comm_s"]
    assert abs(off["iter_s"] - off["compute_s"] - off["exposed_comm_s"]) < 1e-12
    ranked = rank(cfg, 1024, 1024, m, recompute=True, flash_attention=True, keep_unfit=True)
    fits = [p["fits"] for p in ranked]
    assert fits.index(False) == sum(fits)  # fitting ones first
    times = [p["iter_s"] for p in ranked if p["fits"]]
    assert times == sorted(times) and len(times) > 10
    assert all(np.prod(p["shape"]) == 1024 for p in ranked)
    assert (1024, 1, 1, 1) not in candidate_shapes(cfg, 1024, 1024)  # 56 heads do not split 1024 ways


def test_distributed_optimizer_gathers_exposed_and_splits_the_optimizer_state():
    """The engine's ZeRO-1 all-gathers the updated parameters in the optimizer step, after backward:
    priced exposed even with every overlap on (a prefetched weight all-gather is not), the
    reduce-scatter bucketed behind backward as the all-reduce was; AdamW's 12 of 16 bytes split over P."""
    cfg, m, shape = gpt_config("gpt-20b"), machine("perlmutter"), (4, 2, 4, 32)
    ov = Overlap(oar=True, ors=True, oag=True, buckets=True, bucket_bytes=64 << 20)
    rows = comm_rows(cfg, shape, 1024, overlap=ov, distributed_optimizer=True)
    gathers = [r for r in rows if r["phase"] == "optimizer" and r["op"] == "all_gather"]
    assert gathers and all(r["kind"] is None for r in gathers)
    assert all(r["kind"] == "DP" for r in rows if r["op"] == "reduce_scatter" and r["phase"] == "grad-sync")
    plain = predict(cfg, shape, 1024, m, ov, recompute=True, flash_attention=True)
    zero1 = predict(cfg, shape, 1024, m, ov, recompute=True, flash_attention=True, distributed_optimizer=True)
    values = m.value_bytes / 4  # the float32 config's bytes as the machine's values (predict does so)
    gather_s = sum(r["count"] * m.collective_s("all_gather", r["group_size"], r["stride"], r["nbytes"] * values)
                   for r in gathers)
    assert zero1["exposed_comm_s"] >= gather_s > 0
    assert zero1["exposed_comm_s"] > plain["exposed_comm_s"]
    ratio = zero1["memory"]["parameter_state"] / plain["memory"]["parameter_state"]
    assert ratio == pytest.approx((16 - 12 * (1 - 1 / 32)) / 16)


def test_activation_model_is_the_engines(tmp_path):
    from tests.mpi_harness import run_mpi

    shapes = [(1, 1, 1, 4), (2, 1, 2, 1), (1, 2, 1, 2), (4, 1, 1, 1)]
    rows = run_mpi(4, "tests.engine.overlap_cases:identical_numbers", timeout=200, shapes=shapes,
                   variants=["oag"], steps=1)[0]
    for r in rows:
        shape = tuple(r["shape"])
        predicted = activation_values(tiny_config(shape), shape, 8, 8) * 8  # float64
        measured = r["memory"]["activations"]
        assert abs(predicted - measured) <= 0.05 * measured + 8 * 8 * 9, (shape, predicted, measured)


def test_fitted_machine_round_trip_and_nearest_group_size(tmp_path):
    m = FittedMachine(name="t", ranks=8, cores=2, collectives={"all_reduce/2": [1e-4, 1e-9],
                                                               "all_reduce/8": [1e-3, 1e-8]},
                      matmul_rate=1e10, elementwise_rate=1e9, kernel_overhead=1e-6, share=4.0,
                      machine_peak=5e10, overlap={"poll": 0.2, "thread": 0.5, "none": 0.0}, memory_bytes=1e9)
    m.save(tmp_path / "m.json")
    back = machine(tmp_path / "m.json")
    assert back == m and back.peak == 5e10 / 8
    assert back.collective_s("all_reduce", 2, 1, 1000) == pytest.approx(1e-4 + 1e-6)
    assert back.collective_s("all_reduce", 4, 2, 0) in (1e-4, 1e-3)  # nearest fitted size
    assert back.collective_s("all_reduce", 1, 1, 1e6) == 0.0
    assert back.compute_s({"matmul_flops": 1e10, "elementwise": 0, "kernels": 0}) == pytest.approx(1.0)
    assert back.overlap_efficiency_for("none") == 0.0 and back.overlap_efficiency_for("thread") == 0.5
    # the engine's profile scales the work, not the fixed cost per array operation
    from dataclasses import replace

    profiled = replace(m, scale=2.5)
    assert profiled.compute_s({"matmul_flops": 1e10, "elementwise": 1e9, "kernels": 0}) == pytest.approx(2.5 * 2)
    assert profiled.compute_s({"matmul_flops": 0, "elementwise": 0, "kernels": 1000}) == pytest.approx(1e-3)


def test_the_profiled_compute_is_not_multiplied_by_the_share_again():
    """The engine's profile ran on every rank at once, so its scale holds the sharing of the cores; ``share``
    says how much of it that is (the matmul efficiency reads it), and multiplies no compute time."""
    work = {"matmul_flops": 4e9, "elementwise": 1e8, "kernels": 500}
    m = FittedMachine(name="m", ranks=4, cores=2, collectives={}, matmul_rate=2e10, elementwise_rate=1e9,
                      kernel_overhead=2e-5, share=1.8, machine_peak=4e10, overlap={}, memory_bytes=1e9, scale=1.5)
    assert m.compute_s(work) == pytest.approx(1.5 * (4e9 / 2e10 + 1e8 / 1e9) + 500 * 2e-5)
    assert m.matmul_efficiency == pytest.approx(2e10 / 1.8 / (4e10 / 4))


def test_data_parallel_buckets_in_flight_together_pay_one_latency():
    """With ``buckets`` the gradient all-reduce runs as several non-blocking calls in flight together:
    priced as one call over all their bytes (one latency), each bucket its share, not one latency each."""
    alpha, beta = 3e-3, 1e-9  # a latency that dwarfs the bytes, as 8 ranks on 2 cores
    m = FittedMachine(name="t", ranks=4, cores=2, collectives={"all_reduce/4": [alpha, beta]}, matmul_rate=1e10,
                      elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=1e10,
                      overlap={"poll": 0.0}, memory_bytes=1e9)
    cfg, shape = tiny_config((1, 1, 1, 4)), (1, 1, 1, 4)
    off = predict(cfg, shape, 8, m, Overlap())["groups"]["data"]
    on = predict(cfg, shape, 8, m, Overlap(buckets=True, bucket_bytes=1024))["groups"]["data"]
    assert off["calls"] == 1 and on["calls"] > 3  # several buckets
    assert on["bytes"] == pytest.approx(off["bytes"], rel=0.01)  # the same gradients, padded per bucket
    assert on["time_s"] == pytest.approx(alpha + beta * on["bytes"])  # one latency for all of them
    assert on["time_s"] < off["time_s"] + alpha  # not on["calls"] latencies


def test_what_overlaps_is_priced_as_the_non_blocking_call_it_is():
    """With overlap on the engine issues MPI_Iallreduce (buckets) and the rest of its twins, whose
    algorithms MPICH selects apart from the blocking calls': a fit that timed them prices those calls
    with their own line; the same call with overlap off, or a fit that timed no twin, as the blocking one."""
    blocking, twin = [1e-4, 1e-8], [1e-4, 3e-8]
    m = FittedMachine(name="t", ranks=4, cores=2, collectives={"all_reduce/4": blocking, "iall_reduce/4": twin},
                      matmul_rate=1e10, elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=1e10,
                      overlap={"poll": 0.0}, memory_bytes=1e9)
    cfg, shape = tiny_config((1, 1, 1, 4)), (1, 1, 1, 4)
    off = predict(cfg, shape, 8, m, Overlap())["groups"]["data"]
    on = predict(cfg, shape, 8, m, Overlap(buckets=True))["groups"]["data"]
    assert off["time_s"] == pytest.approx(1e-4 + 1e-8 * off["bytes"])
    assert on["time_s"] == pytest.approx(1e-4 + 3e-8 * on["bytes"])
    older = replace(m, collectives={"all_reduce/4": blocking})  # fitted before the twins were timed
    assert predict(cfg, shape, 8, older, Overlap(buckets=True))["groups"]["data"]["time_s"] == \
        pytest.approx(1e-4 + 1e-8 * on["bytes"])
    assert older.collective_s("iall_reduce", 4, 1, 1e6) == older.collective_s("all_reduce", 4, 1, 1e6)
    profile = machine("perlmutter")  # a published profile: one ring for both
    assert profile.collective_s("iall_gather", 8, 1, 1e6) == profile.collective_s("all_gather", 8, 1, 1e6)
    # what an engine sends back (its fields, through JSON) is the same fit, pricing the twin alike
    back = FittedMachine.from_dict(json.loads(json.dumps(asdict(m))))
    assert back == m and back.collective_s("iall_reduce", 4, 1, 1e6) == m.collective_s("iall_reduce", 4, 1, 1e6)
    assert back.collective_s("iall_reduce", 4, 1, 1e6) != back.collective_s("all_reduce", 4, 1, 1e6)


def test_fitted_machine_interpolates_its_timed_points_and_averages_them():
    """Two regimes no one line follows: 1 KiB..16 KiB at 1 ms, then 1 s per MB (a slow link past its burst)."""
    points = {"all_gather/2": [[1024, 1e-3], [16384, 1e-3], [1 << 20, 1e-3 + 1.0 * ((1 << 20) - 16384) / 1e6]]}
    m = FittedMachine(name="t", ranks=2, cores=2, collectives={"all_gather/2": [5e-4, 1e-9]}, matmul_rate=1e10,
                      elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=1e10,
                      overlap={"poll": 0.0}, memory_bytes=1e9, collective_points=points, sources={"measured": "t"})
    at = lambda n: m.collective_s("all_gather", 2, 1, n)  # noqa: E731
    assert at(0) == pytest.approx(5e-4) and at(512) == pytest.approx(7.5e-4)  # toward the line's alpha
    assert at(8192) == pytest.approx(1e-3)
    assert at(16384 + 500_000) == pytest.approx(1e-3 + 0.5)  # on the measured segment
    assert at((1 << 20) + 1_000_000) == pytest.approx(at(1 << 20) + 1.0)  # past it: the last slope
    line = replace(m, collective_points={})
    assert line.collective_s("all_gather", 2, 1, 1e6) == pytest.approx(5e-4 + 1e-3)
    slower = replace(m, collective_points={"all_gather/2": [[n, 3 * t] for n, t in points["all_gather/2"]]})
    assert FittedMachine.mean([m, slower]).collective_s("all_gather", 2, 1, 8192) == pytest.approx(2e-3)


def test_a_timed_point_above_a_larger_sizes_is_held_to_it():
    """A collective of more bytes never costs less: a spike timed at one size (a rank descheduled) is
    priced as the least time at that size or above; every point that rises with the size stays."""
    points = {"all_gather/4": [[1024, 3e-4], [16384, 2.6e-3], [65536, 5.5e-3], [262144, 7.5e-4],
                               [1 << 20, 5.2e-3], [4 << 20, 2.7e-3]]}
    m = FittedMachine(name="t", ranks=8, cores=2, collectives={"all_gather/4": [1e-4, 1e-9]}, matmul_rate=1e10,
                      elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=1e10,
                      overlap={"poll": 0.0}, memory_bytes=1e9, collective_points=points)
    at = lambda n: m.collective_s("all_gather", 4, 1, n)  # noqa: E731
    assert at(1024) == pytest.approx(3e-4)  # below every later point: as timed
    assert at(16384) == pytest.approx(7.5e-4) and at(65536) == pytest.approx(7.5e-4)  # held to 256 KiB's
    assert at(262144) == pytest.approx(7.5e-4)
    assert at(1 << 20) == pytest.approx(2.7e-3) and at(4 << 20) == pytest.approx(2.7e-3)  # held to 4 MiB's
    assert at(8 << 20) == pytest.approx(2.7e-3)  # past the largest: the last segment's slope, here flat
    assert at(40960) == pytest.approx(7.5e-4)  # between two held points


def test_fit_runs_on_two_ranks(tmp_path):
    out = tmp_path / "m2.json"
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    run = gpulab("model", "fit", "-n", "2", "--out", str(out), "--reps", "2", "--repeat", "2", env=env, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    m = machine(out)
    assert m.trust["fits"] == 2 and m.trust["reps"] == 2  # the mean of two fits says how far apart they came out
    assert m.trust["fit_to_fit"] >= 0 and m.trust["spread"] >= 0 and m.trust["other_load_per_core"] >= 0
    assert "trust: " in run.stdout and "fits of this machine: " in run.stdout
    assert m.ranks == 2 and set(m.collectives) == {"all_reduce/2", "all_gather/2", "reduce_scatter/2",
                                                   "iall_reduce/2", "iall_gather/2", "ireduce_scatter/2"}
    assert set(m.collective_points) == set(m.collectives)  # the timed points the model interpolates
    assert m.matmul_rate > 0 and m.share >= 1 and 0 <= m.overlap["poll"] <= 1
    assert (m.node_ranks, m.node_cores) == (2, len(os.sched_getaffinity(0)))  # one node: every rank, its cores
    assert ("0 used" in m.sources["overlap"]) == (2 > len(os.sched_getaffinity(0)))  # overlap_used, one node
    assert set(m.overlap_probe) == {"poll", "thread"} and all(0 <= v <= 1 for v in m.overlap_probe.values())
    assert m.scale > 0 and m.kernel_overhead > 0  # the engine's own serial step, profiled
    assert "on every rank at once" in m.sources["compute"]  # ... on both ranks together
    assert m.call_wait >= 0 and m.row_wait >= 0 and m.data_wait >= 0  # the waits calibrated, each on its grid
    assert all(f"grid {g}" in m.sources["call_wait"] for g in ("(1, 2, 1, 1)", "(2, 1, 1, 1)", "(1, 1, 1, 2)"))
    p = predict(tiny_config((2, 1, 1, 1)), (2, 1, 1, 1), 8, m, None, seq_len=8)
    assert p["iter_s"] > 0 and p["fits"]


def test_fit_times_the_arrays_where_the_runs_keep_them(tmp_path):
    out = tmp_path / "fake.json"
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    run = gpulab("model", "fit", "-n", "2", "--device", "fake", "--out", str(out), "--reps", "1", env=env,
                 timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    m = machine(out)
    assert m.device == "fake" and m.name.endswith("arrays on fake") and m.memory_bytes > 0
    assert m.matmul_rate > 0 and m.scale > 0 and set(m.collective_points) == {
        "all_reduce/2", "all_gather/2", "reduce_scatter/2", "iall_reduce/2", "iall_gather/2", "ireduce_scatter/2"}
    assert json.loads(out.read_text())["schema_version"] == SCHEMA_VERSION  # a machine file of the one schema


def test_overlap_hides_nothing_where_a_nodes_ranks_outnumber_its_cores():
    from gpulab.engine.perf.probes import overlap_used

    measured = {"poll": 0.44, "thread": 0.13}
    used, why = overlap_used(measured, node_ranks=4, node_cores=2)  # 4 ranks on one 2-core machine
    assert used == {"poll": 0.0, "thread": 0.0}
    assert why == "0 used (measured poll 0.44, thread 0.13): 4 ranks share the 2 cores of a node"
    assert overlap_used(measured, node_ranks=2, node_cores=1)[0] == used  # an emulated node on its own core
    for ranks, cores in ((2, 2), (8, 16), (1, 1)):  # a core for every rank of a node
        assert overlap_used(measured, node_ranks=ranks, node_cores=cores) == (measured, "")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to bind the ranks apart")
def test_a_nodes_cores_are_those_its_ranks_may_run_on_together():
    from tests.mpi_harness import run_mpi

    a, b = sorted(os.sched_getaffinity(0))[:2]
    apart = run_mpi(2, "tests.engine.overlap_cases:node_cores_under_affinity", cores=[[a], [b]], timeout=60)
    together = run_mpi(2, "tests.engine.overlap_cases:node_cores_under_affinity", cores=[[a], [a]], timeout=60)
    assert [tuple(x) for x in apart] == [(2, 2)] * 2  # a core each (as Slurm binds tasks): nothing outnumbered
    assert [tuple(x) for x in together] == [(2, 1)] * 2  # an emulated node of 2 ranks on its own core


def gpulab(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "gpulab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_cli_ranks_shapes_and_prints_its_assumptions():
    run = gpulab("model", "rank", "--world", "1024", "--model", "gpt-20b", "--machine", "perlmutter")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "gpt-20b on 1024 x perlmutter, batch 1024 sequences"
    assert lines[1].split()[:6] == ["#", "row", "col", "depth", "data", "iter"]
    times = [float(line.split()[5]) for line in lines[2:12]]
    assert times == sorted(times)
    assert "activation recomputation: on" in run.stdout and "NVIDIA A100" in run.stdout
    run = gpulab("model", "predict", "--mesh", "4,8,2,16", "--model", "gpt-20b", "--machine", "frontier", "--json")
    assert run.returncode == 0 and json.loads(run.stdout)[0]["shape"] == [4, 8, 2, 16]
    run = gpulab("model", "rank", "--world", "64", "--machine", "summit")
    assert run.returncode != 0 and "unknown machine 'summit'" in run.stderr
    assert "frontier" in gpulab("model", "machines").stdout
