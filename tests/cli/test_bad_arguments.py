"""Every command answers bad arguments with one line and a non-zero exit, before any MPI job starts."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BAD = [  # (argv, what the one line must say)
    (["bench", "bcast", "--sizes", "bogus"], "argument --sizes: not a size: 'bogus'"),
    (["bench", "bcast", "--algorithms", "chain,bogus"], "unknown algorithm(s) ['bogus']"),
    (["bench", "bcast", "--sizes", "64K:1K"], "argument --sizes: size range '64K:1K'"),
    (["bench", "bcast", "-n", "4", "--root", "4"], "--root 4 is not a rank of -n 4"),
    (["bench", "bcast", "--root", "-1"], "argument --root: must be >= 0"),
    (["bench", "bcast", "--chunk-bytes", "0"], "argument --chunk-bytes: must be at least 1 byte"),
    (["bench", "bcast", "-n", "0"], "argument -n/--ranks: must be >= 1, got 0"),
    (["bench", "bcast", "--iters", "-5"], "argument --iters: must be >= 1, got -5"),
    (["bench", "bcast", "--radix", "1"], "argument --radix: must be >= 2"),
    (["bench", "bcast", "--inter", "hierarchical"], "argument --inter: invalid choice: 'hierarchical'"),
    (["bench", "bcast", "--json", "/etc/hostname/out.json"], "argument --json: cannot write /etc/hostname/out.json"),
    (["bench", "bcast", "--plot", "/"], "argument --plot: / is a folder"),
    (["bench", "engine", "--out", "x.json", "--iters", "0"], "argument --iters: must be >= 1"),
    (["tune", "bcast", "-n", "0"], "argument -n/--ranks: process counts must be >= 1"),
    (["tune", "bcast", "--sizes", "1K:bogus"], "argument --sizes: not a size: 'bogus'"),
    (["tune", "bcast", "--radices", "1,4"], "argument --radices: radices must be >= 2"),
    (["tune", "fit", "--time-budget", "-1"], "argument --time-budget: must be >= 0"),
    (["train", "--steps", "0"], "argument --steps: must be >= 1, got 0"),
    (["train", "--lr", "-1"], "argument --lr: must be > 0"),
    (["train", "--out", "/etc/hostname/gpt.npz"], "argument --out: cannot write"),
    (["train", "--mesh", "1,2"], "--mesh must be four positive ints"),
    (["train", "--resume", "/nonexistent/gpt.npz"], "--resume /nonexistent/gpt.npz: no such file"),
    (["train", "--strategy", "megatron"], "--strategy megatron needs -n"),
    (["train", "--strategy", "hsdp", "-n", "2"], "hsdp needs more than 2 rank(s)"),
    (["train", "--strategy", "ddp", "-n", "4", "--mesh", "1,1,1,4"], "give --mesh or --strategy, not both"),
    (["train", "--strategy", "fsdp", "-n", "4"], "argument --strategy: invalid choice: 'fsdp'"),
    (["model", "compare", "--world", "0"], "argument --world: must be >= 1, got 0"),
    (["model", "compare", "--world", "8", "--strategies", "zero3,bogus"], "unknown strategies ['bogus']"),
    (["model", "compare", "--world", "8", "--machine", "summit"], "unknown machine 'summit'"),
    (["model", "compare", "--world", "8", "--global-batch", "-2"], "argument --global-batch: must be >= 1"),
]


def gpulab(*argv):
    env = {k: v for k, v in os.environ.items() if k not in ("GPULAB_LAUNCHED", "PMI_RANK", "PMI_SIZE")}
    return subprocess.run([sys.executable, "-m", "gpulab.cli", *argv], capture_output=True, text=True,
                          timeout=120, env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT)


@pytest.fixture
def no_job(monkeypatch):
    """In-process commands whose relaunch under mpiexec fails the test."""
    import gpulab.cli.bench
    import gpulab.cli.model
    import gpulab.cli.train
    import gpulab.cli.tune

    def relaunch(*args, **kwargs):
        raise AssertionError(f"an MPI job was started: {args}")

    for module in (gpulab.cli.bench, gpulab.cli.model, gpulab.cli.train, gpulab.cli.tune):
        monkeypatch.setattr(module, "relaunch", relaunch)
    for var in ("GPULAB_LAUNCHED", "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("argv, says", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_argument_is_one_line_and_no_job(argv, says, no_job, capsys):
    from gpulab.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    printed = capsys.readouterr()
    # a parser error prints its line and exits 2; a later check exits with its line as the message
    lines = printed.err.strip().splitlines() if exit_.value.code == 2 else [str(exit_.value.code)]
    assert exit_.value.code != 0 and len(lines) == 1 and says in lines[0], (exit_.value.code, printed.err)
    assert not printed.out


@pytest.mark.parametrize("argv", [["bench", "bcast", "--sizes", "bogus"], ["train", "--resume", "/nonexistent/x.npz"]])
def test_a_real_process_prints_one_line_and_no_traceback(argv):
    run = gpulab(*argv)
    assert run.returncode != 0 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
