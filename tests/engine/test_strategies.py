"""Named strategies are points of the 4D grid: the mapping, and the shape `gpulab train --strategy` picks."""

import pytest

from gpulab.engine import GPTConfig
from gpulab.engine.parallel.layout import split_counts
from gpulab.engine.strategies import describe, pick_shape, shapes_for, strategy_of


def test_every_shape_gets_the_most_specific_name():
    assert strategy_of((4, 1, 1, 2)) == "megatron" and describe((4, 1, 1, 2)) == "Megatron-LM TP4 x DP2"
    assert strategy_of((1, 1, 8, 1)) == "zero3" and describe((1, 1, 8, 1)) == "ZeRO-3/FSDP x8"
    assert strategy_of((1, 1, 2, 4)) == "hsdp" and describe((1, 1, 2, 4)) == "HSDP shard 2 x replicate 4"
    assert strategy_of((1, 1, 1, 8)) == "ddp" and describe((1, 1, 1, 8)) == "DDP x8"
    assert strategy_of((2, 2, 2, 1)) == "axonn" and describe((2, 2, 2, 1)) == "AxoNN 4D (2,2,2,1)"
    assert strategy_of((1, 2, 1, 4)) == "axonn"  # col alone is not Megatron's split
    assert describe((4, 1, 1, 16), pipe=16) == "Megatron-LM TP4 x PP16 x DP16"


def test_megatron_is_row_parallelism_column_then_row_parallel_layers():
    """With col = 1 a plain layer (QKV, FC1) splits its outputs over row: Megatron's column-parallel
    Linear; a transposed one (the projections) splits its inputs: the row-parallel Linear."""
    shape = (4, 1, 1, 2)
    assert split_counts(False, shape) == (4, 1)  # [n/4, k]: output features split
    assert split_counts(True, shape) == (1, 4)  # [n, k/4]: input features split


def test_shapes_of_each_strategy():
    assert shapes_for("zero3", 8) == [(1, 1, 8, 1)] and shapes_for("ddp", 8) == [(1, 1, 1, 8)]
    assert shapes_for("hsdp", 8) == [(1, 1, 2, 4), (1, 1, 4, 2)]
    assert [s[0] for s in shapes_for("megatron", 16, max_tp=4)] == [2, 4]
    assert len(shapes_for("axonn", 8)) == 20  # every shape: the others are special cases
    with pytest.raises(ValueError, match="unknown strategy 'fsdp'"):
        shapes_for("fsdp", 8)


def test_pick_shape_uses_the_strategy_most_and_splits_the_model():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32)
    assert pick_shape("megatron", 4, cfg, batch_size=8) == (4, 1, 1, 1)
    assert pick_shape("megatron", 8, cfg, batch_size=8) == (4, 1, 1, 2)  # 4 heads: TP4 at most
    assert pick_shape("hsdp", 8, cfg, batch_size=8) == (1, 1, 4, 2)
    assert pick_shape("axonn", 8, cfg, batch_size=8) == (2, 2, 2, 1)
    with pytest.raises(ValueError, match="hsdp needs more than 2 rank"):
        pick_shape("hsdp", 2, cfg, batch_size=8)
    with pytest.raises(ValueError, match="batch size .8. must be divisible by depth"):
        pick_shape("zero3", 16, cfg, batch_size=8)


def test_train_strategy_launches_the_picked_grid(tmp_path):
    """`gpulab train --strategy megatron -n 2`: the grid is picked before the launch, and every rank of
    the job (which re-parses --strategy) trains on that same grid."""
    from tests.engine.test_train_cli import TINY, gpulab, summary

    run = gpulab("train", "--strategy", "megatron", "-n", "2", "--steps", "3", "--out", str(tmp_path / "m.npz"),
                 *TINY, "--sample", "0", "--eval-batches", "0", timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "--strategy megatron on 2 ranks: mesh 2,1,1,1 (Megatron-LM TP2)" in run.stdout
    assert summary(run.stdout)["mesh"] == [2, 1, 1, 1]
