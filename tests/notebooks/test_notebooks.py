"""Every notebook in notebooks/ runs top to bottom for real, strictly, with shrunken parameters.

    pytest tests/notebooks              # all of them (about 5 minutes on 2 cores)
    pytest tests/notebooks -k 00_start  # one

Each notebook starts its own MPI engines and asserts on its results (for
example that every rank validated its broadcast); a failed %%px cell, any
error, or a cell running past CELL_TIMEOUT fails the test (see nbrun.py), and
afterwards no engine or mpiexec of the notebook may remain (tests/conftest.py).
"""

import pytest

from tests.notebooks.nbrun import NOTEBOOKS, execute
from tests.notebooks.parameters import PARAMETERS

# Engine calls inside a notebook are bounded at 120 s (EngineRunner); a cell bound of 180 s
# keeps the two apart: a cell stuck at 120 s is an engine, at 180 s the cell itself.
CELL_TIMEOUT = 180


def test_every_notebook_has_test_parameters():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(PARAMETERS)


@pytest.mark.timeout(600)  # notebook 03: 77 s in CI, 426 s at load 24 on 2 cores; a stuck cell ends at 180 s
@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_notebook_runs(name, ipython_dir):
    nb = execute(NOTEBOOKS / f"{name}.ipynb", PARAMETERS[name], ipython_dir=ipython_dir, cell_timeout=CELL_TIMEOUT)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # every plot is shown once, as the PNG of as_image(): a figure shown by the inline backend as well (a
    # pyplot figure: "<Figure size 640x480 with 1 Axes>") appears twice and is drawn twice
    shown_twice = [o["data"]["text/plain"] for o in outputs if o.get("data", {}).get("text/plain", "").startswith("<Figure")]
    assert not shown_twice, shown_twice
    if name == "01_broadcast_algorithms":  # four pattern panels and the sweep plot
        assert sum("image/png" in o.get("data", {}) for o in outputs) == 5
