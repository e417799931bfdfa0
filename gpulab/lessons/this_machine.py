"""What the learner's own machine is (cores, load), so a notebook states it instead of assuming it."""

from __future__ import annotations

import os


def cores() -> int:
    """Cores this process may run on (a Slurm job or a container may grant fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load() -> float | None:
    """Runnable processes, averaged over the last minute (None where the system does not say)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def describe(ranks: int | None = None) -> str:
    """One sentence for a notebook: the cores, the load, and what ``ranks`` busy ranks get of them."""
    n, busy = cores(), load()
    text = f"This machine gives the notebook {n} core{'s' if n != 1 else ''}"
    text += f" (load {busy:.1f} over the last minute)" if busy is not None else ""
    if ranks:
        share = n / ranks
        text += (f"; {ranks} MPI ranks that busy-poll while they wait get about {min(share, 1.0):.2g} core each"
                 + (", so they take turns and a rank that forwards data can wait for a core" if share < 1 else ""))
    return text + "."
