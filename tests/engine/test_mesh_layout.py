"""Grid geometry without MPI: Mesh validation, rank layout, parameter pieces, divisibility, volume."""

import numpy as np
import pytest

from gpulab.engine import Mesh, check_divisibility, grid_shapes
from gpulab.engine.gpt import layers as L
from gpulab.engine.parallel.mesh import check_shape, coords_of, rank_of
from gpulab.engine.parallel.shards import (
    assemble,
    local_piece,
    owner_map,
    owns,
    param_specs,
    qkv_permutation,
    weight_blocks,
)
from gpulab.engine.perf.volume import collective_calls, totals
from tests.engine.util import random_params, tiny_config


class NoCommunication:
    """A communicator that answers size and rank and fails on anything else."""

    def __init__(self, size, rank=0):
        self.size, self.rank = size, rank

    def Get_size(self):
        return self.size

    def Get_rank(self):
        return self.rank

    def __getattr__(self, name):
        raise AssertionError(f"Mesh communicated ({name}) before validating its shape")


@pytest.mark.parametrize("shape, world, message", [
    ((2, 2, 1, 1), 8, r"row\*col\*depth\*data = 2\*2\*1\*1 = 4 must equal the number of ranks \(8\)"),
    ((3, 1, 1, 1), 4, r"= 3 must equal the number of ranks \(4\)"),
    ((1, 1, 1, 5), 6, r"= 5 must equal the number of ranks \(6\)"),
    ((0, 4, 1, 1), 4, r"mesh row size must be a positive int, got 0"),
    ((2, 2.0, 1, 1), 4, r"mesh col size must be a positive int, got 2.0"),
])
def test_bad_shapes_fail_before_any_communication(shape, world, message):
    with pytest.raises(ValueError, match=message):
        Mesh(*shape, comm=NoCommunication(world))


def test_numpy_ints_are_fine():
    assert check_shape(*np.array([1, 3, 2, 1]), world_size=6) == (1, 3, 2, 1)


@pytest.mark.parametrize("world, count", [(1, 1), (2, 4), (4, 10), (8, 20), (6, 16), (12, 40)])
def test_grid_shapes_are_all_ordered_factorisations(world, count):
    shapes = grid_shapes(world)
    assert len(shapes) == len(set(shapes)) == count
    assert all(np.prod(s) == world for s in shapes)


@pytest.mark.parametrize("shape", grid_shapes(12) + grid_shapes(8))
def test_rank_layout_is_axonns(shape):
    R, C, D, P = shape
    ranks = [rank_of(coords_of(k, shape), shape) for k in range(R * C * D * P)]
    assert ranks == list(range(R * C * D * P))
    assert rank_of((0, 1, 0, 0), shape) == (1 if C > 1 else rank_of((0, 0, 0, 0), shape) + 1)
    # column innermost, then row, depth, data outermost
    assert rank_of((0, 0, 0, 1 % P), shape) == (R * C * D if P > 1 else 0)
    assert coords_of(R * C * D * P - 1, shape) == (R - 1, C - 1, D - 1, P - 1)


SHAPES = [s for n in (1, 2, 4, 8, 6, 12) for s in grid_shapes(n)]


@pytest.mark.parametrize("shape", [s for s in SHAPES if max(s[:2]) <= 8 and 24 % s[0] == 0
                                   and 24 % s[1] == 0])
def test_pieces_reassemble_exactly(shape):
    cfg = tiny_config(shape)
    full = random_params(cfg)
    specs = param_specs(cfg)
    R, C, D, P = shape
    pieces = {n: {} for n in specs}
    held = 0
    for p in range(P):
        for d in range(D):
            for r in range(R):
                for c in range(C):
                    for n, s in specs.items():
                        piece = local_piece(s, full[n], shape, (r, c, d, p))
                        if p == 0 and owns(s, (r, c, d, p)):
                            pieces[n][(r, c, d)] = piece
                        if (r, c, d, p) == (0, 0, 0, 0):
                            held += piece.size
    for n, s in specs.items():
        np.testing.assert_array_equal(assemble(s, pieces[n], shape), full[n], err_msg=n)
    total = sum(v.size for v in full.values())
    if R * C * D > 1:
        assert held < total  # no rank holds the whole model


