"""``gpulab train`` with Megatron-LM's options: recomputation, sequence parallelism, the distributed optimizer,
interleaved stages; each run learns, and a checkpoint moves to a run without them."""

import pytest

from gpulab.engine.training import checkpoint
from tests.cli.test_bad_arguments import no_job  # noqa: F401 - a fixture
from tests.engine.test_train_cli import gpulab, summary
from tests.engine.test_train_pipe_cli import TINY


def test_megatron_options_learn_and_resume_with_plain_adamw(tmp_path):
    out = tmp_path / "gpt.npz"
    run = gpulab("train", "--mesh", "2,1,1,2", "--recompute", "selective", "--sequence-parallel",
                 "--distributed-optimizer", "--steps", "40", "--out", str(out), *TINY)
    assert run.returncode == 0, run.stdout + run.stderr
    s = summary(run.stdout)
    assert (s["recompute"], s["sequence_parallel"], s["distributed_optimizer"]) == ("selective", True, True)
    assert s["last10_mean"] < s["first10_mean"] - 0.5, s
    assert checkpoint.load(out).opt_state["t"] == 40  # the distributed optimizer's moments, gathered whole

    more = gpulab("train", "--mesh", "2,1,1,2", "--steps", "5", "--out", str(out), "--resume", str(out), *TINY)
    assert more.returncode == 0, more.stdout + more.stderr
    assert summary(more.stdout)["first_loss"] < s["first10_mean"] - 0.5  # it did resume


def test_distributed_optimizer_reports_a_share_of_the_state(tmp_path):
    runs = {flag: summary(gpulab("train", "--mesh", "1,1,1,2", "--steps", "3", "--out", str(tmp_path / "g.npz"),
                                 *flag, *TINY).stdout) for flag in ((), ("--distributed-optimizer",))}
    plain, split = runs[()]["memory"]["optimizer"], runs[("--distributed-optimizer",)]["memory"]["optimizer"]
    assert split * 2 == pytest.approx(plain, rel=0.01)


def test_interleaved_stages_learn(tmp_path):
    run = gpulab("train", "--mesh", "1,1,1,1", "--pipe", "2", "--schedule", "interleaved", "--virtual-stages", "2",
                 "--micro-batches", "4", "--recompute", "full", "--steps", "40", "--out", str(tmp_path / "g.npz"),
                 *TINY, "--n-layer", "4")  # the last --n-layer counts: 4 blocks, one per chunk
    assert run.returncode == 0, run.stdout + run.stderr
    s = summary(run.stdout)
    assert (s["schedule"], s["virtual_stages"]) == ("interleaved", 2)
    assert s["last10_mean"] < s["first10_mean"] - 0.5, s


@pytest.mark.parametrize("args, message", [
    (["--pipe", "2", "--virtual-stages", "2"], "virtual stages (2) need the interleaved schedule"),
    (["--pipe", "2", "--schedule", "interleaved", "--virtual-stages", "2"],
     "n_layer (2) must be at least pipe x virtual stages (2 x 2)"),
    (["--recompute", "some"], "argument --recompute: invalid choice: 'some'"),
])
@pytest.mark.usefixtures("no_job")
def test_bad_megatron_arguments_exit_2_before_launching(args, message, capsys):
    from gpulab.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", "--mesh", "1,1,1,1", *args, "--steps", "1", *TINY])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
