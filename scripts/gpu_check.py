"""The GPU check: one command, under 8 minutes on a one-GPU machine, results in docs/results/gpu_check.json.

    python scripts/gpu_check.py                      # from the repository root; no network needed
    python scripts/gpu_check.py --budget 300 --out /tmp/check.json

What it runs (each part through tests.mpi_harness.run_mpi, so a crash or hang
in one part is contained, recorded with its error, and the next part runs):

1. environment: GPU, CUDA, CuPy, NCCL, MPI, and whether the MPI is CUDA-aware
2. the broadcast tests on CuPy buffers (tests/gpu/cases.py): every algorithm,
   2 and 4 ranks sharing the GPU, staged through host memory; the CUDA-aware
   path too when the MPI is; NCCL's broadcast with p = 1 (NCCL refuses two
   ranks on one device)
3. the dense matmul peak (float32, TF32, float16; bfloat16 through PyTorch)
4. the engine on CuPy: equivalence with the serial numpy model (float32 on
   every 2-rank grid, staged and CUDA-aware; float16 mixed precision against
   float64), then tokens/s and MFU of training steps, a small and a wide model,
   against the measured peak of the same dtype (float32 with and without TF32)
5. broadcast timings on CuPy buffers (staged, and NCCL at p = 1), plus the
   pipelining experiment: one unsegmented staged chain against pipelined ones,
   at p = 2 (one hop) and 4
6. ``gpulab train --device cupy --dtype float16`` on 2 ranks
7. the engine's performance model fitted on the device (``gpulab model fit --device cupy``) against
   ``gpulab bench engine`` on the four grids of 2 ranks: its error and pick
8. the GPU tests with pytest (skipped where pytest or pytest-xdist is missing)

Parts run in this order, most needed first: when the budget runs out, the
rest are recorded as skipped.

Needs: numpy, mpi4py with an MPI and its mpiexec (GPULAB_MPIEXEC to point at
one), CuPy; PyTorch optional. The JSON is rewritten after every part, so a
run that is killed still leaves what it measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpulab.launch import find_mpiexec  # noqa: E402
from tests.mpi_harness import run_mpi  # noqa: E402

STAGED = {"GPULAB_CUDA_AWARE": "0"}


def left(until: float) -> float:
    """Seconds a run_mpi call may take so that its part ends by ``until`` (monotonic clock)."""
    return max(5.0, until - time.monotonic())
TIMED = ["binomial", "chain", "scatter_allgather_ring", "mpi"]


def mpi_setup() -> dict:
    """Launcher facts, and the flags Open MPI needs to run as root on an oversubscribed node."""
    launcher = find_mpiexec()
    version = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=30)
    text = (version.stdout + version.stderr).strip()
    if "Open MPI" in text or "OpenRTE" in text:
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        os.environ.setdefault("GPULAB_MPIEXEC_ARGS", "--oversubscribe")
    lines = text.splitlines() or ["?"]
    return {"mpiexec": launcher, "version": next((ln.strip() for ln in lines if "ersion" in ln), lines[0]),
            "extra_args": os.environ.get("GPULAB_MPIEXEC_ARGS", "")}


def part_environment(until, state):
    env = run_mpi(1, "tests.gpu.check_cases:environment", timeout=left(until))[0]
    state["aware"] = env["mpi_cuda_aware"]
    return env


def part_bcast_staged(n):
    def run(until, state):
        counts = run_mpi(n, "tests.gpu.cases:check_all_algorithms", device=state["device"], expect_path="staged",
                         env=STAGED, timeout=left(until))
        return {"ranks": n, "cases_checked_per_algorithm": counts[0]}
    return run


def part_bcast_cuda_aware(until, state):
    if "aware" not in state:
        raise RuntimeError("the environment probe failed, so CUDA-awareness is unknown")
    if not state["aware"]:
        return {"skipped": "the MPI library is not CUDA-aware (see environment.mpi_cuda_aware_reason)"}
    counts = run_mpi(2, "tests.gpu.cases:check_all_algorithms", device="cupy", expect_path="cuda-aware",
                     env={"GPULAB_CUDA_AWARE": "1"}, timeout=left(until))
    return {"ranks": 2, "cases_checked_per_algorithm": counts[0]}


def part_nccl(until, state):
    return {"ranks": 1, "cases_checked": run_mpi(1, "tests.gpu.cases:check_nccl", timeout=left(until))[0]}


def part_timings(until, state):
    """Staged MPI-side algorithms at p = 2 and 4, NCCL at p = 1, and staging pipelined or not."""
    records = []
    for n in (2, 4):
        records += run_mpi(n, "tests.gpu.cases:measure_sweep", algorithms=TIMED, sizes=state["sizes"],
                           chunk_bytes=1 << 20, device=state["device"], env=STAGED, timeout=left(until))[0]
    if state["device"] == "cupy":
        records += run_mpi(1, "tests.gpu.cases:measure_sweep", algorithms=["nccl"], sizes=state["sizes"],
                           timeout=left(until))[0]
    big = state["sizes"][-1]
    for n in (2, 4):  # at p = 2 a chain has one hop, so only staging can overlap; at p = 4 the hops do too
        for label, chunk, staging in (("unpipelined", big, big), ("pipelined 1M", 1 << 20, 1 << 20),
                                      ("pipelined 4M", 4 << 20, 4 << 20)):
            for r in run_mpi(n, "tests.gpu.cases:measure_sweep", algorithms=["chain"], sizes=[big], chunk_bytes=chunk,
                             staging_chunk_bytes=staging, device=state["device"], env=STAGED,
                             timeout=left(until))[0]:
                records.append({**r, "series": f"chain {label}"})
    keep = ("series", "algorithm", "p", "nbytes", "path", "options", "avg_us", "min_us", "max_us",
            "busbw_GBps", "iters", "valid")
    return [{k: r[k] for k in keep if k in r} for r in records]


def part_matmul(until, state):
    peak = run_mpi(1, "tests.gpu.check_cases:matmul_peak", timeout=left(until))[0]
    tf32 = run_mpi(1, "tests.gpu.check_cases:matmul_peak", sizes={"float32": 8192}, env={"CUPY_TF32": "1"},
                   timeout=left(until))[0]
    peak["cupy_float32_tf32"] = tf32["cupy_float32"]
    state["peak"] = peak
    return peak


def part_engine_equivalence(until, state):
    """The engine on CuPy against the serial numpy model: float32 on every 2-rank grid (staged, and
    CUDA-aware when the MPI is), float16 mixed precision against float64."""
    shapes = [(2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 1), (1, 1, 1, 2)]
    keep = ("shape", "dtype", "loss_err", "grad_err", "train_loss_err", "norm_err", "param_err")
    device = state["device"]
    out = {"float32_staged": [{k: r[k] for k in keep} for r in run_mpi(
        2, "tests.engine.cases:equivalence", shapes=shapes, dtype="float32", device=device, expect_path="staged",
        env=STAGED, timeout=left(until))[0]]}
    out["float16_staged"] = run_mpi(2, "tests.engine.cases:float16_accuracy", shapes=shapes[1:3], device=device,
                                    expect_path="staged", env=STAGED, timeout=left(until))[0]
    if state.get("aware"):
        out["float32_cuda_aware"] = [{k: r[k] for k in keep} for r in run_mpi(
            2, "tests.engine.cases:equivalence", shapes=shapes[1:2], dtype="float32", device="cupy",
            expect_path="cuda-aware", env={"GPULAB_CUDA_AWARE": "1"}, timeout=left(until))[0]]
    return out


# (name, model) for the MFU part: the small model is launch-bound on a large GPU, the wide one is not
MFU_MODELS = [("small", {"n_embd": 768, "n_head": 12, "batch": 16}),
              ("wide", {"n_embd": 2048, "n_head": 16, "batch": 32})]


def part_engine_mfu(until, state):
    """Training steps on one GPU, a small and a wide model: MFU against the same dtype's measured peak
    (float32 with and without TF32, float16)."""
    peak = state.get("peak", {})
    out = {}
    for series, dtype, peak_name, env in (("float32", "float32", "cupy_float32", {}),
                                          ("float32_tf32", "float32", "cupy_float32_tf32", {"CUPY_TF32": "1"}),
                                          ("float16", "float16", "cupy_float16", {})):
        if peak_name not in peak:
            raise RuntimeError(f"no measured {peak_name} matmul peak to compute MFU against")
        out[series] = {model: run_mpi(1, "tests.gpu.check_cases:engine_mfu", peak_tflops={peak_name: peak[peak_name]},
                                      dtype=dtype, env=env, timeout=left(until), **sizes)[0]
                       for model, sizes in MFU_MODELS}
    return out


def missing(what: str, modules=("tqdm", "threadpoolctl")) -> dict | None:
    """A part's result when ``modules`` are not installed here (by default the gpulab commands' own
    dependencies, pip install -e .; the parts that call the library directly do without them)."""
    import importlib.util

    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return {"skipped": f"{what} needs {', '.join(absent)}, not installed here"} if absent else None


def gpulab_cli(args: list[str], until: float) -> str:
    """``gpulab *args`` from the source tree, staged; its output, or RuntimeError with the output's tail."""
    run = subprocess.run([sys.executable, "-m", "gpulab.cli", *args], capture_output=True, text=True,
                         timeout=left(until), cwd=ROOT, env={**os.environ, **STAGED})
    if run.returncode:
        raise RuntimeError(f"gpulab {' '.join(args[:2])}: exit {run.returncode}: {(run.stdout + run.stderr)[-3000:]}")
    return run.stdout


