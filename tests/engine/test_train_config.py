"""``TrainConfig``: the engine's input, checked whole when it is made, and trained from Python on 1 and 2 ranks."""

import math
import re

import pytest

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.gpt.model import init_params
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.training import checkpoint
from gpulab.engine.training.config import NEW_MODEL, TrainConfig, TrainConfigError
from gpulab.engine.training.loop import resumed_model
from tests.mpi_harness import run_mpi


@pytest.mark.parametrize("changes, names, says", [
    (dict(steps=0), "steps=0", "must be an int >= 1"),
    (dict(batch_size=2.5), "batch_size=2.5", "must be an int >= 1"),
    (dict(lr=0.0), "lr=0.0", "must be a finite number > 0"),
    (dict(weight_decay=float("nan")), "weight_decay=nan", "must be a finite number >= 0"),
    (dict(shape=(1, 2, 1)), "shape=(1, 2, 1)", "must be four positive ints"),
    (dict(dtype="bfloat16"), "dtype='bfloat16'", "must be one of ('float16', 'float32', 'float64')"),
    (dict(schedule="zigzag"), "schedule='zigzag'", "must be one of"),
    (dict(device="tpu"), "device='tpu'", "must be one of"),
    (dict(overlap="all"), "overlap='all'", "must be an Overlap"),
    (dict(sequence_parallel=1), "sequence_parallel=1", "must be True or False"),
    (dict(pipe=3), "pipe=3, micro_batches=3", "n_layer (2) must be at least pipe (3)"),
    (dict(pipe=2, micro_batches=3), "pipe=2, micro_batches=3", "must be divisible by the micro-batches (3)"),
    (dict(shape=(2, 1, 1, 1), sequence_parallel=True, block_size=9), "sequence_parallel=True, block_size=9",
     "must be divisible by row (2)"),
    (dict(shape=(1, 3, 1, 1)), "shape=(1, 3, 1, 1)", "n_embd (64) must be divisible by col (3)"),
    (dict(shape=(1, 1, 3, 1)), "shape=(1, 1, 3, 1)", "batch size (32) must be divisible by depth*data"),
    (dict(n_head=5), "n_embd=64, n_head=5", "must be divisible by n_head (5)"),
])
def test_bad_values_raise_one_value_error_naming_the_fields(changes, names, says):
    with pytest.raises(TrainConfigError) as err:
        TrainConfig(**changes)
    assert isinstance(err.value, ValueError) and list(err.value.values) == re.findall(r"(\w+)=", names)
    assert str(err.value).startswith(f"TrainConfig {names}: ") and says in str(err.value)
    assert "\n" not in str(err.value)


def test_defaults_resolve_and_describe_a_new_model():
    config = TrainConfig(shape=(2, 1, 1, 1), pipe=2, out="run/gpt.npz", overlap=Overlap.parse("all"))
    assert config.micro_batches == 2 and config.ranks == 4 and config.out.name == "gpt.npz"
    model = config.model(vocab_size=8)
    assert (model.block_size, model.n_layer, model.n_head, model.n_embd, model.dtype) == tuple(NEW_MODEL.values())
    with pytest.raises(AttributeError):
        config.steps = 10  # frozen: what trains is what was checked


def test_resuming_needs_the_model_the_checkpoint_holds(tmp_path):
    held = GPTConfig(vocab_size=8, block_size=8, n_layer=1, n_head=2, n_embd=8, dtype="float32")
    path = checkpoint.save(tmp_path / "gpt.npz", init_params(held), config=held, extra={"chars": "ab"})
    ck = checkpoint.load(path)
    same = dict(block_size=8, n_layer=1, n_head=2, n_embd=8, dtype="float32")
    assert resumed_model(TrainConfig(resume=path, **same), ck) == held
    with pytest.raises(ValueError, match=r"holds another model: n_layer=2 \(the checkpoint's is 1\)"):
        resumed_model(TrainConfig(resume=path, **{**same, "n_layer": 2}), ck)


def test_a_config_built_in_python_trains_on_two_ranks_then_resumes_on_one(tmp_path):
    out = str(tmp_path / "gpt.npz")
    two = run_mpi(2, "tests.engine.train_config_cases:train_steps", out=out, steps=3, shape=[1, 1, 1, 2],
                  timeout=180)
    assert [r["code"] for r in two] == [0, 0], two
    log = two[0]["log"]
    assert [r["step"] for r in log] == [1, 2, 3] and all(math.isfinite(r["loss"]) for r in log)
    ck = checkpoint.load(out)
    assert ck.step == 3 and ck.extra["mesh"] == [1, 1, 1, 2] and ck.opt_state["t"] == 3

    (one,) = run_mpi(1, "tests.engine.train_config_cases:train_steps", out=out, steps=2, shape=[1, 1, 1, 1],
                     resume=out, timeout=180)
    assert one["code"] == 0 and [r["step"] for r in one["log"]] == [1, 2, 3, 4, 5]
    assert checkpoint.load(out).step == 5
