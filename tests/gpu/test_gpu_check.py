"""scripts/gpu_check.py on a CPU: its broadcast parts run on the fake device, GPU parts fail and are recorded."""

import json
import subprocess
import sys

from tests.mpi_harness import ROOT


def test_dry_run_records_results_and_errors(tmp_path):
    out = tmp_path / "check.json"
    parts = "environment,bcast_staged_p2,bcast_timings,engine_equivalence,engine_model"
    done = subprocess.run([sys.executable, "scripts/gpu_check.py", "--device", "fake", "--only", parts,
                           "--sizes", "4K,64K", "--budget", "200", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=230)
    report = json.loads(out.read_text())
    # in the script's order of priority, whatever the order asked
    assert list(report["parts"]) == ["environment", "bcast_staged_p2", "engine_equivalence", "bcast_timings",
                                     "engine_model"]
    assert report["device"] == "fake"
    staged = report["parts"]["bcast_staged_p2"]
    assert staged["ok"] and min(staged["result"]["cases_checked_per_algorithm"].values()) > 0
    timings = report["parts"]["bcast_timings"]["result"]
    assert all(r["valid"] and r["path"] == "staged" for r in timings)
    assert {r["p"] for r in timings} == {2, 4}
    assert {r["series"] for r in timings if "series" in r} == {
        "chain unpipelined", "chain pipelined 1M", "chain pipelined 4M"}
    engine = report["parts"]["engine_equivalence"]
    assert engine["ok"]
    assert len(engine["result"]["float32_staged"]) == 4 and len(engine["result"]["float16_staged"]) == 2
    model = report["parts"]["engine_model"]["result"]  # fitted and measured on the fake device, 8 grids priced
    assert len(model["grids"]) == 8 and all(0 <= model[s]["median_abs_rel_error"] for s in ("off", "on"))
    try:
        import cupy  # noqa: F401
    except ImportError:  # no GPU stack here: the probe fails, the run says so, the other parts still ran
        assert not report["parts"]["environment"]["ok"] and done.returncode == 1
        assert "environment" in done.stdout and "FAILED" in done.stdout


def test_the_check_needs_only_numpy_mpi4py_and_cupy():
    # the GPU machine has CuPy, PyTorch and mpi4py, not the notebook or plotting extras
    blocked = ["matplotlib", "tqdm", "ipyparallel", "threadpoolctl", "IPython", "psutil", "traitlets", "pytest",
               "scipy", "ipywidgets", "jupytext"]
    code = (f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); "
            "import gpulab.bcast, gpulab.bcast.measurement.measure, gpulab.engine, tests.gpu.cases, "
            "tests.gpu.check_cases, tests.engine.cases, tests.mpi_harness, tests.mpi_worker; "
            "sys.argv = ['x', '--help']; import runpy; runpy.run_path('scripts/gpu_check.py', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "gpu_check.json" in done.stdout, done.stderr
