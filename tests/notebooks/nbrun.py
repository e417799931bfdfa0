"""Execute a notebook for real, strictly: every cell's reply must say "ok", within a cell timeout.

Why not plain ``pytest --nbval``: nbval ignores the kernel's execute_reply
status, so a ``%%px`` cell that fails with a UsageError (the error lives only in
the reply and a stderr line) is reported as passed. Here every reply is checked,
a cell that runs past ``cell_timeout`` fails, and the MPI engines a notebook
started are found afterwards by their IPYTHONDIR and stopped.

    nb = execute("notebooks/00_start_here.ipynb", {"N_ENGINES": 2}, ipython_dir=tmp)
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

__all__ = ["NOTEBOOKS", "CellExecutionError", "CellTimeoutError", "ReplyNotOk", "execute", "inject_parameters"]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


class ReplyNotOk(AssertionError):
    """A cell's execute_reply had a status other than "ok"."""


def inject_parameters(nb, parameters: dict):
    """A copy of nb with a cell that overrides the parameters, after the "parameters" cell (as papermill does)."""
    nb = copy.deepcopy(nb)
    index = next((i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])), None)
    if parameters and index is None:
        raise ValueError("notebook has no cell tagged 'parameters' to override")
    if parameters:
        source = "\n".join(f"{name} = {value!r}" for name, value in parameters.items())
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
        nb.cells.insert(index + 1, cell)
    return nb


def execute(path, parameters: dict | None = None, *, ipython_dir, cell_timeout: float = 120):
    """Run the notebook top to bottom in a fresh python3 kernel; return the executed notebook.

    Raises nbclient's CellExecutionError / CellTimeoutError, or ReplyNotOk.
    """
    path = Path(path)
    nb = inject_parameters(nbformat.read(path, as_version=4), parameters or {})
    replies = []
    client = NotebookClient(
        nb, timeout=cell_timeout, kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
        on_cell_executed=lambda cell, cell_index, execute_reply: replies.append((cell_index, execute_reply)))
    env = {**os.environ, "IPYTHONDIR": str(ipython_dir), "IPP_NONINTERACTIVE": "1",
           "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    client.execute(env=env)  # the kernel, and the engines it starts, inherit env
    # belt and braces: nbclient raises on error replies; check every code cell got an "ok" anyway
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    statuses = {i: r["content"]["status"] for i, r in replies}
    bad = {i: s for i, s in statuses.items() if s != "ok"}
    missing = sorted(set(code_cells) - set(statuses))
    if bad or missing:
        raise ReplyNotOk(f"{path.name}: cells with non-ok replies {bad}, cells without a reply {missing}")
    return nb
