"""Each notebook is a jupytext pair: notebooks_src/NN_name.py (percent format, what you edit and review)
and notebooks/NN_name.ipynb (what Jupyter opens, committed without outputs; the learner's folder holds
nothing else). Drift between them fails here.

Fix a drift with:  jupytext --sync notebooks/*.ipynb   (or --to ipynb from the .py you edited)
"""

import jupytext
import nbformat
import pytest

from tests.notebooks.nbrun import NOTEBOOKS, SOURCES

PAIRS = sorted(p.stem for p in SOURCES.glob("[0-9][0-9]_*.py"))


def cells(nb):
    return [(c.cell_type, c.source, sorted(c.metadata.get("tags", []))) for c in nb.cells]


def test_notebooks_are_numbered_pairs():
    assert PAIRS and PAIRS == sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))


def test_the_learners_folder_holds_only_what_a_learner_opens():
    """A learner opening notebooks/ sees the numbered notebooks only: no .py twin, no test plugin."""
    shown = sorted(p.name for p in NOTEBOOKS.iterdir() if not p.name.startswith("."))  # JupyterLab hides dot-files
    assert shown == [f"{name}.ipynb" for name in PAIRS], shown


@pytest.mark.parametrize("name", PAIRS)
def test_each_pair_names_the_other(name):
    """Jupyter (with jupytext) saves both files of a pair: the pairing says where the other one lives."""
    formats = "notebooks///ipynb,notebooks_src///py:percent"
    assert jupytext.read(SOURCES / f"{name}.py").metadata["jupytext"]["formats"] == formats
    assert nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).metadata["jupytext"]["formats"] == formats


@pytest.mark.parametrize("name", PAIRS)
def test_py_and_ipynb_have_the_same_cells(name):
    script = jupytext.read(SOURCES / f"{name}.py")
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    assert cells(script) == cells(notebook), f"{name}.py and {name}.ipynb differ: run jupytext --sync"


@pytest.mark.parametrize("name", PAIRS)
def test_ipynb_is_clean_and_runnable(name):
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"  # or JupyterLab asks for a kernel
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks without outputs"
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1


@pytest.mark.parametrize("name", PAIRS)
def test_px_magic_is_on_the_first_line(name):
    # "# comment\n%%px" is a UsageError at run time; catch it before running
    for cell in jupytext.read(SOURCES / f"{name}.py").cells:
        if cell.cell_type == "code" and "%%px" in cell.source:
            assert cell.source.startswith("%%px"), cell.source[:80]


def test_drift_is_detected(tmp_path):
    script = jupytext.read(SOURCES / f"{PAIRS[0]}.py")
    notebook = nbformat.read(NOTEBOOKS / f"{PAIRS[0]}.ipynb", as_version=4)
    notebook.cells[-1].source += "\nprint('edited only in the ipynb')"
    assert cells(script) != cells(notebook)
