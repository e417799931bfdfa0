"""Notebook 08 runs where MPI is absent: its kernel cannot import mpi4py, and the calculator still answers.

The kernel's PYTHONPATH starts with a folder holding an ``mpi4py`` package whose import fails, so
any ``import mpi4py`` in the notebook or in what it imports raises, as on a laptop without MPI.
"""

import os
import subprocess
import sys

import pytest

from tests.notebooks.nbrun import NOTEBOOKS, execute, what_went_wrong
from tests.notebooks.parameters import PARAMETERS

NAME = "08_calculator"


@pytest.fixture
def without_mpi4py(tmp_path, monkeypatch):
    hidden = tmp_path / "hide_mpi4py" / "mpi4py"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('mpi4py is hidden: this notebook must run without MPI')\n")
    path = [str(hidden.parent)] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    monkeypatch.setenv("PYTHONPATH", ":".join(path))
    check = subprocess.run([sys.executable, "-c", "import mpi4py"], capture_output=True, text=True, timeout=60)
    assert check.returncode != 0 and "mpi4py is hidden" in check.stderr  # the blocker works


@pytest.mark.timeout(600)
def test_the_calculator_notebook_runs_without_mpi(without_mpi4py, ipython_dir):
    nb = execute(NOTEBOOKS / f"{NAME}.ipynb", PARAMETERS[NAME], ipython_dir=ipython_dir, cell_timeout=180)
    assert not what_went_wrong(nb)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "mpi4py loaded: False" in text
    assert "with 4 stages" in text and "stage 3: " in text  # the pipeline slider, set from code, responded
    assert "1.50x" in text  # ZeRO-3 sends 1.5x DDP's bytes in the data group
    assert text.count(" GPUs: 1D ") == len(PARAMETERS[NAME]["VOLUME_GPUS"])
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    widgets = sum("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                  for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert widgets >= 1 or images >= 1  # the calculator displayed itself
