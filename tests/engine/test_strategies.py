"""Named strategies are points of the 4D grid: the mapping, and the shape `gpulab train --strategy` picks."""

import pytest

from gpulab.engine import GPTConfig
from gpulab.engine.parallel.mesh import grid_shapes
from gpulab.engine.parallel.shards import split_counts
from gpulab.engine.perf.compare import compare
from gpulab.engine.perf.live_plans import best_plans, configurations, live_names
from gpulab.engine.perf.machines import machine
from gpulab.engine.perf.predict import gpt_config
from gpulab.engine.strategies import TABLE, Strategy, describe, pick_shape, register, shapes_for, strategy_of


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


def test_each_shape_is_claimed_by_at_most_one_specific_strategy():
    """strategy_of takes the first record that claims a shape: the table's specific predicates must not overlap."""
    for world in (1, 4, 12, 16):
        for shape in grid_shapes(world):
            claims = [s.name for s in TABLE.values() if not s.every_shape and s.is_shape(tuple(shape))]
            assert len(claims) <= 1, (tuple(shape), claims)


TOY = Strategy("colwise", "toy for this test only: tensor parallelism over col alone (1,C,1,P)",
               is_shape=lambda s: s[0] == 1 and s[1] > 1 and s[2] == 1,
               words=lambda s, pp: f"col-TP{s[1]}{pp}" + (f" x DP{s[3]}" if s[3] > 1 else ""),
               prefer=lambda s: (s[1],))


@pytest.fixture
def toy():
    register(TOY)
    yield TOY
    del TABLE[TOY.name]


def test_a_registered_strategy_reaches_every_user_of_the_table(toy):
    """One record and nothing else: names, shapes, the pick, the performance comparison and the live plans."""
    assert strategy_of((1, 2, 1, 2)) == "colwise" and describe((1, 2, 1, 2)) == "col-TP2 x DP2"
    assert describe((1, 4, 1, 1), pipe=2) == "col-TP4 x PP2"
    assert strategy_of((2, 2, 1, 1)) == "axonn" and strategy_of((2, 1, 1, 2)) == "megatron"  # the rest stand
    assert shapes_for("colwise", 4) == [(1, 2, 1, 2), (1, 4, 1, 1)]
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32)
    assert pick_shape("colwise", 4, cfg, batch_size=8) == (1, 4, 1, 1)  # prefer: the most columns

    rows = compare(gpt_config("gpt-5b"), 64, 64, machine("perlmutter"))
    assert [r["strategy"] for r in rows] == ["axonn", "megatron", "zero3", "hsdp", "ddp", "colwise"]
    assert rows[-1]["description"] == TOY.description and rows[-1]["searched"] > 0
    assert rows[-1]["fits"] and rows[-1]["config"].startswith("col-TP")  # 5B over 64 GPUs: fits
    assert strategy_of(rows[-1]["shape"]) == "colwise" and rows[-1]["pipe"] == 1  # not pipelined

    from tests.engine.live_plans_cases import BATCH, CFG
    from tests.engine.test_live_plans import MACHINE

    assert live_names()[-1] == "colwise"
    assert {s for s, _, _ in configurations("colwise", CFG, 4, BATCH)} == {(1, 2, 1, 2), (1, 4, 1, 1)}
    # axonn's live row keeps to shapes no other row has: the toy's are no longer its own
    assert {s for s, _, _ in configurations("axonn", CFG, 4, BATCH)} == {(2, 1, 2, 1), (2, 2, 1, 1), (1, 2, 2, 1)}
    plans = best_plans(CFG, 4, BATCH, MACHINE)
    assert plans[-1]["strategy"] == "colwise" and strategy_of(plans[-1]["shape"]) == "colwise"


def test_registering_a_taken_name_is_refused():
    with pytest.raises(ValueError, match=r"already taken: \['megatron-pp'\]"):
        register(Strategy("megatron-pp", "a clash", is_shape=lambda s: False, words=lambda s, pp: ""))
    assert "megatron-pp" not in TABLE