def part_train_cli(until, state):
    """``gpulab train --device cupy --dtype float16`` on 2 ranks sharing the GPU: the command a learner runs."""
    import tempfile

    if skip := missing("gpulab train"):
        return skip
    with tempfile.TemporaryDirectory() as tmp:
        out = gpulab_cli(["train", "--mesh", "1,2,1,1", "--device", "cupy", "--dtype", "float16", "--steps", "60",
                          "--no-progress", "--sample", "0", "--out", f"{tmp}/gpt.npz"], until)
    line = next(ln for ln in out.splitlines() if ln.startswith("summary "))
    return json.loads(line[len("summary "):])


def part_engine_model(until, state):
    """The engine's performance model fitted with the arrays on the device (``gpulab model fit --device``) against
    ``gpulab bench engine`` on every grid of 2 ranks, overlap off and on: its error and pick per setting."""
    import tempfile

    from benchmarks.engine_accuracy import scored
    from gpulab.engine.perf.machines import machine

    if skip := missing("gpulab model fit"):
        return skip
    device = state["device"]
    with tempfile.TemporaryDirectory() as tmp:
        fit, bench = f"{tmp}/fit.json", f"{tmp}/bench.json"
        gpulab_cli(["model", "fit", "-n", "2", "--device", device, "--reps", "2", "--out", fit], until)
        gpulab_cli(["bench", "engine", "-n", "2", "--device", device, "--shapes", "1,2,1,1;2,1,1,1;1,1,2,1;1,1,1,2",
                    "--overlap", "none;all", "--iters", "5", "--rounds", "2", "--warmup", "2", "--out", bench], until)
        rows = json.loads(Path(bench).read_text())
        v = scored(rows, machine(fit))
    keep = ("median_abs_rel_error", "pick_over_best", "spearman", "model_pick", "measured_best")
    return {"grids": [{"shape": r["shape"], "overlap": r["overlap_label"], "iter_s": r["iter_s"]} for r in rows],
            **{setting: {k: v[setting][k] for k in keep} for setting in v}}


