"""Time limits on the engines' work that allow for the machine, and the one paragraph a limit that fires gives.

    limit = Limit.start(120, ranks=4)     # 120 s on an idle machine with a core per rank, stretched for this one
    limit.seconds                         # e.g. 480 on 2 cores at load 4
    raise EngineTimeout(limit.passed("fit() on 4 engines did not finish", {0: "fit (fit.py:80)"}, [1, 2, 3]))

A limit is written for an idle machine that gives every rank a core; ``gpulab.host.time_limit`` stretches
it by the runnable work per core, read when the work starts, before its ranks busy-poll and raise the
load themselves (the one-minute load average still counts the ranks of work that has just ended: the
limit errs long, never short). Engines on Slurm's nodes run on cores of their own: their limits are not
stretched by this machine's load. When a limit fires, ``passed`` says in one paragraph what ran, on how
many ranks, where each unfinished rank waited, how busy the machine was at the start and is now, and
what to try.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from gpulab import host

WIDTH = 110  # a paragraph's lines in a notebook's error output


@dataclass(frozen=True)
class Limit:
    """``base`` seconds on an idle machine with a core per rank; ``seconds`` the limit on this machine now."""

    ranks: int
    base: float
    seconds: float
    at_start: host.Snapshot
    stretched: bool = True

    @classmethod
    def start(cls, base: float, ranks: int, *, stretch: bool = True, state: host.Snapshot | None = None) -> Limit:
        """The limit for work that starts now (``state``: the machine read earlier, before the ranks started)."""
        state = state or host.snapshot(ranks)
        seconds = host.time_limit(base, ranks, state) if stretch else base
        return cls(ranks, base, seconds, state, stretch)

    def text(self) -> str:
        """'480 s (120 s on an idle machine with a core per rank, stretched 4.0x for this machine at the start: 2 cores,
        load 4.0, 4 ranks (2 per core))'."""
        if not self.stretched:
            return f"{_seconds(self.seconds)} (the engines run on cores of their own, not this machine's)"
        if self.seconds == self.base:
            return f"{_seconds(self.seconds)} (at the start: {self.at_start.text()})"
        return (f"{_seconds(self.seconds)} ({_seconds(self.base)} on an idle machine with a core per rank, stretched "
                f"{self.seconds / self.base:.1f}x for this machine at the start: {self.at_start.text()})")

    def passed(self, outcome: str, waiting: dict[int, str] | None = None, finished=(), errors: str = "",
               extra: str = "", larger: str = "timeout=") -> str:
        """One paragraph: ``outcome`` ("fit() on 4 engines did not finish") within the limit, where each unfinished
        rank waited (``waiting``: rank -> ``compact`` stack, "" where none was recorded), which finished, how busy
        the machine was at the start and is now, ``extra``, and what to try (``larger``: the argument that
        raises the limit)."""
        waiting = waiting or {}
        now = host.snapshot().load
        sentences = [f"{outcome} within {self.text()}; now load {'unknown' if now is None else f'{now:.1f}'}.",
                     _where(waiting), _finished(sorted(finished), errors), extra,
                     self.advice(waiting, finished, larger)]
        return " ".join(s for s in sentences if s)

    def advice(self, waiting, finished, larger: str) -> str:
        tips = []
        if finished and waiting:
            tips.append("the unfinished engines probably wait in a collective for a rank that never joined it")
        if self.stretched and (self.at_start.busy or (self.at_start.ranks_per_core or 0) > 1):
            tips.append("rerun when the machine is idle, or with fewer ranks than cores")
        tips.append(f"work that is slow rather than stuck takes a larger {larger}")
        return "Try: " + "; ".join(tips) + "."


def _seconds(x: float) -> str:
    return f"{x:.0f} s" if x >= 100 else f"{x:.3g} s"


def _where(waiting: dict[int, str]) -> str:
    """'Engines 0 and 2 were at barrier (fit.py:80). Engine 3: no stack recorded.' grouped by place."""
    places: dict[str, list[int]] = {}
    for rank, place in sorted(waiting.items()):
        places.setdefault(place or "", []).append(rank)
    parts = []
    for place, ranks in places.items():
        who = _engines(ranks)
        parts.append(f"{who} {'was' if len(ranks) == 1 else 'were'} at {place}." if place
                     else f"{who}: no stack recorded.")
    return " ".join(parts)


def _finished(finished: list[int], errors: str) -> str:
    return f"{_engines(finished)} finished{errors}." if finished else ""


def _engines(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"Engine {ranks[0]}"
    return "Engines " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


FRAME = re.compile(r'File "(?P<path>[^"]*)", line (?P<line>\d+) in (?P<fn>\S+)')


def compact(stack: str) -> str:
    """``stuck_at``'s 'File "/a/b/fit.py", line 80 in fit <- ...' as 'fit (fit.py:80) <- ...'; "" for no stack."""
    if stack == "no stack recorded":
        return ""
    return FRAME.sub(lambda m: f"{m['fn']} ({Path(m['path']).name}:{m['line']})", stack)


def rendered(exception: BaseException) -> list[str]:
    """What IPython shows instead of a traceback for an exception that defines ``_render_traceback_``:
    its name and message, wrapped into a paragraph."""
    return textwrap.wrap(f"{type(exception).__name__}: {exception}", WIDTH, break_on_hyphens=False)
