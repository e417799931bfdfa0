"""``gpulab train --pipe``: pipeline stages from the shell, checked before launch, resumable without them."""

import json

import pytest

from gpulab.engine.training import checkpoint
from tests.cli.test_bad_arguments import no_job  # noqa: F401 - a fixture
from tests.engine.test_train_cli import gpulab, summary

TINY = ["--batch-size", "8", "--block-size", "16", "--n-layer", "2", "--n-head", "2", "--n-embd", "16",
        "--lr", "1e-2", "--warmup", "5", "--sample", "0", "--no-progress", "--log-every", "20"]


def test_train_on_two_stages_learns_then_resumes_without_stages(tmp_path):
    out = tmp_path / "gpt.npz"
    run = gpulab("train", "--mesh", "1,1,1,1", "--pipe", "2", "--micro-batches", "4", "--steps", "40",
                 "--out", str(out), *TINY)
    assert run.returncode == 0, run.stdout + run.stderr
    s = summary(run.stdout)
    assert (s["mesh"], s["pipe"], s["micro_batches"], s["schedule"]) == ([1, 1, 1, 1], 2, 4, "1f1b")
    assert s["last10_mean"] < s["first10_mean"] - 0.5, s
    assert "pipe:" in run.stdout  # the timeline report lists the stage-to-stage traffic
    ck = checkpoint.load(out)
    assert ck.step == 40 and ck.extra["pipe"] == 2

    more = gpulab("train", "--mesh", "2,1,1,1", "--steps", "5", "--out", str(out), "--resume", str(out), *TINY)
    assert more.returncode == 0, more.stdout + more.stderr
    assert summary(more.stdout)["pipe"] == 1
    assert summary(more.stdout)["first_loss"] < s["first10_mean"] - 0.5  # it did resume
    log = [json.loads(line) for line in out.with_suffix(".loss.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == 45


@pytest.mark.parametrize("args, message", [
    (["--pipe", "3"], "n_layer (2) must be at least pipe (3)"),
    (["--pipe", "2", "--micro-batches", "3"], "(8 sequences) must be divisible by the micro-batches (3)"),
    (["--pipe", "0"], "argument --pipe: must be >= 1, got 0"),
    (["--pipe", "2", "--schedule", "zigzag"], "argument --schedule: invalid choice: 'zigzag'"),
])
@pytest.mark.usefixtures("no_job")
def test_bad_stage_arguments_exit_2_before_launching(args, message, capsys):
    # in this process (tests/cli shows that a real one prints the same line and no traceback)
    from gpulab.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", "--mesh", "1,1,1,1", *args, "--steps", "1", *TINY])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_ranks_must_match_mesh_times_pipe():
    run = gpulab("train", "--mesh", "1,2,1,1", "--pipe", "2", "-n", "2", *TINY, timeout=60)
    assert run.returncode != 0 and "(row*col*depth*data*pipe = 4)" in run.stderr