def part_pytest(until, state):
    """The GPU tests as a developer runs them, where pytest and pytest-xdist are installed: the summary line.
    Their first run on a GPU found what the parts above did not (docs/gpu.md)."""
    if skip := missing("the tests", ("pytest", "xdist")):
        return skip
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "4", *GPU_TESTS],
                         capture_output=True, text=True, timeout=left(until), cwd=ROOT)
    summary = next((ln.strip("= ") for ln in reversed(run.stdout.splitlines()) if " passed" in ln or " failed" in ln),
                   "no summary")
    if run.returncode:
        raise RuntimeError(f"pytest exit {run.returncode}: {summary}\n{run.stdout[-3000:]}")
    return {"tests": GPU_TESTS, "summary": summary}


GPU_TESTS = ["tests/gpu", "tests/engine/test_config_api.py", "tests/engine/test_peak.py"]
# (name, function, seconds it may take at most), in order of priority: what the issue asks for
# first, the timing experiments last, so that a tight budget cuts only those
PARTS = [("environment", part_environment, 60), ("bcast_staged_p2", part_bcast_staged(2), 90),
         ("bcast_staged_p4", part_bcast_staged(4), 120), ("bcast_cuda_aware_p2", part_bcast_cuda_aware, 90),
         ("nccl_p1", part_nccl, 60), ("matmul_peak", part_matmul, 60),
         ("engine_equivalence", part_engine_equivalence, 150), ("engine_mfu", part_engine_mfu, 120),
         ("bcast_timings", part_timings, 150), ("train_cli", part_train_cli, 90),
         ("engine_model", part_engine_model, 90), ("pytest", part_pytest, 120)]


