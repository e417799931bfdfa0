"""Pipeline stages on the 4D grid: against the serial model in float64, schedules, checkpoints, errors.

One mpiexec launch per world size runs every test's rank function for it (the fake
device's, with their own environment, apart); inside, the rank functions loop over
every 4D shape of world/pipe ranks (pipe outermost). Tolerance 1e-10 relative, as
for the 4D grids (tests/engine/cases.py).
"""

import pytest

from gpulab.engine import GPTConfig, grid_shapes
from gpulab.engine.parallel.overlap_weights import backward_uses, forward_uses
from gpulab.engine.parallel.pipeline import (
    bubble_fraction,
    check_pipeline,
    schedule,
    stage_layers,
    stage_params,
    stage_uses,
)
from gpulab.engine.parallel.timeline_plot import gantt
from tests.gpu.test_engine_device import AWARE, STAGED
from tests.mpi_harness import batched_jobs, run_mpi

# --- pure geometry (no MPI) ------------------------------------------------------------------------

def test_stages_own_consecutive_balanced_blocks():
    assert [list(stage_layers(5, 2, s)) for s in range(2)] == [[0, 1, 2], [3, 4]]
    assert [list(stage_layers(5, 4, s)) for s in range(4)] == [[0, 1], [2], [3], [4]]
    assert [list(stage_layers(4, 1, 0))] == [[0, 1, 2, 3]]


def test_stage_params_first_has_embeddings_last_has_head_and_wte_is_on_both():
    cfg = GPTConfig(26, 8, 3, 2, 18)
    first, middle, last = (stage_params(cfg, 3, s) for s in range(3))
    assert first[:2] == ["transformer.wte.weight", "transformer.wpe.weight"]
    assert all(n.startswith("transformer.h.1.") for n in middle)
    assert last[0] == "transformer.wte.weight" and last[-2:] == ["transformer.ln_f.weight",
                                                                 "transformer.ln_f.bias"]
    held = first + middle + last
    assert sorted(set(held)) == sorted(stage_params(cfg, 1, 0)) and len(held) == len(set(held)) + 1


def test_stage_uses_cut_the_weight_order_per_stage():
    cfg = GPTConfig(26, 8, 2, 2, 18)
    fwd, bwd = forward_uses(cfg), backward_uses(cfg)
    f0, b0 = stage_uses(fwd, bwd, range(0, 1), True, False)
    f1, b1 = stage_uses(fwd, bwd, range(1, 2), False, True)
    assert f0 + f1 == fwd and b1 + b0 == bwd
    assert stage_uses(fwd, bwd, range(0, 2), True, True) == (fwd, bwd)


@pytest.mark.parametrize("pipe, micro", [(1, 1), (2, 4), (4, 4), (4, 8), (3, 2)])
def test_every_schedule_runs_each_micro_batch_once_forward_before_backward(pipe, micro):
    for kind in ("1f1b", "gpipe"):
        for stage in range(pipe):
            ops = schedule(kind, pipe, stage, micro)
            assert sorted(ops) == sorted([("F", i) for i in range(micro)] + [("B", i) for i in range(micro)])
            assert all(ops.index(("F", i)) < ops.index(("B", i)) for i in range(micro))
            if kind == "1f1b":  # activations held at once: at most pipe - stage micro-batches
                live = max(sum(1 for op, j in ops[:k + 1] if op == "F")
                           - sum(1 for op, j in ops[:k + 1] if op == "B") for k in range(len(ops)))
                assert live == min(pipe - stage, micro)


def test_1f1b_order_on_four_stages():
    assert schedule("1f1b", 4, 0, 4) == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("B", 1),
                                         ("B", 2), ("B", 3)]
    assert schedule("1f1b", 4, 2, 4) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3),
                                         ("B", 2), ("B", 3)]
    assert schedule("1f1b", 4, 3, 4) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2),
                                         ("F", 3), ("B", 3)]
    assert bubble_fraction(4, 4) == 3 / 7 and bubble_fraction(1, 5) == 0


def test_pipeline_validation_messages():
    with pytest.raises(ValueError, match=r"n_layer \(2\) must be at least pipe \(4\)"):
        check_pipeline(2, 4, 4)
    with pytest.raises(ValueError, match=r"\(6 sequences\) must be divisible by the micro-batches \(4\)"):
        check_pipeline(4, 4, 4, local_batch=6)
    with pytest.raises(ValueError, match="micro-batches must be a positive int"):
        check_pipeline(4, 2, 0)


# --- on ranks ----------------------------------------------------------------------------------------

