"""When the fitted model can be trusted: its timings' own spread and the load they were taken under.

    trust = conditions(point_spreads, ranks, cores, steal)   # in fit(): one fit
    combine([a.trust, b.trust], fit_to_fit(points))          # FittedMachine.mean: several fits
    ok, reasons = verdict(trust)                             # shown with every prediction
    caveat(machine, compute_s, iter_s)                       # one prediction's own warning, or None

The model predicts from collectives and kernels timed once; when other work
shares the cores (or the hypervisor takes them) those timings scatter and
the predictions inherit it. Three signs of that can be had for free: the
repetitions of each timed collective disagree (``spread``), two fits of the
same machine disagree (``fit_to_fit``), and the load average at the end of
the fit exceeds the job's own ranks, or the hypervisor stole CPU time. The
limits are where the engine benchmarks' errors grow large
(docs/engine_model_accuracy.md has the runs they come from, and their errors).
"""

from __future__ import annotations

import os
import statistics

LIMITS = {"spread": 0.5, "fit_to_fit": 0.25, "other_load_per_core": 0.5, "steal": 0.10}
# on ranks sharing cores, predictions whose compute is at least this share of the iteration are off by more than
# those below it (docs/engine_model_accuracy.md): compute and short collectives move with the scheduler
COMPUTE_SHARE = 0.2


def cpu_ticks() -> list[int]:
    """The machine's CPU time so far by kind (/proc/stat's first line: user ... steal); [] where unknown."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return []


def stolen(since: list[int]) -> float | None:
    """The share of CPU time since ``cpu_ticks()`` that the hypervisor gave to other machines (steal)."""
    now = cpu_ticks()
    if len(since) < 8 or len(now) < 8:
        return None
    delta = [b - a for a, b in zip(since, now)]
    return delta[7] / max(sum(delta), 1)


def conditions(point_spreads: dict, ranks: int, cores: int, steal: float | None, reps: int) -> dict:
    """One fit's trust record: the median spread of its collective timings, the load beyond its own ranks."""
    spreads = [v for values in point_spreads.values() for v in values]
    return {"fits": 1, "reps": reps,
            "spread": statistics.median(spreads) if spreads and reps > 1 else None,
            "other_load_per_core": other_load(os.getloadavg()[0], ranks, cores), "steal": steal}


def other_load(load: float, ranks: int, cores: int) -> float:
    """The load average beyond a job's own ranks (each busy, in MPI or computing), per core."""
    return max(load - ranks, 0.0) / cores


def fit_to_fit(points: list[dict]) -> float:
    """Median over the timed collective points of (largest - smallest) / mean across several fits."""
    gaps = []
    for key, first in points[0].items():
        for i in range(len(first)):
            times = [p[key][i][1] for p in points]
            gaps.append((max(times) - min(times)) / (sum(times) / len(times)))
    return statistics.median(gaps) if gaps else 0.0


def combine(trusts: list[dict], between: float) -> dict:
    """Several fits' record: the worst of each, and how far apart the fits came out."""
    def worst(key):
        values = [t[key] for t in trusts if t.get(key) is not None]
        return max(values) if values else None

    return {"fits": sum(t.get("fits", 1) for t in trusts), "reps": min(t.get("reps", 1) for t in trusts),
            "spread": worst("spread"), "other_load_per_core": worst("other_load_per_core"),
            "steal": worst("steal"), "fit_to_fit": between}


def verdict(trust: dict) -> tuple[bool | None, list[str]]:
    """(True: nothing says otherwise; False: at least one sign is past its limit; None: nothing recorded)
    and one line per sign, for the model's output."""
    if not trust:
        return None, ["not recorded (a fit saved before gpulab recorded it): refit to know"]
    labels = {"spread": "repetitions of each timed collective: median spread {:.0%}",
              "fit_to_fit": "fits of this machine: {:.0%} apart (median over timed collectives)",
              "other_load_per_core": "load beyond the job's own ranks at the fit's end: {:.2f} per core",
              "steal": "CPU time stolen by the hypervisor during the fit: {:.0%}"}
    ok, lines = True, []
    for key, label in labels.items():
        value = trust.get(key)
        if value is None:
            continue
        past = value > LIMITS[key]
        ok &= not past
        lines.append(label.format(value) + (f" (past {LIMITS[key]:g}: do not trust the model)" if past else ""))
    if trust.get("fits", 1) < 2 and trust.get("spread") is None:
        lines.append("one fit of one repetition: nothing to say how far it moves (gpulab model fit --repeat 2)")
    return ok, lines


def caveat(machine, compute_s: float, iter_s: float, overlap=None) -> str | None:
    """A warning for one prediction on a fitted machine whose ranks share cores (None otherwise, and on
    machine profiles): when its compute is ``COMPUTE_SHARE`` of the iteration or more, and when it
    overlaps communication where the fit priced overlap as hiding nothing because a node's ranks
    share its cores (``probes.overlap_used``), since overlapping there measures anywhere from faster to
    slower than not (docs/engine_model_accuracy.md)."""
    ranks, cores = getattr(machine, "ranks", 0), getattr(machine, "cores", 0)
    notes = []
    if compute_bound_on_shared_cores(ranks, cores, compute_s, iter_s):
        notes.append(f"compute is {compute_s / iter_s:.0%} of the iteration on {ranks} ranks sharing {cores} "
                     "cores: the model's least accurate case (docs/engine_model_accuracy.md gives its measured "
                     "error)")
    node_ranks, node_cores = getattr(machine, "node_ranks", 0), getattr(machine, "node_cores", 0)
    if overlap is not None and overlap.any and overlap.progress != "none" and 0 < node_cores < node_ranks:
        notes.append(f"overlap where {node_ranks} ranks share the {node_cores} core{'s' if node_cores > 1 else ''} "
                     "of a node: priced as hiding nothing, since overlapping there measures anywhere from faster "
                     "to slower than not (docs/engine_model_accuracy.md)")
    return "; ".join(notes) or None


def compute_bound_on_shared_cores(ranks: int, cores: int, compute_s: float, iter_s: float) -> bool:
    """What ``caveat`` warns of: ranks share the cores and compute is ``COMPUTE_SHARE`` of the iteration or more."""
    return bool(cores) and ranks > cores and iter_s > 0 and compute_s >= COMPUTE_SHARE * iter_s
