"""``gpulab train`` end to end: it re-launches itself under mpiexec, the loss falls, the
checkpoint is written, and a run resumes from it on another grid shape."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpulab.engine.training import checkpoint

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--batch-size", "8", "--block-size", "16", "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
        "--lr", "1e-2", "--warmup", "5", "--sample", "40", "--no-progress", "--log-every", "20"]


def gpulab(*args, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "GPULAB_LAUNCHED"}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "gpulab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def summary(stdout: str) -> dict:
    line = next(line for line in stdout.splitlines() if line.startswith("summary "))
    return json.loads(line[len("summary "):])


def test_train_then_resume_on_another_grid(tmp_path):
    out = tmp_path / "gpt.npz"
    run = gpulab("train", "--mesh", "1,1,2,1", "-n", "2", "--steps", "60", "--out", str(out), *TINY)
    assert run.returncode == 0, run.stdout + run.stderr
    s = summary(run.stdout)
    assert s["mesh"] == [1, 1, 2, 1] and s["steps"] == 60
    assert s["last10_mean"] < s["first10_mean"] - 0.5, s  # ln(72) = 4.28 at the start
    assert "sample:\nAnd " in run.stdout
    ck = checkpoint.load(out)
    assert ck.step == 60 and ck.extra["mesh"] == [1, 1, 2, 1] and ck.opt_state["t"] == 60
    assert ck.config.vocab_size == 72 and ck.config.n_embd == 16
    log = [json.loads(line) for line in out.with_suffix(".loss.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 61))

    more = gpulab("train", "--mesh", "2,1,1,1", "--steps", "10", "--out", str(out),
                  "--resume", str(out), *TINY)
    assert more.returncode == 0, more.stdout + more.stderr
    assert summary(more.stdout)["mesh"] == [2, 1, 1, 1]
    assert summary(more.stdout)["first_loss"] < s["first10_mean"] - 0.5  # it did resume
    assert checkpoint.load(out).step == 70
    log = out.with_suffix(".loss.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["step"] == 70 and len(log) == 70


@pytest.mark.parametrize("args, message", [  # one case per message train refuses a command line with
    (["--mesh", "1,2,2,1", "-n", "3"], "-n 3 does not match --mesh 1,2,2,1 --pipe 1"),
    (["--mesh", "1,2,x,1"], "--mesh must be four positive ints"),
    (["--strategy", "zero3"], "--strategy zero3 needs -n"),
    (["--strategy", "ddp", "--mesh", "1,1,1,2", "-n", "2"], "give --mesh or --strategy, not both"),
    (["--strategy", "megatron", "-n", "3"], "--strategy megatron: no megatron grid of 3 ranks"),
    (["-n", "3"], "-n 3 without --mesh (the axonn strategy's grid): no axonn grid of 3 ranks"),
    (["-n", "4", "--pipe", "3"], "-n 4 is not divisible by --pipe 3"),
    (["-n", "4", "--pipe", "4"], "--pipe 4 --micro-batches 4:"),
    (["--resume", "no/such/checkpoint.npz"], "--resume"),
])
def test_bad_arguments_fail_before_launching(args, message):
    run = gpulab("train", *args, timeout=60)
    assert run.returncode != 0 and message in run.stderr, run.stderr
    assert "None" not in run.stdout + run.stderr  # an unset flag is never printed as Python's None


def test_only_n_picks_the_axonn_grid_says_so_in_one_line_and_trains(tmp_path):
    run = gpulab("train", "-n", "4", "--steps", "10", "--out", str(tmp_path / "gpt.npz"), *TINY)
    assert run.returncode == 0, run.stdout + run.stderr
    (said,) = [line for line in run.stdout.splitlines() if line.startswith("-n 4 without --mesh")]
    assert "the axonn strategy's pick" in said and "None" not in said
    mesh = [int(v) for v in said.split("mesh ")[1].split(" ")[0].split(",")]
    assert summary(run.stdout)["mesh"] == mesh and sum(v > 1 for v in mesh) >= 2  # a 4D grid, not plain DDP


def test_help_lists_train_and_stays_fast():
    run = gpulab("--help", timeout=60)
    assert run.returncode == 0 and "train" in run.stdout


def test_train_with_overlap_reports_the_timeline_and_learns_the_same(tmp_path):
    runs = {}
    for overlap in ("none", "all"):
        out = tmp_path / f"{overlap}.npz"
        run = gpulab("train", "--mesh", "1,1,2,2", "--steps", "8", "--out", str(out), "--overlap", overlap,
                     "--dtype", "float64", *TINY)
        assert run.returncode == 0, run.stdout + run.stderr
        runs[overlap] = (run.stdout, [json.loads(line)["loss"] for line in
                                      out.with_suffix(".loss.jsonl").read_text().splitlines()])
    stdout, losses = runs["all"]
    assert losses == runs["none"][1]  # overlap changes when, never what
    assert "timeline per iteration (mean over ranks):" in stdout and "depth:" in stdout
    s = summary(stdout)
    assert s["overlap"] == "oar+ors+oag+cache+buckets" and s["tokens_per_s"] > 0
    t = s["timeline"]
    assert abs(t["compute_s"] + t["exposed_comm_s"] - t["wall_s"]) < 1e-5 and t["hidden_comm_s"] >= 0
    assert s["memory"]["weight_cache"] > 0 and summary(runs["none"][0])["memory"]["weight_cache"] == 0


def test_float16_on_the_fake_device_learns_and_resumes_from_float32_masters(tmp_path):
    out = tmp_path / "f16.npz"
    run = gpulab("train", "--mesh", "1,2,1,1", "--steps", "40", "--out", str(out), "--dtype", "float16",
                 "--device", "fake", *TINY)
    assert run.returncode == 0, run.stdout + run.stderr
    s = summary(run.stdout)
    assert s["device"] == "fake" and s["dtype"] == "float16" and s["loss_scale"] > 1
    assert s["last10_mean"] < s["first10_mean"] - 0.5, s
    assert "best float16 matmul on all cores (fake device)" in run.stdout and 0 < s["mfu"]
    ck = checkpoint.load(out)
    assert ck.config.dtype == "float16"
    assert all(p.dtype == np.float32 for p in ck.params.values())  # the masters, not their float16 copies
    log = [json.loads(line) for line in out.with_suffix(".loss.jsonl").read_text().splitlines()]
    assert all("loss_scale" in r and "skipped" in r for r in log)
    more = gpulab("train", "--mesh", "2,1,1,1", "--steps", "5", "--out", str(out), "--dtype", "float16",
                  "--device", "fake", "--resume", str(out), *TINY)
    assert more.returncode == 0, more.stdout + more.stderr
    assert summary(more.stdout)["first_loss"] < s["first10_mean"] - 0.5 and checkpoint.load(out).step == 45


def test_unknown_overlap_switch_fails_cleanly():
    run = gpulab("train", "--mesh", "1,1,1,1", "--overlap", "oag,warp", "--steps", "1", *TINY, timeout=60)
    assert run.returncode != 0 and "unknown overlap switch" in run.stdout + run.stderr
