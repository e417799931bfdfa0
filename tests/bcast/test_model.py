"""The alpha-beta cost model: textbook formulas, limits, best chunk, hierarchy, profiles (no MPI job)."""

import math

import pytest

from gpulab.bcast import ALGORITHMS
from gpulab.bcast.algorithms import registry
from gpulab.bcast.cost.hockney import (
    Machine,
    best_chunk,
    breakdown,
    choose,
    mpich_choice,
    predict,
    stretch,
    textbook,
)
from gpulab.bcast.cost.profiles import PROFILES, profile, table
from gpulab.bcast.measurement import report
from gpulab.machines import Link, LinkLevel

A, B = 5e-6, 1e-9  # 5 us, 1 GB/s
PLAIN = Machine("plain", Link.plain(A, B), Link.plain(A, B))
# eager below 8 KiB (sender copies), single-copy above (receiver copies), Python overhead, 2 cores
REAL = Machine("real", Link(LinkLevel(2e-6, 2e-10), LinkLevel(5e-6, 7e-11), 8192, True),
               Link(LinkLevel(2e-6, 2e-10), LinkLevel(5e-6, 7e-11), 8192, True), overhead=1e-6, cores=2)
TWO_LEVEL = Machine("two-level", Link.plain(1e-6, 1e-11), Link.plain(3e-6, 1e-10), ranks_per_node=4)
FLAT = [a for a in ALGORITHMS if a != "hierarchical"]


