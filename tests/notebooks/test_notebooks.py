"""Every notebook in notebooks/ runs top to bottom for real, strictly, with shrunken parameters.

    pytest tests/notebooks              # all of them (about 2 minutes on 2 cores)
    pytest tests/notebooks -k 00_start  # one

Each notebook starts its own MPI engines and asserts on its results (for
example that every rank validated its broadcast); a failed %%px cell, any
error, or a cell running past CELL_TIMEOUT fails the test (see nbrun.py), and
afterwards no engine or mpiexec of the notebook may remain (tests/conftest.py).
"""

import pytest

from tests.notebooks.nbrun import NOTEBOOKS, execute

# Engine calls inside a notebook are bounded at 120 s (EngineRunner); a cell bound of 180 s
# keeps the two apart: a cell stuck at 120 s is an engine, at 180 s the cell itself.
CELL_TIMEOUT = 180
# smaller than the defaults, same code paths: 4 ranks so trees and chains differ
PARAMETERS = {
    "00_start_here": {"NBYTES": 1 << 16, "ITERS": 5},
    "01_broadcast_algorithms": {"SIZES": [1 << 10, 1 << 16], "ITERS": 5},
    "02_broadcast_explorer": {"SIZES": (1 << 10, 1 << 14), "ITERS": 5},
    "03_model_and_tuning": {"FIT_SIZES": [64, 8192, 1 << 20], "CHECK_SIZES": [1 << 12, 1 << 20], "CHUNK_MESSAGE": 1 << 20, "CHUNKS": [1 << 16, 1 << 18], "TUNE_SIZES": [1 << 10, 1 << 18], "NETWORKS": ["resnet50"]},
    "04_tensor_parallel_3d": {},  # already small: one 8 x 12 layer on 4 ranks
    "05_mesh_explorer": {"ITERS": 2, "FIT_REPS": 1},  # the engine engineer's: every 4-rank grid, on/off
    "06_scaling_on_paper": {"WEAK": [("gpt-5b", 64), ("gpt-80b", 1024), ("gpt-640b", 16384)]},
    "07_axonn_vs_baselines": {"ITERS": 2, "FIT_REPS": 1, "MICRO": 4},  # every strategy live, both pipelines
}


def test_every_notebook_has_test_parameters():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(PARAMETERS)


@pytest.mark.timeout(600)  # notebook 03: 77 s in CI, 426 s at load 24 on 2 cores; a stuck cell ends at 180 s
@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_notebook_runs(name, ipython_dir):
    nb = execute(NOTEBOOKS / f"{name}.ipynb", PARAMETERS[name], ipython_dir=ipython_dir, cell_timeout=CELL_TIMEOUT)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if name == "01_broadcast_algorithms":  # four pattern panels and the sweep plot
        assert sum("image/png" in o.get("data", {}) for o in outputs) == 5
