"""Which algorithm ``bcast(..., algorithm="auto")`` runs, and why.

    d = select(1 << 20, comm)      # Decision(name, options, reason, source)

Sources, tried in order (``gpulab.bcast.selection.tuning`` says where the file is):
  1. "table": the tuning file has a measured table for exactly this process
     count; the range holding nbytes names the algorithm (``gpulab tune bcast``).
  2. a cost model (``gpulab.bcast.cost.hockney``) of this machine, from what can be known
     without measuring a broadcast:
       "model"   the tuning file's fitted alpha-beta model (``gpulab tune fit``),
       "machine" the site's machine profile, $GPULAB_MACHINE (``gpulab.machines.load``),
       "cluster" the link rate of the emulated cluster the job was launched on
                 ($GPULAB_TOPOLOGY, ``gpulab.jobsite``), for the links between nodes;
     with the node layout of the communicator (``Split_type``). Every candidate
     is ranked against MPI_Bcast priced as MPICH runs it on that layout
     (``gpulab.bcast.cost.mpich``); one replaces MPI_Bcast only when predicted faster by
     ``MARGINS[source]``, so the model's errors cost little where it is unsure.
  3. "native": nothing known: MPI_Bcast itself (the reason names what MPICH runs).
The choice depends on (nbytes, the layout, the files and variables every rank
of a job shares), never on timing, so all ranks decide alike. The first
decision on a communicator with a model source looks its layout up
(collective, once per communicator: call ``select`` on every rank, as
``bcast`` does). Each process reads the file and the variables once and
remembers each decision, so deciding costs a dictionary lookup after the first
broadcast of a size; ``reload()`` starts over.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from gpulab.bcast.cost import mpich
from gpulab.bcast.cost.hockney import Machine, block_nodes, choices, predict
from gpulab.bcast.cost.profiles import profile
from gpulab.bcast.selection import tuning
from gpulab.bcast.selection.tuning import MARGIN, load, lookup
from gpulab.machines import Link
from gpulab.machines.loader import nearest

SOURCES = ("table", "model", "machine", "cluster", "native")

# The emulated cluster publishes its link rate, not a latency: a message between its nodes crosses
# veth pairs and a bridge through the kernel's TCP stack, tens of microseconds; 50 us is assumed.
# At the sizes where the link rate decides (a chunk takes milliseconds at 1 Gbit/s) it hardly matters.
CLUSTER_ALPHA = 50e-6
# Inside a node of the emulated cluster without a fit: shared-memory copies, assumed 1 us and 5 GB/s;
# and gpulab's Python per message, assumed 20 us (docs/bcast_calls.md measures a whole call at 4 ranks).
SHARED_MEMORY = Link.plain(1e-6, 1 / 5e9)
CLUSTER_OVERHEAD = 20e-6
# How much faster than MPI_Bcast a candidate must be predicted: the measured sources' margin, and more
# where latency and Python overhead are assumed (the cluster's link rate alone)
MARGINS = {"model": MARGIN, "machine": MARGIN, "cluster": 0.30}


@dataclass(frozen=True)
class Decision:
    """What ``select()`` chose: the algorithm, its options, why, and from which source (``SOURCES``)."""

    name: str
    options: dict = field(default_factory=dict)
    reason: str = ""
    source: str = "native"


def native(nbytes: int, rank_nodes) -> Decision:
    """MPI_Bcast itself, saying what MPICH runs for it here."""
    runs = mpich.describe(nbytes, rank_nodes)
    return Decision("mpi", {}, f"MPI_Bcast (MPICH runs {runs}): no tuning table, fitted model, machine profile "
                               f"($GPULAB_MACHINE) or cluster link between these ranks' nodes to predict "
                               f"anything faster", "native")


def site_machine(p: int, table=None):
    """(Machine, source, what it is) from the sources of a model, or None: the tuning file's fit, else
    $GPULAB_MACHINE's profile; the emulated cluster's link rate replaces the link between nodes."""
    base, source, said = None, None, ""
    if not _site:
        _read_site()
    data = load(table)
    models = (data or {}).get("models") or {}
    if models:  # the fit at exactly this p if there is one, else the nearest (fits differ with oversubscription)
        key = nearest(models, p)
        base, source, said = Machine.from_dict(models[key]), "model", f"fitted model (ping-pong at p={key})"
    elif _site["machine"]:
        base, source = profile(_site["machine"], p), "machine"
        said = f"machine profile {base.name!r} ($GPULAB_MACHINE={_site['machine']})"
    rate = _site["link_bytes_per_s"]
    if rate:
        inter = Link.plain(CLUSTER_ALPHA, 1 / rate)
        link_said = f"the emulated cluster's link, {rate * 8 / 1e9:g} Gbit/s ($GPULAB_TOPOLOGY)"
        if base is None:
            return Machine("emulated cluster", SHARED_MEMORY, inter, overhead=CLUSTER_OVERHEAD), "cluster", link_said
        return replace(base, inter=inter), source, f"{said} with {link_said}"
    return (base, source, said) if base is not None else None


def _from_model(nbytes: int, p: int, rank_nodes, table=None) -> Decision | None:
    found = site_machine(p, table)
    if found is None:
        return None
    machine, source, said = found
    spans = rank_nodes is not None and len(set(rank_nodes)) > 1
    if source == "cluster" and not spans:  # the link rate says nothing about ranks of one node
        return None
    if spans:  # the layout MPI sees, not the profile's, sets the node size
        machine = replace(machine, ranks_per_node=max(rank_nodes.count(n) for n in set(rank_nodes)))
    elif rank_nodes is not None:
        machine = replace(machine, ranks_per_node=None)  # every rank on one node
    nodes = list(rank_nodes) if spans else block_nodes(p, machine.ranks_per_node)
    mpi = predict("mpi", nbytes, p, machine, rank_nodes=nodes)
    ranking = sorted(((predict(a, nbytes, p, machine, rank_nodes=nodes, **o), a, o)
                      for a, o in choices(nbytes, p, machine) if a != "mpi" and not
                      (a == "hierarchical" and machine.ranks_per_node == 1)),  # one rank a node: it is flat
                     key=lambda r: r[0])
    where = f"{len(set(nodes))} nodes" if nodes else "one node"
    runs = mpich.describe(nbytes, nodes or [0] * p)
    margin = MARGINS[source]
    if not ranking or ranking[0][0] * (1 + margin) >= mpi:
        best = f"; best other {ranking[0][1]} {ranking[0][0] * 1e6:.1f} us" if ranking else ""
        return Decision("mpi", {}, f"{said}, {where}: MPI_Bcast ({runs}) predicted {mpi * 1e6:.1f} us{best}, "
                                   f"not {margin:.0%} faster", source)
    seconds, name, options = ranking[0]
    if name == "hierarchical" and not spans and machine.ranks_per_node:  # nodes emulated by rank blocks
        options = {**options, "ranks_per_node": machine.ranks_per_node}
    return Decision(name, options, f"{said}, {where}: predicts {seconds * 1e6:.1f} us against MPI_Bcast's "
                                   f"{mpi * 1e6:.1f} us ({runs})", source)


def _decide(nbytes: int, p: int, table, rank_nodes) -> Decision:
    data = load(table)
    if data:
        entry = lookup(data, nbytes, p)
        if entry is not None:
            hi = "and up" if entry["hi"] is None else f"to {entry['hi']} B"
            reason = (f"tuning table for p={p}, sizes {entry['lo']} B {hi}: {entry['why']} "
                      f"(measured at {', '.join(str(s) for s in entry['measured_at'])} B)")
            return Decision(entry["algorithm"], dict(entry["options"]), reason, "table")
    return _from_model(nbytes, p, rank_nodes, table) or native(nbytes, rank_nodes or [0] * p)


# (table argument, file generation, nbytes, p, layout) -> Decision: bcast(algorithm="auto") calls select()
# on every broadcast, and a small MPI_Bcast cannot afford deciding again (not even reading a variable of
# os.environ) each time; the variables are therefore read with the file, see reload()
_decisions: dict = {}
_site: dict = {}  # $GPULAB_MACHINE and the launched topology's link rate, read once (reload() re-reads)


def _read_site() -> None:
    from gpulab.jobsite import topology_metadata

    _site.update(machine=os.environ.get("GPULAB_MACHINE") or None,
                 link_bytes_per_s=topology_metadata().get("link_bytes_per_s"))
    # False: no model source can exist (no variable, and no fit in the default tuning file), so the
    # layout is never needed; None: it may (a table given to select() can hold a fit)
    has_fit = bool((load() or {}).get("models"))
    _site["modelled"] = None if (has_fit or _site["machine"] or _site["link_bytes_per_s"]) else False


def layout(comm) -> tuple[int, ...] | None:
    """The node of each rank of ``comm`` (Split_type, looked up once per communicator; collective the first
    time), or None for an object that only has a ``size`` (a notebook's stand-in)."""
    if not hasattr(comm, "Split_type"):
        return None
    from gpulab.bcast.algorithms.hierarchical import node_of_rank

    return node_of_rank(comm, None)


def select(nbytes: int, comm, table=None, *, rank_nodes=None) -> Decision:
    """The algorithm and options for broadcasting ``nbytes`` over ``comm``.

    ``rank_nodes`` (node of each rank) stands in for the layout MPI reports; without it a
    real communicator's is looked up when a model source exists (``layout``).
    """
    if not _site:
        _read_site()
    if rank_nodes is None and (_site["modelled"] is not False or table is not None):
        rank_nodes = layout(comm)  # cached on the communicator after the first look
    key = (table, tuning.generation, nbytes, comm.size, None if rank_nodes is None else tuple(rank_nodes))
    decision = _decisions.get(key)
    if decision is None:
        if len(_decisions) > 65536:
            _decisions.clear()
        nodes = None if rank_nodes is None else list(rank_nodes)
        decision = _decisions[key] = _decide(nbytes, comm.size, table, nodes)
    return decision


def reload() -> None:
    """Re-read $GPULAB_TUNING_TABLE, $GPULAB_MACHINE, the launched topology and the tuning file at the next
    select(); call it on every rank of a job, between broadcasts (and after changing a variable)."""
    tuning.forget()
    _decisions.clear()
    _site.clear()
