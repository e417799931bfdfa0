"""What this machine is and how busy it is now: cores, load, ranks per core, and time limits that allow for them.

A measurement on a shared machine means little without the state it was taken in, and a time limit
that suits an idle laptop fires on a busy one. Notebooks state the learner's own machine with
``describe``; measurements keep ``snapshot(ranks)`` beside their numbers (a verdict that cannot
decide says how busy the machine was); ``time_limit`` stretches a limit by how many ranks and other
processes share the cores. Standard library only: nothing here imports gpulab or starts MPI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MAX_STRETCH = 20.0  # a limit grows at most this much: past it something hangs rather than waits


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


@dataclass(frozen=True)
class Snapshot:
    """The machine at one moment: its cores, the load average, and how many ranks a job puts on them."""

    cores: int
    load: float | None
    ranks: int | None = None

    @property
    def ranks_per_core(self) -> float | None:
        return self.ranks / self.cores if self.ranks else None

    @property
    def busy(self) -> bool:
        """A load average above the cores: the job's ranks will wait. The average is over the last minute, so it
        still counts the ranks of a job that ended just before (the kit's own, in a series of jobs)."""
        return self.load is not None and self.load > self.cores

    def text(self) -> str:
        parts = [f"{self.cores} core{'s' if self.cores != 1 else ''}"]
        if self.load is not None:
            parts.append(f"load {self.load:.1f}")
        if self.ranks:
            parts.append(f"{self.ranks} ranks ({self.ranks_per_core:.2g} per core)")
        return ", ".join(parts)

    def advice(self) -> str:
        """What would make a measurement here more decisive."""
        tips = []
        if self.busy:
            tips.append("rerun when the machine is idle (the load average, which still counts a job that ended "
                        "within the last minute, was above the cores)")
        if self.ranks_per_core and self.ranks_per_core > 1:
            tips.append("use fewer ranks than cores, or more cores, so that no rank waits for one")
        tips.append("repeat more (a longer time budget narrows the interval)")
        return "; ".join(tips)

    def to_dict(self) -> dict:
        return {"cores": self.cores, "load": self.load, "ranks": self.ranks, "ranks_per_core": self.ranks_per_core}


def snapshot(ranks: int | None = None) -> Snapshot:
    """The machine now (read it before a job starts: the job's own busy ranks raise the load)."""
    return Snapshot(cores(), load(), ranks)


def stretch(ranks: int = 1, state: Snapshot | None = None) -> float:
    """How much longer than on an idle machine with a core per rank a job of ``ranks`` may take here:
    the runnable work per core, the job's ranks and whatever already runs, at least 1, at most MAX_STRETCH."""
    state = state or snapshot(ranks)
    others = state.load or 0.0
    return min(max(1.0, (ranks + others) / state.cores), MAX_STRETCH)


def time_limit(seconds: float, ranks: int = 1, state: Snapshot | None = None) -> float:
    """``seconds`` (the limit on an idle machine, a core per rank) stretched for this machine now."""
    return seconds * stretch(ranks, state)


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
