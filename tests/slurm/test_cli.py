"""``gpulab train`` and ``gpulab bench`` under srun and sbatch, exactly as docs/cluster.md writes them
(the shell blocks after ``<!-- tested: srun -->`` and ``<!-- tested: sbatch -->``), on the test Slurm's two
nodes with GPULAB_DEVICE=fake (the blocks default to cupy on a real GPU node).

On the emulated testbed only: the commands do not change with the testbed, and that one is the
closer to a real cluster (each node its own network namespace and address, joined by a
rate-limited link)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"


def documented(name: str) -> str:
    found = re.search(rf"<!-- tested: {name} -->\s*```bash\n(.*?)```", DOC.read_text(), re.S)
    assert found, f"docs/cluster.md has no ```bash block after <!-- tested: {name} -->"
    return found.group(1)


def job_env(slurm) -> dict:
    # the venv's gpulab on PATH even when pytest was started as .venv/bin/python without activating
    return slurm.env({**os.environ, "GPULAB_DEVICE": "fake",
                      "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"})


def check_train(text: str) -> None:
    summary = json.loads(text.split("summary ", 1)[1].splitlines()[0])
    assert summary["mesh"] == [1, 2, 1, 2] and summary["steps"] == 20 and summary["device"] == "fake"
    assert summary["last10_mean"] < summary["first10_mean"], "the loss did not fall"


def check_bench(text: str) -> None:
    assert "broadcast time per call (us, average over 4 ranks)" in text, text[-2000:]
    # one row per size: each algorithm's median and the larger half of its interval, e.g. "1M  12872.6 ±14% ..."
    assert re.search(r"^\s+1M(\s+[\d.]+( ±\d+%)?){3}\s", text, re.M), text[-2000:]


@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_srun_as_documented(slurm_env, tmp_path):
    block = documented("srun")
    sruns = [line for line in block.splitlines() if line.startswith("srun ")]
    assert len(sruns) == 2 and all("--mpi=pmi2 --kill-on-bad-exit=1" in line for line in sruns), sruns
    assert "export MPIR_CVAR_CH4_NETMOD=ofi" in block  # the mpich wheel under Slurm's pmi2 (docs say why)
    t0 = time.monotonic()
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=job_env(slurm_env),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    check_train(done.stdout)
    check_bench(done.stdout)
    print(f"\nsrun train + bench: {time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize("slurm", ["emulated"], indirect=True)
def test_sbatch_as_documented(slurm_env, tmp_path):
    script = tmp_path / "gpulab-job.sh"
    script.write_text(documented("sbatch"))
    assert script.read_text().count("srun --mpi=pmi2 --kill-on-bad-exit=1 ") == 2
    t0 = time.monotonic()
    done = subprocess.run(["sbatch", "--parsable", str(script)], cwd=tmp_path, env=job_env(slurm_env),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"sbatch: {done.returncode} {done.stderr}"
    job = done.stdout.strip().split(";")[0]
    state = final_state(slurm_env, job, timeout=300)
    out = tmp_path / f"gpulab-{job}.out"
    text = out.read_text() if out.exists() else ""
    assert state == "COMPLETED", f"job {job} ended {state}\n{text[-3000:]}"
    check_train(text)
    check_bench(text)
    records = json.loads((tmp_path / f"bcast-{job}.json").read_text())["records"]
    assert {r["algorithm"] for r in records} == {"chain", "hierarchical", "mpi"}
    assert all(r["valid"] and r["p"] == 4 for r in records)
    print(f"\nsbatch train + bench: {time.monotonic() - t0:.1f} s")


def final_state(slurm, job: str, timeout: float) -> str:
    """The state a job ends in (COMPLETED, FAILED, ...), polled every 0.5 s: Slurm shows an ended job for
    MinJobAge (10 s). ``sbatch --wait`` sleeps longer and longer between its polls, and so returns long
    after the job has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = slurm.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T", check=False).stdout.strip()
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state or "gone before its end was seen"
        time.sleep(0.5)
    slurm.run("scancel", job, check=False)
    return f"still {state} after {timeout:g} s (cancelled)"