def summary_lines(report: dict) -> list[str]:
    lines = []
    for name, part in report["parts"].items():
        state = "ok" if part["ok"] else "FAILED"
        # the failing rank's exception: the last line before the job's output tail
        last = (part.get("error", "").split("output tail:")[0].strip().splitlines() or [""])[-1]
        detail = "" if part["ok"] else " - " + last[:160]
        lines.append(f"{name:22s} {state:6s} {part['seconds']:6.1f} s{detail}")
    peak = report["parts"].get("matmul_peak", {}).get("result") or {}
    lines += [f"  matmul {k}: {v['tflops']:.1f} TFLOP/s" for k, v in peak.items()]
    for series, models in (report["parts"].get("engine_mfu", {}).get("result") or {}).items():
        lines += [f"  engine {series} {model}: {r['tokens_per_s']:.0f} tokens/s, {r['tflops_per_rank']:.1f} TFLOP/s, "
                  f"MFU {next(iter(r['mfu'].values())):.3f}" for model, r in models.items()]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=420, help="seconds for everything (default 420)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "gpu_check.json"))
    parser.add_argument("--only", default="", help="comma-separated part names (default: all)")
    parser.add_argument("--device", choices=("cupy", "fake"), default="cupy",
                        help="fake: a CPU dry run of the broadcast and engine-equivalence parts (gpulab.fakedevice)")
    parser.add_argument("--sizes", default="4K,256K,4M,64M", help="broadcast timing sizes (default 4K,256K,4M,64M)")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.budget
    from gpulab.bcast.sizes import size_range
    from gpulab.records import provenance

    report = {"provenance": provenance("the GPU check: environment, broadcasts on the device, matmul peaks, the "
                                       "engine on the device, training, staging timings"),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "budget_s": args.budget, "parts": {}}

    state: dict = {"device": args.device, "sizes": size_range(args.sizes)}
    report["device"] = args.device
    try:
        report["mpi"] = mpi_setup()
    except Exception as error:  # noqa: BLE001 - every part will say the same; keep going
        report["mpi"] = {"error": f"{type(error).__name__}: {error}"}
    wanted = set(filter(None, args.only.split(",")))
    for name, part, cap in PARTS:
        if wanted and name not in wanted:
            continue
        remaining = deadline - time.monotonic()
        start = time.monotonic()
        if remaining < 15:
            report["parts"][name] = {"ok": False, "seconds": 0.0, "error": "skipped: time budget spent"}
        else:
            try:
                result = part(start + min(cap, remaining), state)
                report["parts"][name] = {"ok": True, "seconds": time.monotonic() - start, "result": result}
            except Exception as error:  # noqa: BLE001 - record and go on to the next part
                report["parts"][name] = {"ok": False, "seconds": time.monotonic() - start,
                                         "error": f"{type(error).__name__}: {error}"[-6000:],
                                         "traceback": traceback.format_exc()[-3000:]}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
        print(summary_lines({"parts": {name: report["parts"][name]}})[0], flush=True)
    print("\n".join(["", "gpu check summary:", *summary_lines(report), f"wrote {args.out}"]))
    return 0 if all(p["ok"] for p in report["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