@pytest.mark.parametrize("machine", [PLAIN, REAL, TWO_LEVEL])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_one_rank_costs_nothing_and_every_algorithm_is_modelled(machine, algorithm):
    assert predict(algorithm, 1 << 20, 1, machine) == 0
    for p in (2, 3, 5, 8, 16):
        assert predict(algorithm, 1 << 20, p, machine) > 0


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 16, 33])
def test_textbook_formulas(p):
    n, t = 1 << 20, A + (1 << 20) * B
    assert predict("linear", n, p, PLAIN) == pytest.approx((p - 1) * t)
    assert predict("binomial", n, p, PLAIN) == pytest.approx(math.ceil(math.log2(p)) * t)
    assert predict("knomial", n, p, PLAIN, radix=4) <= 3 * math.ceil(math.log(p, 4) - 1e-9) * t * (1 + 1e-9)
    k = 16
    assert predict("chain", n, p, PLAIN, chunk_bytes=n // k) == pytest.approx((p + k - 2) * (A + n / k * B))
    ring = (math.ceil(math.log2(p)) + p - 1) * A + 2 * (p - 1) / p * n * B
    assert predict("scatter_allgather_ring", n, p, PLAIN) == pytest.approx(ring, rel=0.02)
    if p & (p - 1) == 0:  # recursive doubling: the formula holds for powers of two
        rd = 2 * math.log2(p) * A + 2 * (p - 1) / p * n * B
        assert predict("scatter_allgather_rd", n, p, PLAIN) == pytest.approx(rd)


def test_binomial_is_exact_for_non_powers_of_two():
    # p = 5: the root sends to 4, 2, 1 in turn (3 messages), 2 forwards to 3: 3 message times deep
    assert predict("binomial", 100, 5, PLAIN) == pytest.approx(3 * (A + 100 * B))


def test_latency_plus_bandwidth_is_the_total():
    for algorithm in FLAT:
        b = breakdown(algorithm, 3 << 20, 6, REAL)
        assert b.latency + b.bandwidth == pytest.approx(b.seconds)


def test_mpi_is_mpich_rule_in_c():
    for nbytes, p in ((100, 16), (100_000, 4), (100_000, 16), (100_000, 12), (1 << 20, 16)):
        no_overhead = Machine("m", REAL.intra, REAL.inter, overhead=0.0, cores=2)
        expected = predict(mpich_choice(nbytes, p), nbytes, p, no_overhead)
        assert predict("mpi", nbytes, p, REAL) == pytest.approx(expected)


@pytest.mark.parametrize("machine", [PLAIN, REAL, TWO_LEVEL])
@pytest.mark.parametrize("algorithm", registry.pipelined_names())
@pytest.mark.parametrize("p", [2, 3, 6, 9])
def test_best_chunk_is_no_worse_than_any_chunk(machine, algorithm, p):
    n = 3000 if machine is not REAL else 40_000  # brute force over every chunk size
    best = best_chunk(algorithm, n, p, machine)
    t_best = predict(algorithm, n, p, machine, chunk_bytes=best)
    step = 1 if n <= 3000 else 7
    assert all(t_best <= predict(algorithm, n, p, machine, chunk_bytes=c) * (1 + 1e-12) for c in range(1, n + 1, step))


def test_best_chunk_matches_the_square_root_formula():
    n, p = 64 << 20, 8
    k_star = math.sqrt((p - 2) * n * B / A)
    k = math.ceil(n / best_chunk("chain", n, p, PLAIN))
    assert abs(k - k_star) <= 1.5


def test_hierarchical_reduces_to_flat_with_one_node():
    for machine in (PLAIN, REAL):
        for intra in ("binomial", "chain", "linear", "scatter_allgather_ring"):
            flat = predict(intra, 1 << 22, 8, machine)
            assert predict("hierarchical", 1 << 22, 8, machine, intra=intra) == pytest.approx(flat)
            assert predict("hierarchical", 1 << 22, 8, machine, intra=intra, ranks_per_node=8) == pytest.approx(flat)


def test_hierarchical_is_inter_plus_intra():
    # 32 ranks, 4 per node: binomial over 8 leaders on the slow link, then binomial over 4 on the fast one
    n = 1 << 20
    expected = 3 * TWO_LEVEL.inter.small.time(n) + 2 * TWO_LEVEL.intra.small.time(n)
    assert predict("hierarchical", n, 32, TWO_LEVEL) == pytest.approx(expected)
    # a flat algorithm that spans nodes is charged the slow link
    assert predict("binomial", n, 32, TWO_LEVEL) == pytest.approx(5 * TWO_LEVEL.inter.small.time(n))


def test_protocol_switch_and_receiver_copies():
    below, above = REAL.intra.regime(8191), REAL.intra.regime(8192)
    assert below.alpha < above.alpha and below.beta > above.beta
    assert REAL.intra.serial(8191) and not REAL.intra.serial(8192)
    # 2 ranks on 2 cores: no CPU limit; linear's 7 receiver copies overlap (one message deep) but
    # 8 busy-polling ranks on 2 cores each get a quarter of a core: 4 times slower
    n = 1 << 22
    one = 5e-6 + 1e-6 + n * 7e-11
    assert predict("linear", n, 2, REAL) == pytest.approx(one)
    assert predict("linear", n, 8, REAL) == pytest.approx(4 * one)
    assert stretch(REAL, 8) == 4 and stretch(REAL, 2) == 1
    # a fit made on 8 ranks already contains that slowdown
    at_8 = Machine("fit p=8", REAL.intra, REAL.inter, overhead=1e-6, cores=2, fitted_p=8)
    assert stretch(at_8, 8) == 1 and predict("linear", n, 8, at_8) == pytest.approx(one)
    assert predict("linear", n, 2, at_8) == pytest.approx(one / 4)


def test_textbook_drops_the_machine_specifics():
    t = textbook(REAL)
    assert t.overhead == 0 and t.cores is None and t.intra.switch is None


def test_serialisation_round_trip():
    for m in (PLAIN, REAL, TWO_LEVEL, profile("kesch")):
        assert Machine.from_dict(m.to_dict()) == m


def test_model_choice_is_deterministic_and_runnable():
    from gpulab.bcast.entry import option_names

    for n in (1024, 1 << 16, 1 << 20, 64 << 20):
        for p in (2, 3, 8, 64):
            name, options, ranking = choose(n, p, REAL)
            assert (name, options) == choose(n, p, REAL)[:2]
            assert set(options) <= set(option_names(name))
            assert ranking[0][0] == min(r[0] for r in ranking)


def test_profiles_are_sourced_and_predict_at_scale():
    rows = table()
    assert {r["profile"] for r in rows} == set(PROFILES) >= {"kesch", "perlmutter", "dgx-h100"}
    for r in rows:
        assert r["alpha_source"] and r["bandwidth_source"] and r["alpha_us"] > 0 and r["bandwidth_GBps"] > 0
    for name in PROFILES:
        m = profile(name)
        assert m.notes["sources"]["ranks_per_node"]
        n = 256 << 20
        chain = predict("chain", n, 1024, m, chunk_bytes=best_chunk("chain", n, 1024, m))
        # pipelining beats the tree for large messages at scale, as the seed paper argues
        assert chain < predict("binomial", n, 1024, m)
        assert choose(n, 1024, m)[0] != "binomial"
    with pytest.raises(KeyError, match="unknown machine .summit.; known profiles"):
        profile("summit")


def test_replayed_scatter_allgather_path_equals_the_closed_form_used_at_scale():
    """Up to REPLAY_MAX_P ranks the model replays the scatter-allgather schedules; beyond, closed
    forms stand in for them: both must charge the same critical path (within 0.1%: the closed
    forms round a few block edges differently)."""
    from gpulab.bcast.algorithms import critical_path as cp
    from gpulab.bcast.cost.hockney import Link, MessageCost

    cost = MessageCost(Link.plain(2e-6, 1e-9))
    replayed_ones = [a for a in registry.REGISTRY.values() if a.replayed]
    assert {a.name for a in replayed_ones} == {"scatter_allgather_rd", "scatter_allgather_ring"}
    for algorithm in replayed_ones:
        for p in [*range(2, 18), 24, 31, 48, cp.REPLAY_MAX_P]:
            for n in (1000, 65536, 3_000_001):
                replayed = cp.replay(algorithm.build, n, p, cost)
                closed = algorithm.plan(float(n), p, True, True)
                seconds = [sum(k * cost(s) for k, s in plan.path) for plan in (replayed, closed)]
                assert seconds[0] == pytest.approx(seconds[1], rel=1e-3), (algorithm.name, p, n)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_crossovers_are_where_the_fastest_changes_and_a_finer_scan_finds_no_more(name):
    machine, flat = profile(name), ["linear", "binomial", "knomial", "chain", "split_binary_tree",
                                    "scatter_allgather_ring"]
    found = report.crossovers(machine, 16, flat)
    assert found, "every profile's favourite changes between 1 KiB and 64 MiB"
    for c in found:  # bisected to 1%: just below, the algorithm before; at the size, the new one
        assert report.fastest_algorithm(machine, 16, flat, int(c["nbytes"] / 1.01) - 1) == c["from"]
        assert report.fastest_algorithm(machine, 16, flat, c["nbytes"]) == c["to"]
    finer = report.crossovers(machine, 16, flat, points=129)  # eight sizes per octave
    assert [(c["from"], c["to"]) for c in finer] == [(c["from"], c["to"]) for c in found]
