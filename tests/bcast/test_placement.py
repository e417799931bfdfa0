"""The model priced per placement: each message at its own link, each node's link shared by its ranks."""

import pytest

from gpulab.bcast.cost.hockney import Link, Machine, predict
from gpulab.bcast.cost.placement import placed

N = 32 << 20
BETA = 8e-9  # 1 Gbit/s-like: one link transfer of N takes T
T = N * BETA
BLOCK_4x2 = [0, 0, 1, 1, 2, 2, 3, 3]
ROUND_ROBIN_4x2 = [0, 1, 2, 3, 0, 1, 2, 3]


def machine(alpha_inter=0.0, beta_intra=0.0, ranks_per_node=2) -> Machine:
    return Machine("test", Link.plain(0.0, beta_intra), Link.plain(alpha_inter, BETA), ranks_per_node)


@pytest.mark.parametrize("algorithm,options", [("binomial", {}), ("knomial", {"radix": 4}), ("linear", {}),
                                               ("chain", {"chunk_bytes": 1 << 20})])
@pytest.mark.parametrize("p", [2, 5, 8])
def test_one_rank_per_node_and_one_kind_of_link_is_the_plain_model(algorithm, options, p):
    m = Machine("same", Link.plain(20e-6, BETA), Link.plain(20e-6, BETA), ranks_per_node=1)
    assert predict(algorithm, N, p, m, rank_nodes=list(range(p)), **options) == pytest.approx(
        predict(algorithm, N, p, m, **options), rel=1e-12)


def test_binomial_by_hand_block_against_round_robin():
    # block: 0 -> 4 (network), 0 -> 2 (network, after the first), 0 -> 1 inside node 0: 2 T on the path.
    # round-robin: node 0 holds ranks 0 and 4, and 0 -> 2, 0 -> 1, 4 -> 6, 4 -> 5 all leave it: 4 T on its link
    m = machine()
    assert placed("binomial", N, BLOCK_4x2, m) == pytest.approx(2 * T)
    assert placed("binomial", N, ROUND_ROBIN_4x2, m) == pytest.approx(4 * T)
    # the plain model charges every one of the 3 sequential sends on the path at the network's price
    assert predict("binomial", N, 8, m) == pytest.approx(3 * T)


def test_chain_by_hand_block_against_round_robin():
    k, m = 32, machine(alpha_inter=1e-4)
    chunk = T / k + 1e-4
    # block: the hops 1->2, 3->4, 5->6 cross the network (3 slow hops), the others are free
    assert placed("chain", N, BLOCK_4x2, m, chunk_bytes=N // k) == pytest.approx(3 * chunk + (k - 1) * chunk)
    # round-robin: all 7 hops cross it, and each node's link carries two of them: 2 T at least
    rr = placed("chain", N, ROUND_ROBIN_4x2, m, chunk_bytes=N // k)
    assert rr == pytest.approx(max(7 * chunk + (k - 1) * chunk, 2 * T))


def test_the_root_elsewhere_moves_the_tree():
    m = machine()
    # relative ranks turn with the root: 3 sends to 7, 5 and 4 one after another, all on other nodes
    assert placed("binomial", N, BLOCK_4x2, m, root=3) == pytest.approx(3 * T)


def test_placement_only_for_the_algorithms_it_can_price():
    m = machine()
    with pytest.raises(ValueError, match="placement is priced for"):
        placed("scatter_allgather_ring", N, BLOCK_4x2, m)
    with pytest.raises(ValueError, match="names 8 ranks, not p = 4"):
        predict("binomial", N, 4, m, rank_nodes=BLOCK_4x2)
    # algorithms it cannot price keep the plain model
    assert predict("scatter_allgather_ring", N, 8, m, rank_nodes=ROUND_ROBIN_4x2) == predict(
        "scatter_allgather_ring", N, 8, m)
