"""The exercises' reference solutions, read from the nbgrader source notebooks (where the teacher keeps them)."""

from __future__ import annotations

import functools
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
COURSE = ROOT / "exercises"
ASSIGNMENTS = sorted(p.name for p in (COURSE / "source").iterdir() if p.is_dir())


def notebook_of(assignment: str) -> Path:
    return COURSE / "source" / assignment / f"{assignment}.ipynb"


def cells_of(assignment: str, kind: str) -> list:
    """Code cells of one nbgrader kind: "solution", "grade" (autograded tests) or "locked"."""
    nb = nbformat.read(notebook_of(assignment), as_version=4)
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get(kind)]


@functools.cache
def reference(assignment: str) -> dict:
    """The names the solution cells define, run with the setup cell's imports (not its engines)."""
    namespace: dict = {}
    setup = next(c for c in cells_of(assignment, "locked") if c.metadata["nbgrader"]["grade_id"] == "setup")
    imports = [line for line in setup.source.splitlines() if line.startswith(("import ", "from "))]
    exec("\n".join(imports), namespace)  # noqa: S102 - the repository's own notebooks
    for cell in cells_of(assignment, "solution"):
        exec(cell.source, namespace)  # noqa: S102
    return namespace
