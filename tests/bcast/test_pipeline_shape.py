"""The model's (D, F) of the pipelined broadcasts, read from their schedules (gpulab.bcast.algorithms.critical_path)."""

import pytest

from gpulab.bcast.algorithms.critical_path import REPLAY_MAX_P
from gpulab.bcast.cost.hockney import pipeline_shape


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 13])
def test_pipeline_shapes_read_from_the_schedules_are_the_textbook_ones(p):
    # chain: the first chunk crosses p - 1 links, each later one arrives one message later
    assert pipeline_shape("chain", p, True) == pipeline_shape("chain", p, False) == (p - 1, 1)
    # binary tree (heap): concurrent sends reach depth floor(log2 p); serial ones cost a right child
    # one message more, and a forwarder with two children sends two messages per chunk
    height = p.bit_length() - 1
    assert pipeline_shape("binary_tree", p, False) == (height, 1)
    serial_depth = max(_serial_heap_depth(v) for v in range(p))
    assert pipeline_shape("binary_tree", p, True) == (serial_depth, 2 if p > 2 else 1)


def _serial_heap_depth(v: int) -> int:
    """Messages before heap node v has a chunk when each parent sends to its left child first."""
    depth = 0
    while v:
        depth += 1 if v % 2 else 2  # odd index: a left child
        v = (v - 1) // 2
    return depth


def test_the_split_tree_stands_in_for_itself_up_to_the_replay_limit():
    """Beyond REPLAY_MAX_P ranks the binary tree's schedules give the split tree's (D, F)
    (its halves travel down the same heap): up to there both readings must agree."""
    for p in range(2, REPLAY_MAX_P + 1):
        for serial in (False, True):
            assert pipeline_shape("split_binary_tree", p, serial) == pipeline_shape("binary_tree", p, serial), p


def test_not_a_pipeline_is_refused():
    with pytest.raises(ValueError, match="not a pipelined algorithm"):
        pipeline_shape("binomial", 4, True)
