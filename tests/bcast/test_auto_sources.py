"""``auto`` with no tuning run: MPICH's rule as MPICH runs it, and decisions from the layout, a machine profile
or the emulated cluster's link rate (unit, on made-up layouts), and on an emulated cluster (4 nodes x 1)."""

from __future__ import annotations

import json

import pytest

from gpulab.bcast.cost import mpich
from gpulab.bcast.cost.hockney import Link, Machine, mpich_choice, predict
from gpulab.bcast.selection.auto import reload, select
from gpulab.bcast.selection.tuning import ENV

GBIT = json.dumps({"link_bytes_per_s": 125e6})  # what the emulated cluster publishes for 1 Gbit/s
ONE_GBIT = Machine("1gbit", Link.plain(1e-6, 1 / 5e9), Link.plain(50e-6, 1 / 125e6))


class Comm:
    def __init__(self, size):
        self.size = size


@pytest.fixture
def site(tmp_path, monkeypatch):
    """No tuning file and no site variables; a test sets the ones it is about, then calls reload()."""
    monkeypatch.setenv(ENV, str(tmp_path / "missing.json"))
    for name in ("GPULAB_MACHINE", "GPULAB_TOPOLOGY"):
        monkeypatch.delenv(name, raising=False)
    reload()
    yield monkeypatch
    reload()


def test_mpir_rule_thresholds_are_mpichs():
    # mpir/generic.json: comm_size < 8 binomial; avg_msg_size <= 12288 binomial; <= 524288 rd on pow2
    assert mpich.mpir_rule(100, 16) == mpich_choice(100, 16) == "binomial"
    assert mpich.mpir_rule(12288, 16) == "binomial" and mpich.mpir_rule(12289, 16) == "scatter_allgather_rd"
    assert mpich.mpir_rule(100_000, 4) == "binomial"
    assert mpich.mpir_rule(524288, 16) == "scatter_allgather_rd"
    assert mpich.mpir_rule(524289, 16) == "scatter_allgather_ring"
    assert mpich.mpir_rule(100_000, 12) == "scatter_allgather_ring"


