"""Check mode: every rank of a broadcast must pass the same algorithm, root and options.

MPI has no way to notice ranks that disagree: a rank that broadcasts from
another root, or with another algorithm or chunk size, makes the job hang or
silently delivers wrong bytes. In check mode each broadcast first gathers what
every rank was asked to do and, if the calls differ, raises
``BcastArgumentMismatch`` on every rank, naming the ranks and their calls.

    GPULAB_BCAST_CHECK=1 mpiexec -n 4 python -m mpi4py my_script.py
    # or, in code:   gpulab.bcast.runtime.argument_check.checking(True)

It costs one allgather of a short string per broadcast, far more than a small
broadcast itself, so it is a debugging aid, off by default.
"""

from __future__ import annotations

import json
import os

_enabled = os.environ.get("GPULAB_BCAST_CHECK", "") not in ("", "0")
on_switch: list = []  # called after checking is switched on or off (the fast path forgets its plans)


class BcastArgumentMismatch(ValueError):
    """The ranks of one broadcast were called with different arguments."""


def checking(on: bool | None = None) -> bool:
    """Whether broadcasts check their arguments across ranks; ``checking(True/False)`` switches it."""
    global _enabled
    if on is not None and bool(on) != _enabled:
        _enabled = bool(on)
        for hook in on_switch:
            hook()
    return _enabled


def agree(comm, algorithm: str, root, options: dict, nbytes) -> None:
    """Raise BcastArgumentMismatch on every rank unless all ranks of ``comm`` passed the same call."""
    mine = json.dumps({"algorithm": algorithm, "root": root, "options": options, "bytes": nbytes},
                      sort_keys=True, default=repr)
    calls = comm.allgather(mine)
    differ = [rank for rank, call in enumerate(calls) if call != calls[0]]
    if differ:
        shown = "; ".join(f"rank {rank}: {_describe(calls[rank])}" for rank in differ[:3])
        more = f" (and {len(differ) - 3} more ranks)" if len(differ) > 3 else ""
        raise BcastArgumentMismatch(f"broadcast called differently across ranks: rank 0: {_describe(calls[0])}; "
                                    f"{shown}{more}")


def _describe(call: str) -> str:
    c = json.loads(call)
    options = "".join(f", {k}={v!r}" for k, v in c["options"].items())
    return f"{c['algorithm']}(root={c['root']!r}{options}) on {c['bytes']} bytes"
