"""Execute a notebook for real, strictly: every cell's reply must say "ok", within a cell timeout.

Why not plain ``pytest --nbval``: nbval ignores the kernel's execute_reply
status, so a ``%%px`` cell that fails with a UsageError (the error lives only in
the reply and a stderr line) is reported as passed. Here every reply is checked,
a cell that runs past ``cell_timeout`` fails, and the MPI engines a notebook
started are found afterwards by their IPYTHONDIR and stopped.

Why a client of our own (``StrictClient``): while a cell runs, nbclient waits
for the execute_reply with one asyncio poll on the shell socket. Messages that
nbclient sends on that socket meanwhile (its stand-in for an
``ipywidgets.Output`` answers every display into the widget with a comm_msg)
go through ``Session.send``, which writes to a plain synchronous shadow of the
asyncio socket. That raw send makes libzmq process the socket's pending
commands, which clears the edge-triggered readiness of its file descriptor: if
the reply had just arrived, the pending poll is never told and wakes only at
the cell timeout (the notebook-02 stalls: exactly ``cell_timeout`` seconds,
then success). ``wake_pending_poll`` routes those sends through the asyncio
socket itself, whose send re-checks the socket's events and wakes a waiting
poll. Upstream: nbclient issue #312, jupyter_client PR #1059.

    nb = execute("notebooks/00_start_here.ipynb", {"N_ENGINES": 2}, ipython_dir=tmp)
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

__all__ = ["NOTEBOOKS", "RAISES", "CellExecutionError", "CellTimeoutError", "ReplyNotOk", "StrictClient", "execute",
           "inject_parameters", "wake_pending_poll", "what_went_wrong"]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"  # what a learner opens: the .ipynb only
SOURCES = ROOT / "notebooks_src"  # their jupytext twins, what you edit and review
RAISES = "raises-exception"


class ReplyNotOk(AssertionError):
    """A cell's execute_reply had a status other than "ok"."""


class _SendThroughAsyncio:
    """What ``Session.send`` writes to: hands its frames to the asyncio socket instead of a raw shadow."""

    def __init__(self, socket):
        self.socket = socket

    def send_multipart(self, frames, **kwargs):
        # zmq.asyncio sends at once when it can and then re-checks the socket's
        # events, resolving a poll that waits for a message already queued
        self.socket.send_multipart(frames, **kwargs)


def wake_pending_poll(channel):
    """Make ``channel.send`` (a jupyter_client asyncio channel) wake a poll pending on the same socket."""
    stream = _SendThroughAsyncio(channel.socket)
    channel.send = lambda msg: channel.session.send(stream, msg)
    return channel


class StrictClient(NotebookClient):
    """nbclient's NotebookClient whose shell-channel sends cannot swallow the execute_reply's wake-up."""

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        wake_pending_poll(kc.shell_channel)
        return kc


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


def execute(path, parameters: dict | None = None, *, ipython_dir, cell_timeout: float | Callable = 180):
    """Run the notebook top to bottom in a fresh python3 kernel; return the executed notebook.

    ``cell_timeout``: seconds for every cell, or a function of the cell giving its seconds.
    Raises nbclient's CellExecutionError / CellTimeoutError, or ReplyNotOk; a cell tagged "raises-exception"
    may fail (its error output shows how).
    """
    path = Path(path)
    nb = inject_parameters(nbformat.read(path, as_version=4), parameters or {})
    replies = []
    per_cell = callable(cell_timeout)
    client = StrictClient(
        nb, timeout=None if per_cell else math.ceil(cell_timeout), timeout_func=cell_timeout if per_cell else None,
        kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
        on_cell_executed=lambda cell, cell_index, execute_reply: replies.append((cell_index, execute_reply)))
    tmp = Path(ipython_dir).parent / "tmp"  # what the notebook makes with tempfile stays in the test's directory
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "IPYTHONDIR": str(ipython_dir), "IPP_NONINTERACTIVE": "1", "TMPDIR": str(tmp),
           "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    client.execute(env=env)  # the kernel, and the engines it starts, inherit env
    # belt and braces: nbclient raises on error replies; check every code cell got an "ok" anyway, but for
    # a cell tagged "raises-exception" (nbclient's mark for a cell whose error the notebook shows on purpose)
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    statuses = {i: r["content"]["status"] for i, r in replies}
    bad = {i: s for i, s in statuses.items() if s != "ok" and RAISES not in nb.cells[i].metadata.get("tags", [])}
    missing = sorted(set(code_cells) - set(statuses))
    if bad or missing:
        raise ReplyNotOk(f"{path.name}: cells with non-ok replies {bad}, cells without a reply {missing}")
    return nb


def what_went_wrong(nb) -> list[str]:
    """What a notebook that was run top to bottom (here, or in JupyterLab and saved) must not show: a code
    cell that did not run, an error, a figure that the inline backend showed as well (a pyplot figure,
    "<Figure size 640x480 with 1 Axes>": drawn a second time and shown twice beside the PNG of as_image())."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if cell.execution_count is None:
            found.append(f"cell {i} did not run")
        for output in cell.outputs:
            if output.output_type == "error":
                found.append(f"cell {i}: {output.ename}: {output.evalue}")
            shown = output.get("data", {}).get("text/plain", "")
            if shown.startswith("<Figure"):
                found.append(f"cell {i} shows a figure twice: {shown}")
    return found