def _cases(world, pipe, micro=None, kinds=("1f1b",)):
    return [[list(s), pipe, micro or pipe, kind] for s in grid_shapes(world // pipe) for kind in kinds]


# both schedules where a stage has few ranks; 1F1B alone on the many 4D shapes of 4 ranks
STAGES = {(world, pipe): _cases(world, pipe, kinds=("1f1b", "gpipe") if world // pipe <= 2 else ("1f1b",))
          for world, pipe in [(4, 2), (4, 4), (8, 2), (8, 4)]}
MICRO_ON_TWO = [[[1, 1, 1, 1], 2, 1, "1f1b"], [[1, 1, 1, 1], 2, 3, "1f1b"], [[1, 1, 1, 1], 2, 8, "gpipe"]]
MICRO_ON_FOUR = [[[1, 2, 1, 1], 2, 6, "1f1b"], [[1, 1, 1, 2], 2, 3, "gpipe"]]
TIMELINES = [(4, "1f1b"), (2, "1f1b"), (4, "gpipe")]
CHECKPOINTS = [([1, 1, 1, 1, 4], [2, 1, 1, 2, 1]), ([2, 2, 1, 1, 1], [1, 2, 1, 1, 2])]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoints")
    return batched_jobs({
        **{f"stages {world}/{pipe}": (world, "tests.engine.pipe_cases:equivalence", dict(cases=cases))
           for (world, pipe), cases in STAGES.items()},
        "micro on 2": (2, "tests.engine.pipe_cases:equivalence", dict(cases=MICRO_ON_TWO, steps=1)),
        "micro on 4": (4, "tests.engine.pipe_cases:equivalence", dict(cases=MICRO_ON_FOUR, steps=1)),
        "overlap": (8, "tests.engine.pipe_cases:overlap_switches", dict(shape=[1, 1, 2, 2], pipe=2, micro=2)),
        **{f"timeline {pipe} {kind}": (4, "tests.engine.pipe_cases:phase_order", dict(pipe=pipe, micro=4, kind=kind))
           for pipe, kind in TIMELINES},
        **{f"checkpoint {first} {second}": (4, "tests.engine.cases:checkpoint_across_grids",
                                            dict(path=str(folder / f"ck{i}.npz"), first=first, second=second,
                                                 n_layer=4))
           for i, (first, second) in enumerate(CHECKPOINTS)},
        "validation": (4, "tests.engine.pipe_cases:validation_errors", {}),
    })


def _check(results, cases):
    rows = results[0]
    assert [[r["shape"], r["pipe"], r["micro"], r["schedule"]] for r in rows] == cases
    for other in results[1:]:  # every rank saw the same global numbers
        assert [r["loss_err"] for r in other] == [r["loss_err"] for r in rows]
    assert max(r["grad_err"] for r in rows) < 1e-10 and max(r["param_err"] for r in rows) < 1e-10
    return rows


@pytest.mark.parametrize("world, pipe", list(STAGES))
def test_every_grid_shape_with_stages_matches_serial_float64(world, pipe, job):
    _check(job(f"stages {world}/{pipe}"), STAGES[world, pipe])


def test_micro_batch_counts_other_than_the_stage_count(job):
    _check(job("micro on 2"), MICRO_ON_TWO)
    _check(job("micro on 4"), MICRO_ON_FOUR)


@pytest.mark.parametrize("env, path", [(STAGED, "staged"), (AWARE, "cuda-aware")])
def test_stages_on_the_fake_device(env, path):
    cases = [[[2, 1, 1, 1], 2, 2, "1f1b"], [[1, 1, 1, 2], 2, 2, "gpipe"]]
    _check(run_mpi(4, "tests.engine.pipe_cases:equivalence", timeout=200, cases=cases, steps=1,
                   device="fake", expect_path=path, env=env), cases)


def test_every_overlap_switch_with_stages(job):
    assert job("overlap")[0] < 1e-10


@pytest.mark.parametrize("pipe, kind", TIMELINES)
def test_recorded_timeline_follows_the_schedule(pipe, kind, job):
    results = job(f"timeline {pipe} {kind}")
    for r in results:
        assert [tuple(x) for x in r["order"]] == schedule(kind, pipe, r["stage"], 4)
        # a stage receives each micro-batch's input (not the first) and output gradient (not the last)
        assert r["recvs"] == 4 * ((r["stage"] > 0) + (r["stage"] < pipe - 1))
    everyone = results[0]["events"]
    assert len(everyone) == 4
    ax = gantt(everyone).axes[0]  # each rank's micro-batches drawn and labelled in its own row
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == sorted(f"{op}{i}" for op in "FB" for i in range(4) for _ in range(4))


@pytest.mark.parametrize("first, second", CHECKPOINTS)
def test_checkpoint_moves_between_grids_with_and_without_stages(first, second, job):
    assert max(job(f"checkpoint {first} {second}")) < 1e-10


def test_validation_errors_are_raised_on_every_rank_without_hanging(job):
    results = job("validation")
    assert all(r == results[0] for r in results)
    msgs = results[0]
    assert "row*col*depth*data*pipe = 1*1*1*1*3 = 3 must equal the number of ranks (4)" in msgs["mesh"]
    assert "n_layer (1) must be at least pipe (2)" in msgs["layers"]
    assert "micro-batches must be a positive int, got 0" in msgs["micro"]
    assert "unknown pipeline schedule 'zigzag'" in msgs["schedule"]
    assert "(6 sequences) must be divisible by the micro-batches (4)" in msgs["batch"]
