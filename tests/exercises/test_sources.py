"""The exercise notebooks: six numbered nbgrader source notebooks, each a jupytext pair whose .py and .ipynb
carry the same cells and nbgrader metadata, committed without outputs, with solution regions and graded cells.

Fix a drift with:  jupytext --sync exercises/source/*/*.py
"""

import jupytext
import nbformat
import pytest

from tests.exercises.sources import ASSIGNMENTS, COURSE, notebook_of


def cells(nb):
    return [(c.cell_type, c.source, c.metadata.get("nbgrader"), sorted(c.metadata.get("tags", []))) for c in nb.cells]


def test_six_numbered_assignments():
    assert [a[:3] for a in ASSIGNMENTS] == ["01_", "02_", "03_", "04_", "05_", "06_"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_py_and_ipynb_are_the_same_source_notebook(assignment):
    folder = COURSE / "source" / assignment
    assert sorted(p.name for p in folder.iterdir()) == [f"{assignment}.ipynb", f"{assignment}.py"]
    script = jupytext.read(folder / f"{assignment}.py")
    notebook = nbformat.read(notebook_of(assignment), as_version=4)
    assert cells(script) == cells(notebook), f"{assignment}.py and .ipynb differ: run jupytext --sync"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_an_nbgrader_source_notebook(assignment):
    notebook = nbformat.read(notebook_of(assignment), as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks without outputs"
    meta = [c.metadata.get("nbgrader") for c in notebook.cells]
    assert all(m and m["schema_version"] == 3 for m in meta), "every cell needs nbgrader metadata"
    assert len({m["grade_id"] for m in meta}) == len(meta), "grade ids must be unique"
    solutions = [c for c in code if c.metadata.nbgrader["solution"]]
    graded = [c for c in code if c.metadata.nbgrader["grade"]]
    assert solutions and all("### BEGIN SOLUTION" in c.source and "### END SOLUTION" in c.source for c in solutions)
    assert graded and all(c.metadata.nbgrader["locked"] and c.metadata.nbgrader["points"] > 0 for c in graded)
    statements = [c for c in notebook.cells if c.cell_type == "markdown"]
    assert statements and all(c.metadata.nbgrader["locked"] for c in statements)  # read-only statements
    assert "engines.stop()" in code[-1].source  # grading leaves no engines behind
