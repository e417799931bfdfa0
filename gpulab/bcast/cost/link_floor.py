"""A fitted broadcast model held to its emulated link's rate: no inter-node byte cheaper than the link allows."""

from __future__ import annotations


def at_most_link_rate(machine: dict, rate: float | None) -> dict:
    """The fit (``Machine.to_dict()``) with no inter-node byte cheaper than ``rate`` (bytes/s) allows.

    tbf lets a message below its burst through at full speed, so the small-message beta fitted
    between nodes is faster than the link, and a fit taken while other jobs hold the cores can
    come out faster too; a chain of thousands of such chunks would be predicted faster than the
    link can carry them. A stream over the link never beats its rate: that is the floor.
    """
    if rate is None:
        return machine
    floor = 1.0 / rate
    for regime in ("small", "large"):
        hockney = machine["inter"].get(regime)
        if hockney and hockney["beta"] < floor:
            machine["notes"].setdefault("beta_raised_to_link_rate", {})[regime] = hockney["beta"]
            hockney["beta"] = floor
    return machine
