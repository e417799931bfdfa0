"""The fitted model's own signs of how far to trust it (gpulab.engine.perf.trust)."""

from dataclasses import replace

import pytest

from gpulab.engine.perf.fitted_machine import FittedMachine
from gpulab.engine.perf.trust import LIMITS, combine, conditions, fit_to_fit, stolen, verdict


def machine(points, trust):
    return FittedMachine(name="t", ranks=2, cores=2, collectives={k: [1e-5, 1e-9] for k in points},
                         matmul_rate=1e9, elementwise_rate=1e9, kernel_overhead=1e-6, share=1.0, machine_peak=1e9,
                         overlap={"poll": 0.5}, memory_bytes=1e9, collective_points=points, trust=trust,
                         sources={"measured": "here"})


def test_one_fit_records_its_median_spread_and_the_load_beyond_its_ranks():
    t = conditions({"all_reduce/2": [0.1, 0.3], "all_gather/2": [0.2, 0.9]}, ranks=2, cores=2, steal=0.01, reps=3)
    assert t["fits"] == 1 and t["spread"] == pytest.approx(0.25) and t["steal"] == 0.01
    assert t["other_load_per_core"] >= 0
    # one repetition: no spread to speak of, and the verdict says so
    alone = conditions({"all_reduce/2": [0.0, 0.0]}, ranks=2, cores=2, steal=None, reps=1)
    assert alone["spread"] is None
    assert any("--repeat 2" in line for line in verdict({**alone, "other_load_per_core": 0.0})[1])


def test_fit_to_fit_is_the_median_relative_range_over_timed_points():
    a = {"all_reduce/2": [[1024, 1.0], [4096, 2.0]], "all_gather/2": [[1024, 1.0], [4096, 1.0]]}
    b = {"all_reduce/2": [[1024, 1.0], [4096, 6.0]], "all_gather/2": [[1024, 3.0], [4096, 1.0]]}
    # ranges over means: 0, 4/4 = 1, 2/2 = 1, 0 -> median 0.5
    assert fit_to_fit([a, b]) == pytest.approx(0.5)
    assert fit_to_fit([a, a]) == 0


def test_mean_of_fits_keeps_the_worst_sign_and_their_distance():
    a = {"all_reduce/2": [[1024, 1.0]]}
    b = {"all_reduce/2": [[1024, 3.0]]}
    quiet = {"fits": 1, "reps": 2, "spread": 0.1, "other_load_per_core": 0.0, "steal": 0.0}
    busy = {**quiet, "spread": 0.4, "other_load_per_core": 0.8}
    m = FittedMachine.mean([machine(a, quiet), machine(b, busy)])
    assert m.trust == {"fits": 2, "reps": 2, "spread": 0.4, "other_load_per_core": 0.8, "steal": 0.0,
                       "fit_to_fit": pytest.approx(1.0)}
    ok, lines = verdict(m.trust)
    assert ok is False and sum("do not trust" in line for line in lines) == 2  # fit_to_fit and the load
    assert m.assumptions()[-len(lines) - 1] == "trust: LOW, the predictions may be far off"
    assert combine([quiet, quiet], 0.0)["fits"] == 2


def test_verdict_within_limits_and_unknown():
    within = {k: v * 0.9 for k, v in LIMITS.items()}
    ok, lines = verdict({"fits": 2, "reps": 2, **within})
    assert ok is True and len(lines) == len(LIMITS) and not any("do not trust" in line for line in lines)
    for key, limit in LIMITS.items():  # each sign alone past its limit turns the verdict
        assert verdict({"fits": 2, "reps": 2, **within, key: limit * 1.1})[0] is False, key
    assert verdict({})[0] is None  # fits saved before the kit recorded it
    old = replace(machine({}, {}), trust={})
    assert "trust: unknown" in old.assumptions()


def test_stolen_reads_proc_stat_or_says_unknown():
    assert stolen([]) is None
    share = stolen([0] * 8)
    assert share is None or 0 <= share <= 1


def test_overlap_where_a_nodes_ranks_share_its_cores_carries_a_warning():
    from gpulab.engine.parallel.overlap import Overlap
    from gpulab.engine.perf.probes import overlap_used
    from gpulab.engine.perf.trust import caveat

    zeroed, why = overlap_used({"poll": 0.3, "thread": 0.1}, node_ranks=2, node_cores=1)
    assert zeroed == {"poll": 0.0, "thread": 0.0} and "2 ranks share the 1 core of a node" in why
    crowded = replace(machine({}, {}), node_ranks=2, node_cores=1)  # 2 ranks, 2 cores: compute not shared
    assert caveat(crowded, 0.5, 1.0) is None and caveat(crowded, 0.5, 1.0, Overlap()) is None  # nothing overlaps
    assert caveat(crowded, 0.5, 1.0, Overlap(oar=True, progress="none")) is None  # nothing moves anyway
    warned = caveat(crowded, 0.5, 1.0, Overlap(oar=True))
    assert warned.startswith("overlap where 2 ranks share the 1 core of a node: priced as hiding nothing"), warned
    assert overlap_used({"poll": 0.3}, node_ranks=2, node_cores=2) == ({"poll": 0.3}, "")
    kept = replace(crowded, node_cores=2)
    assert caveat(kept, 0.5, 1.0, Overlap(oar=True)) is None  # a core per rank: the probe's value is used
    assert caveat(replace(crowded, node_ranks=0, node_cores=0), 0.5, 1.0, Overlap(oar=True)) is None  # older fits


def test_a_prediction_warns_when_compute_dominates_on_shared_cores():
    from gpulab.engine.perf.machines import machine as profile
    from gpulab.engine.perf.predict import predict
    from gpulab.engine.perf.trust import COMPUTE_SHARE, caveat

    shared = machine({}, {})  # 2 ranks on 2 cores: not shared
    assert caveat(shared, 1.0, 1.0) is None
    shared = replace(shared, ranks=4)
    assert caveat(shared, COMPUTE_SHARE * 0.99, 1.0) is None  # the links dominate
    assert "4 ranks sharing 2 cores" in caveat(shared, COMPUTE_SHARE, 1.0)
    assert caveat(profile("perlmutter"), 1.0, 1.0) is None  # a GPU profile: no cores shared
    from gpulab.engine import GPTConfig

    cfg = GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=8, dtype="float64")
    slow = replace(shared, collectives={f"{op}/{g}": [1e-5, 1e-9] for op in ("all_reduce", "all_gather",
                                                                             "reduce_scatter") for g in (2, 4)})
    p = predict(cfg, (1, 1, 1, 4), 8, slow, None, seq_len=8)
    assert p["compute_s"] >= COMPUTE_SHARE * p["iter_s"] and "sharing 2 cores" in p["caveat"]  # compute-bound
    fast = replace(slow, matmul_rate=1e15, elementwise_rate=1e15, kernel_overhead=0.0)
    assert predict(cfg, (1, 1, 1, 4), 8, fast, None, seq_len=8)["caveat"] is None  # the collectives dominate
