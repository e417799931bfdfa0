"""``gpulab train`` loses nothing and says what is wrong: damaged or foreign checkpoints, a model that
differs from the one resumed, Ctrl-C, a killed job, a rank that fails."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from gpulab.cli.train import NEW_MODEL, resolve_model
from gpulab.cluster.processes import kill_trees
from gpulab.engine import init_params
from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.training import checkpoint
from gpulab.launch import mpiexec_command
from tests.engine.test_train_cli import ROOT, TINY, gpulab

CHARS = "abc \n"


@pytest.fixture
def saved(tmp_path) -> Path:
    """A good checkpoint of a tiny model, with optimizer moments and tokenizer data."""
    cfg = GPTConfig(vocab_size=8, block_size=8, n_layer=1, n_head=2, n_embd=8)
    params = init_params(cfg, seed=1)
    opt = {"t": 3, "m": {n: p * 0 for n, p in params.items()}, "v": {n: p * 0 for n, p in params.items()}}
    return checkpoint.save(tmp_path / "gpt.npz", params, config=cfg, step=3, opt_state=opt,
                           extra={"chars": CHARS})


def args_for(path, **flags):
    class Args:
        resume = str(path)
    for flag in NEW_MODEL:
        setattr(Args, flag, flags.get(flag))
    return Args()


def rewrite(path: Path, change) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def fails_with(path, says: str, **flags) -> None:
    with pytest.raises(SystemExit) as exit_:
        resolve_model(args_for(path, **flags))
    message = str(exit_.value.code)
    assert "\n" not in message and str(path) in message and says in message, message


def test_random_bytes(saved):
    saved.write_bytes(os.urandom(4096))
    fails_with(saved, "not a gpulab checkpoint (unreadable as .npz")


def test_truncated_file(saved):
    saved.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    fails_with(saved, "not a gpulab checkpoint")


def test_missing_array(saved):
    rewrite(saved, lambda a: a.pop("params/lm_head.weight", None) if "params/lm_head.weight" in a
            else a.pop(next(k for k in a if k.startswith("params/"))))
    fails_with(saved, "missing arrays params/")


def test_misshapen_optimizer_moment(saved):
    def shrink(arrays):
        key = next(k for k in arrays if k.startswith("adam_v/"))
        arrays[key] = arrays[key][..., :1]
    rewrite(saved, shrink)
    fails_with(saved, "adam_v/")


def test_no_tokenizer_data(tmp_path, saved):
    def drop_chars(arrays):
        header = json.loads(arrays["header.json"].tobytes())
        header["extra"] = {}
        arrays["header.json"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    rewrite(saved, drop_chars)
    fails_with(saved, "no tokenizer data")


def test_a_different_model_is_named(saved):
    fails_with(saved, "--n-layer 3 (the checkpoint's is 1); --dtype float32 (the checkpoint's is float64)",
               n_layer=3, dtype="float32")


def test_unset_flags_come_from_the_checkpoint_and_equal_ones_are_fine(saved):
    args = args_for(saved, n_embd=8)
    resolve_model(args)
    assert (args.n_layer, args.n_head, args.n_embd, args.block_size, args.dtype) == (1, 2, 8, 8, "float64")


def _start(out: Path, *extra) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "GPULAB_LAUNCHED"}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "gpulab.cli", "train", "--mesh", "1,1,1,2", "--steps", "100000",
                             "--out", str(out), *TINY, "--sample", "0", "--eval-batches", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                            start_new_session=True)


def _wait_for_steps(out: Path, steps: int, proc, timeout=120) -> None:
    log = out.with_suffix(".loss.jsonl")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= steps:
            return
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"training did not reach step {steps}: {proc.communicate()[0][-2000:]}")


def test_ctrl_c_saves_a_checkpoint_that_resumes(tmp_path):
    out = tmp_path / "gpt.npz"
    proc = _start(out)
    _wait_for_steps(out, 5, proc)
    proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends the command
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted after step" in output, output[-2000:]
    step = checkpoint.load(out).step
    assert step >= 5 and f"interrupted after step {step}" in output
    more = gpulab("train", "--mesh", "1,1,1,2", "--steps", "2", "--out", str(out), "--resume", str(out), *TINY)
    assert more.returncode == 0 and checkpoint.load(out).step == step + 2, more.stdout + more.stderr


def test_a_killed_job_loses_at_most_checkpoint_every_steps(tmp_path):
    out = tmp_path / "gpt.npz"
    proc = _start(out, "--checkpoint-every", "3")
    _wait_for_steps(out, 8, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher; its mpiexec runs in a group of its own
    proc.wait()
    # the job (mpiexec and ranks carry --out in argv, the proxy is mpiexec's), and the scratch files it held
    kill_trees([p.pid for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])])
    steps = len(out.with_suffix(".loss.jsonl").read_text().splitlines())
    ck = checkpoint.load(out)
    assert ck.step % 3 == 0 and steps - 3 <= ck.step <= steps, (ck.step, steps)


def test_one_failing_rank_ends_the_whole_job(tmp_path):
    start = time.monotonic()
    job = mpiexec_command(2, ["-m", "tests.engine.failing_rank", "--mesh", "1,1,1,2", "--steps", "50",
                              "--out", str(tmp_path / "gpt.npz"), *TINY])
    run = subprocess.run(job, capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert run.returncode != 0 and time.monotonic() - start < 100
    assert "gpulab: rank 1 failed (RuntimeError: planted failure at step 3); ending the job" in run.stderr, \
        run.stdout[-1500:] + run.stderr[-1500:]