def test_qkv_permutation_gives_each_row_whole_heads():
    B, T, C, nh, R = 2, 5, 12, 4, 2
    qkv = np.random.default_rng(0).normal(size=(B, T, 3 * C))
    y, _ = L.attention_forward(qkv, nh)
    perm = qkv_permutation(C, R)
    for r in range(R):
        mine = perm[r * 3 * C // R:(r + 1) * 3 * C // R]  # row r's slice of the permuted c_attn
        y_r, _ = L.attention_forward(qkv[..., mine], nh // R)
        np.testing.assert_allclose(y_r, y[..., r * C // R:(r + 1) * C // R], rtol=1e-14)


def test_owner_map_picture():
    owners = owner_map(4, 6, (2, 3, 1, 1))  # plain: out rows over row, in cols over col
    assert owners.tolist() == [[0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 2, 2],
                               [3, 3, 4, 4, 5, 5], [3, 3, 4, 4, 5, 5]]
    t = owner_map(4, 6, (3, 2, 1, 1), transposed=True)  # out rows over col, in cols over row
    assert t[0].tolist() == [0, 0, 2, 2, 4, 4] and t[3].tolist() == [1, 1, 3, 3, 5, 5]
    deep = owner_map(6, 6, (1, 2, 3, 1))  # block 6x3 flattened, split over 3 depth ranks
    assert deep[:2, :3].tolist() == [[0, 0, 0], [0, 0, 0]] and deep[2, 0] == 2
    counts = np.bincount(owner_map(26, 18, (2, 2, 2, 1)).ravel())
    assert counts.sum() == 26 * 18 and len(counts) == 8


def test_weight_blocks_list_agrees_with_the_map():
    shape = (2, 3, 2, 1)
    owners = owner_map(12, 9, shape)
    blocks = weight_blocks(12, 9, shape)
    assert [b["rank"] for b in blocks] == list(range(12))
    for b in blocks:
        block = owners[slice(*b["rows"]), slice(*b["cols"])].reshape(-1)
        assert np.all(block[slice(*b["flat"])] == b["rank"])
    b5 = blocks[5]
    assert (b5["r"], b5["c"], b5["d"], b5["rows"], b5["cols"]) == (1, 2, 0, (6, 12), (6, 9))
    assert b5["flat"] == (0, 9)  # 6x3 block = 18 values, 9 per depth shard
    with pytest.raises(ValueError, match=r"a \[13, 9\] weight does not split into 2 x 3 blocks"):
        owner_map(13, 9, shape)


@pytest.mark.parametrize("shape, batch, message", [
    ((1, 5, 1, 1), None, r"n_embd \(18\) must be divisible by col \(5\)"),
    ((4, 1, 1, 1), None, r"n_head \(2\) must be divisible by row \(4\)"),
    ((2, 1, 1, 1), None, r"vocab_size \(13\) must be divisible by row \(2\)"),
    ((1, 1, 2, 2), 6, r"batch size \(6\) must be divisible by depth\*data \(2\*2 = 4\)"),
])
def test_divisibility_errors_name_what_divides_what(shape, batch, message):
    with pytest.raises(ValueError, match=message):
        check_divisibility(tiny_config(), shape, batch_size=batch)


def test_volume_counts():
    cfg = tiny_config((2, 2, 1, 1))
    assert collective_calls(cfg, (1, 1, 1, 1), batch_size=4) == []
    dp = collective_calls(cfg, (1, 1, 1, 2), batch_size=4)
    assert {r["layer"] for r in dp} == {"grads", "loss"}
    n_params = sum(v.size for v in random_params(cfg).values())
    assert sum(r["nbytes"] for r in dp if r["layer"] == "grads") == n_params * 8
    rows = collective_calls(cfg, (2, 2, 2, 1), batch_size=4, grad_norm=True)
    by_group = totals(rows, by="group", value="nbytes")
    assert set(by_group) == {"row", "col", "depth", "batch", "tensor"}
    ring = next(r for r in rows if r["op"] == "all_reduce" and r["group"] == "row")
    assert ring["wire_bytes"] == ring["nbytes"]  # 2 (p-1)/p = 1 for p = 2