def test_compositions_follow_the_ch4_rule():
    # ch4/generic.json: no hierarchy (one rank a node) -> gamma; p < 8 -> alpha; pow2 alpha/beta/gamma
    assert mpich.steps(8 << 20, [0, 1, 2, 3]) == ("gamma", [("flat", "binomial", 4)])
    assert mpich.steps(8 << 20, [0, 1, 0, 1]) == ("alpha", [("inter", "binomial", 2), ("intra", "binomial", 2)])
    # a root that does not lead its node (its node's lowest rank) first hands the message to the leader
    assert mpich.steps(8 << 20, [0, 1, 0, 1], root=2)[1][0] == ("send", "send", 2)
    eight = [r // 4 for r in range(8)]
    assert mpich.composition(1000, eight) == "alpha"
    assert mpich.composition(100_000, eight) == "beta"
    assert mpich.composition(1 << 20, eight) == "gamma"
    assert mpich.composition(100_000, [r // 4 for r in range(12)]) == "gamma"  # not a power of two


def test_mpi_is_priced_as_mpich_runs_it_on_each_placement():
    """2 nodes x 2 ranks at 1 Gbit/s, 8 MiB: measured round-robin MPI_Bcast 70.5 ms = hierarchical 71.5 ms,
    flat binomial 136 ms; block all three 70 ms. The model must say the same (within 10%)."""
    n, link_time = 8 << 20, (8 << 20) / 125e6
    for rank_nodes in ([0, 1, 0, 1], [0, 0, 1, 1]):
        assert predict("mpi", n, 4, ONE_GBIT, rank_nodes=rank_nodes) == pytest.approx(link_time, rel=0.1)
    assert predict("binomial", n, 4, ONE_GBIT, rank_nodes=[0, 1, 0, 1]) == pytest.approx(2 * link_time, rel=0.1)
    # 4 nodes x 1: no hierarchy, MPICH's flat binomial crosses the network twice on the critical path
    assert predict("mpi", n, 4, ONE_GBIT, rank_nodes=[0, 1, 2, 3]) == pytest.approx(2 * link_time, rel=0.1)


def test_nothing_known_means_mpi_bcast(site):
    d = select(32 << 20, Comm(4), rank_nodes=[0, 1, 2, 3])
    assert (d.name, d.source) == ("mpi", "native") and "gamma: flat binomial on 4" in d.reason


def test_cluster_link_rate_picks_a_chain_across_four_nodes(site):
    site.setenv("GPULAB_TOPOLOGY", GBIT)
    reload()
    for nbytes in (8 << 20, 32 << 20):
        d = select(nbytes, Comm(4), rank_nodes=[0, 1, 2, 3])
        assert d.name == "chain" and d.source == "cluster", d
        assert 0 < d.options["chunk_bytes"] < nbytes
        assert "1 Gbit/s" in d.reason and "$GPULAB_TOPOLOGY" in d.reason and "MPI_Bcast" in d.reason
    small = select(1024, Comm(4), rank_nodes=[0, 1, 2, 3])  # latency-bound: nothing beats MPI by the margin
    assert (small.name, small.source) == ("mpi", "cluster") and "not 30% faster" in small.reason
    # 64 KiB: a split tree is predicted faster, but by less than the margin of assumed latencies
    assert select(64 << 10, Comm(4), rank_nodes=[0, 1, 2, 3]).name == "mpi"


def test_cluster_link_rate_keeps_mpi_where_mpich_is_node_aware(site):
    site.setenv("GPULAB_TOPOLOGY", GBIT)
    reload()
    # 2 x 2 round-robin: MPICH's composition already crosses the network once, as hierarchical would
    d = select(8 << 20, Comm(4), rank_nodes=[0, 1, 0, 1])
    assert d.name == "mpi" and "alpha" in d.reason
    # one node: the cluster's link rate says nothing about it
    assert select(8 << 20, Comm(4), rank_nodes=[0, 0, 0, 0]).source == "native"


def test_machine_profile_named_by_the_site(site):
    site.setenv("GPULAB_MACHINE", "dgx-h100")
    reload()
    nodes = [r // 8 for r in range(16)]
    big = select(64 << 20, Comm(16), rank_nodes=nodes)
    assert big.source == "machine" and "dgx-h100" in big.reason and "$GPULAB_MACHINE" in big.reason
    assert big.name != "mpi"  # the profile predicts a node-aware or pipelined broadcast far ahead
    assert predict(big.name, 64 << 20, 16, big_machine(), rank_nodes=nodes, **big.options) * 1.1 < \
        predict("mpi", 64 << 20, 16, big_machine(), rank_nodes=nodes)
    assert select(1024, Comm(16), rank_nodes=nodes).name == "mpi"


def big_machine() -> Machine:
    from gpulab.bcast.cost.profiles import profile

    return profile("dgx-h100")


@pytest.mark.timeout(300)
def test_auto_on_an_emulated_cluster_picks_the_chain_and_says_why(tmp_path):
    """4 nodes x 1 at 1 Gbit/s, no tuning file: the link rate the cluster publishes to every rank is
    enough for auto to pick the chain at 8 MiB (the timing record: docs/auto_untuned.md)."""
    from gpulab.emulated import EmulatedCluster
    from tests.emulated.util import require_cluster
    from tests.mpi_harness import run_mpi

    require_cluster()
    env = {ENV: str(tmp_path / "missing.json"), "GPULAB_MACHINE": ""}
    with EmulatedCluster(nodes=4, link="1gbit", placement="block"):
        rows = run_mpi(4, "tests.bcast.auto_cases:auto_decides_and_moves", nbytes=8 << 20, env=env, timeout=240)
    for rank, row in enumerate(rows):
        assert row["name"] == "chain" and row["source"] == "cluster", f"rank {rank}: {row}"
        assert "1 Gbit/s" in row["reason"] and "4 nodes" in row["reason"], f"rank {rank}: {row['reason']}"
    assert rows[0]["ran"] == ["chain"], rows[0]
