"""Which algorithm ``bcast(..., algorithm="auto")`` runs, and why.

    d = select(1 << 20, comm)      # Decision(name, options, reason, source)

Three sources, tried in order (``gpulab.bcast.tuning`` says where the file is):
  1. "table": the tuning file has a measured table for exactly this process
     count; the range holding nbytes names the algorithm (``gpulab tune bcast``).
  2. "model": the file has a fitted alpha-beta model (``gpulab tune fit``); the
     algorithm and options it predicts fastest are used.
  3. "mpich-default": neither; MPICH's published rule (MPIR_CVAR_BCAST_SHORT_MSG_SIZE
     = 12288, MPIR_CVAR_BCAST_LONG_MSG_SIZE = 524288, MPIR_CVAR_BCAST_MIN_PROCS = 8):
     binomial for short messages or p < 8, scatter + recursive-doubling allgather
     for medium messages on powers of two, scatter + ring allgather otherwise.
The choice depends only on (nbytes, p, the file), never on communication, so
all ranks that read the same file decide alike. Each process looks up the
file (and $GPULAB_TUNING_TABLE) once, reads it once and remembers each
decision, so deciding costs a dictionary lookup after the first broadcast of a
size; ``reload()`` starts over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpulab.bcast import tuning
from gpulab.bcast.model import MPICH_LONG, MPICH_MIN_PROCS, MPICH_SHORT, Machine, choose, mpich_choice
from gpulab.bcast.tuning import load, lookup


@dataclass(frozen=True)
class Decision:
    """What ``select()`` chose: the algorithm, its options, why, and from which source."""

    name: str
    options: dict = field(default_factory=dict)
    reason: str = ""
    source: str = "mpich-default"  # "table" | "model" | "mpich-default"


def mpich_default(nbytes: int, p: int) -> Decision:
    name = mpich_choice(nbytes, p)
    if name == "binomial":
        why = f"{nbytes} B < {MPICH_SHORT} B" if nbytes < MPICH_SHORT else f"p = {p} < {MPICH_MIN_PROCS}"
    elif name == "scatter_allgather_rd":
        why = f"p = {p} is a power of two and {nbytes} B < {MPICH_LONG} B"
    else:
        why = f"{nbytes} B >= {MPICH_LONG} B" if nbytes >= MPICH_LONG else f"p = {p} is not a power of two"
    return Decision(name, {}, f"MPICH's default rule: {why} (no tuning table or fitted model)", "mpich-default")


def _from_model(data: dict, nbytes: int, p: int) -> Decision | None:
    models = data.get("models") or {}
    if not models:
        return None
    # the fit at exactly this p if there is one, else the nearest (fits differ with oversubscription)
    key = min(models, key=lambda k: (abs(int(k) - p), int(k)))
    machine = Machine.from_dict(models[key])
    name, options, ranking = choose(nbytes, p, machine)
    if name == "hierarchical" and machine.ranks_per_node:
        options = {**options, "ranks_per_node": machine.ranks_per_node}
    runner_up = ranking[1] if len(ranking) > 1 else None
    reason = (f"fitted model (ping-pong at p={key}) predicts {ranking[0][0] * 1e6:.1f} us"
              + (f"; next best {runner_up[1]} {runner_up[0] * 1e6:.1f} us" if runner_up else ""))
    return Decision(name, options, reason, "model")


def _decide(nbytes: int, p: int, table) -> Decision:
    data = load(table)
    if data:
        entry = lookup(data, nbytes, p)
        if entry is not None:
            hi = "and up" if entry["hi"] is None else f"to {entry['hi']} B"
            reason = (f"tuning table for p={p}, sizes {entry['lo']} B {hi}: {entry['why']} "
                      f"(measured at {', '.join(str(s) for s in entry['measured_at'])} B)")
            return Decision(entry["algorithm"], dict(entry["options"]), reason, "table")
        decided = _from_model(data, nbytes, p)
        if decided is not None:
            return decided
    return mpich_default(nbytes, p)


# (table argument, file generation, nbytes, p) -> Decision: bcast(algorithm="auto") calls select()
# on every broadcast, and a 3 us MPI_Bcast cannot afford 20 us of Python (or even the 0.5 us of
# os.environ.get) to decide; $GPULAB_TUNING_TABLE is therefore read with the file, see reload()
_decisions: dict = {}


def select(nbytes: int, comm, table=None) -> Decision:
    """The algorithm and options for broadcasting ``nbytes`` over ``comm`` (only ``comm.size`` is used)."""
    key = (table, tuning.generation, nbytes, comm.size)
    decision = _decisions.get(key)
    if decision is None:
        if len(_decisions) > 65536:
            _decisions.clear()
        decision = _decisions[key] = _decide(nbytes, comm.size, table)
    return decision


def reload() -> None:
    """Re-read $GPULAB_TUNING_TABLE and the tuning file at the next select(); call it on every rank
    of a job, between broadcasts (and after changing the variable in a running process)."""
    tuning.forget()
    _decisions.clear()
