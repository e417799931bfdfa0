"""Every notebook in notebooks/ runs top to bottom for real, strictly, with shrunken parameters.

    pytest tests/notebooks              # all of them (about 4 minutes on 2 cores)
    pytest tests/notebooks -k 00_start  # one

Each notebook starts its own MPI engines and asserts on its results (for
example that every rank validated its broadcast); a failed %%px cell, any
error, or a cell running past CELL_TIMEOUT fails the test (see nbrun.py), and
afterwards no engine or mpiexec of the notebook may remain (tests/conftest.py).

The explorer notebooks (02, 05) run top to bottom in JupyterLab instead
(tests/browser), which saves them and fails on the same faults (``what_went_wrong``);
they run here only where Chromium is missing and that test cannot run.
"""

from pathlib import Path

import pytest

from gpulab import host
from tests.browser.lab import CHROMIUM
from tests.browser.test_explorer_in_jupyterlab import EXPLORERS
from tests.notebooks.nbrun import NOTEBOOKS, execute, what_went_wrong
from tests.notebooks.parameters import PARAMETERS

# Engine calls inside a notebook are bounded at 120 s (EngineRunner); a cell bound of 180 s
# keeps the two apart: a cell stuck at 120 s is an engine, at 180 s the cell itself. Both are written for
# an idle machine with a core per rank, and stretched alike for this one (gpulab.host.time_limit).
CELL_TIMEOUT = 180
RANKS = 4  # every notebook's engines under test (parameters.py)


def cell_limit(cell) -> float:
    """CELL_TIMEOUT stretched for the machine as the cell starts, as the notebook's own limits are."""
    return host.time_limit(CELL_TIMEOUT, RANKS)


def test_every_notebook_has_test_parameters():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(PARAMETERS)


def run_here() -> list[str]:
    """The notebooks to run here: all but the explorers, where the browser test can run them."""
    return sorted(name for name in PARAMETERS if not (name in EXPLORERS and Path(CHROMIUM).exists()))


# notebook 03: 77 s in CI, 426 s at load 24 on 2 cores; a stuck cell ends at its limit
@pytest.mark.timeout(round(host.time_limit(600, RANKS)))
@pytest.mark.parametrize("name", run_here())
def test_notebook_runs(name, ipython_dir):
    nb = execute(NOTEBOOKS / f"{name}.ipynb", PARAMETERS[name], ipython_dir=ipython_dir, cell_timeout=cell_limit)
    assert not what_went_wrong(nb)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    if name == "01_broadcast_algorithms":  # four pattern panels and the sweep plot
        assert sum("image/png" in o.get("data", {}) for o in outputs) == 5
