"""Alpha-beta (Hockney) cost model of every broadcast algorithm of the registry.

One message of s bytes costs ``alpha + s * beta``. An algorithm's time is the
cost of the messages on its critical path (``gpulab.bcast.algorithms.critical_path``), e.g.
binomial ceil(log2 p)(a + n b), chain (p + k - 2)(a + (n/k) b); hierarchical
adds an inter-node and an intra-node broadcast with their own alpha and beta.

    from gpulab import machines
    from gpulab.bcast.cost.hockney import Machine, best_chunk, predict
    m = Machine.from_description(machines.load("bcast_tuning.json", p=8))   # `gpulab tune fit`'s fit
    predict("chain", 64 << 20, 8, machine=m, chunk_bytes=best_chunk("chain", 64 << 20, 8, machine=m))

Beyond the textbook, a ``Machine`` can describe what a real machine adds:
  * a protocol switch: MPICH sends short messages eagerly (copied twice through
    shared-memory cells, by the sender) and long ones single-copy (CMA: the
    receiver copies), with different alpha and beta, and
    with receiver copies a rank's concurrent sends overlap instead of queueing;
  * ``overhead``: seconds of Python per message in gpulab's algorithms (MPI's
    own Bcast, 'mpi', runs its messages in C and does not pay it), and ``call``:
    seconds of Python per broadcast call before the first message;
  * ``cores``: more ranks than cores share a node here, and MPI ranks wait by
    polling, so each gets cores/ranks of a core: every step of the critical
    path is ranks/cores slower (``stretch``), and all copies together must fit
    on the cores (time >= total work / cores).
A message's cost over a link is a ``gpulab.machines.Link``: one ``LinkLevel``
(alpha, beta) or a protocol regime each side of its switch. The profiles of
clusters (``gpulab.bcast.cost.profiles``) use plain Hockney, and
``textbook(machine)`` strips a fitted machine down to it.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpulab import machines
from gpulab.bcast.algorithms import registry
from gpulab.bcast.algorithms.critical_path import REPLAY_MAX_P, Plan, nominal, replay
from gpulab.bcast.algorithms.tree_shapes import DEFAULT_CHUNK
from gpulab.bcast.cost import mpich
from gpulab.bcast.cost.placement import PLACED, placed
from gpulab.machines import Description, Link, LinkLevel


@dataclass(frozen=True)
class Machine:
    name: str
    intra: Link  # between ranks on one node
    inter: Link  # between nodes
    ranks_per_node: int | None = None  # None: every rank on one node
    overhead: float = 0.0  # extra seconds per message for gpulab's Python algorithms
    cores: int | None = None  # cores the ranks of one node share (None: not a limit)
    fitted_p: int | None = None  # process count of the ping-pong it was fitted at
    notes: dict = field(default_factory=dict, compare=False, hash=False)  # sources, residuals
    call: float = 0.0  # seconds of Python per broadcast call before any message (argument checks, set-up)

    def link(self, p: int) -> Link:
        """Flat algorithms over p ranks: the slow link as soon as they span nodes."""
        return self.intra if self.ranks_per_node is None or p <= self.ranks_per_node else self.inter

    def assumptions(self) -> list[str]:
        """Every number's source for a profile; how a fitted machine was measured."""
        fitted = [f"fit: ping-pong on {self.fitted_p} ranks"] if self.fitted_p else []
        return fitted + [f"{k}: {v}" for k, v in self.notes.get("sources", {}).items()]

    @classmethod
    def from_description(cls, d: Description) -> Machine:
        """The broadcast's machine of a description (``gpulab.machines.load``): its links, and what its
        ping-pong fit adds; a description without links (a fit of the engine) is refused."""
        if d.intra is None or d.inter is None:
            raise ValueError(f"machine {d.name!r} has no links for the broadcast's model: name a profile "
                             f"({', '.join(machines.names())}), a tuning file or a ping-pong fit's file")
        notes = {**d.notes, **({"description": d.about} if d.about else {}),
                 **({"sources": d.link_sources()} if d.link_sources() else {})}
        pingpong = d.pingpong or {"overhead": 0.0, "call": 0.0}
        return cls(d.name, d.intra, d.inter, d.ranks_per_node, pingpong["overhead"], d.cores, d.fitted_ranks,
                   notes, pingpong["call"])

    def describe(self) -> Description:
        notes = {k: v for k, v in self.notes.items() if k not in ("description", "sources")}
        fitted = self.fitted_p or self.overhead or self.call
        pingpong = {"overhead": self.overhead, "call": self.call} if fitted else None
        return Description(self.name, self.notes.get("description", ""), self.ranks_per_node, self.cores,
                           self.fitted_p, self.intra, self.inter, pingpong=pingpong,
                           sources=dict(self.notes.get("sources", {})), notes=notes)

    def to_dict(self) -> dict:
        """The machine file's JSON (``gpulab.machines.Description.to_dict``)."""
        return self.describe().to_dict()

    @classmethod
    def from_dict(cls, d: dict) -> Machine:
        """The machine ``to_dict`` wrote, e.g. a fit a record holds (a file: ``gpulab.machines.load``)."""
        return cls.from_description(Description.from_dict(d))


@dataclass(frozen=True)
class MessageCost:
    """Seconds of one message of n bytes over ``link`` (hashable: the critical paths cache by it)."""
    link: Link
    overhead: float = 0.0

    def __call__(self, nbytes: float) -> float:
        return self.link.regime(nbytes).time(nbytes) + self.overhead


@dataclass(frozen=True)
class Prediction:
    seconds: float
    latency: float  # alpha (+ overhead) terms
    bandwidth: float  # beta terms
    bound: str  # "path" (critical path) or "cpu" (total work / cores)

    def __add__(self, other: Prediction) -> Prediction:
        bound = self.bound if self.seconds >= other.seconds else other.bound
        return Prediction(self.seconds + other.seconds, self.latency + other.latency,
                          self.bandwidth + other.bandwidth, bound)


ZERO = Prediction(0.0, 0.0, 0.0, "path")


def mpich_choice(nbytes: int, p: int) -> str:
    """MPICH's MPIR rule for (nbytes, p): what MPI_Bcast runs on ranks of one node, or of one node each
    (``gpulab.bcast.cost.mpich``; ``mpich_bcast`` prices a communicator spread over nodes)."""
    return mpich.mpir_rule(nbytes, p)


def plan_of(algorithm: str, nbytes: float, p: int, serial: Callable[[float], bool],
            cost: Callable[[float], float] | None = None, **options) -> Plan:
    """The Plan of one flat algorithm (not 'hierarchical', which the model composes from two), from
    its record in ``gpulab.bcast.algorithms.registry``.

    ``serial(bytes)``: do one rank's concurrent sends of that size queue? ``cost(bytes)``, the
    seconds of one message, picks the critical path of the algorithms replayed from their
    schedules (``Algorithm.replayed``); without it a message costs its bytes plus a 1 KiB-equivalent
    latency. Replaying costs O(p^2) Python steps for the ring, so beyond ``REPLAY_MAX_P`` ranks
    (profiles of large machines) their closed forms are used for the path (tests/bcast/test_model.py
    checks they charge the replay's seconds within 0.1% at every p up to ``REPLAY_MAX_P``); the
    total work, which only matters where ranks outnumber cores, is charged approximately there.
    """
    record = registry.get(algorithm)
    if record.plan is None and p >= 2:
        raise ValueError(f"no critical path for algorithm {algorithm!r}")
    if record.replayed and 2 <= p <= REPLAY_MAX_P:
        return replay(record.build, int(math.ceil(nbytes)), int(p), cost or nominal)
    given = tuple(sorted((k, v) for k, v in options.items() if v is not None and k in record.options))
    chunk = dict(given).get("chunk_bytes") or DEFAULT_CHUNK
    return _plan(record, float(nbytes), int(p), bool(serial(nbytes)), bool(serial(min(chunk, nbytes))), given)


@functools.lru_cache(maxsize=65536)
def _plan(record: registry.Algorithm, nbytes: float, p: int, serial_n: bool, serial_chunk: bool,
          options: tuple) -> Plan:
    if p < 2:
        return Plan((), ())
    return record.plan(nbytes, p, serial_n, serial_chunk, **dict(options))


def pipeline_shape(algorithm: str, p: int, serial: bool) -> tuple[int, int]:
    """(D, F) of a pipelined algorithm (``critical_path.pipeline_shape`` on its schedules)."""
    record = registry.get(algorithm)
    if not record.pipelined:
        raise ValueError(f"{algorithm!r} is not a pipelined algorithm")
    return record.shape(p, serial)


def _sum(messages, link: Link, overhead: float, scale: float = 1.0) -> tuple[float, float]:
    lat = bw = 0.0
    for count, size in messages:
        h = link.regime(size)
        lat += count * (h.alpha + overhead) * scale
        bw += count * size * h.beta * scale
    return lat, bw


def stretch(machine: Machine, ranks: int) -> float:
    """How much slower every step runs with ``ranks`` busy-polling processes on ``machine.cores`` cores.

    A rank waiting inside MPI polls instead of sleeping, so the kernel shares
    the cores evenly among all ranks: each gets cores/ranks of one, and every
    message on the critical path takes ranks/cores times longer. A fit made
    with ``fitted_p`` ranks already contains its own share of this, which is
    taken out first. 1 when cores are not a limit (profiles, textbook).
    """
    if machine.cores is None:
        return 1.0
    return max(1.0, ranks / machine.cores) / max(1.0, (machine.fitted_p or 1) / machine.cores)


def _flat(algorithm: str, nbytes: float, p: int, link: Link, machine: Machine, options: dict,
          ranks: int | None = None, groups: int = 1) -> Prediction:
    """One flat algorithm over p ranks; ``ranks`` processes share the cores (default p), ``groups``
    copies of this broadcast run at once on them (the intra phases of emulated nodes)."""
    overhead = machine.overhead
    if p < 2 or (nbytes <= 0 and algorithm == "mpi"):  # MPI_Bcast of 0 bytes returns at once
        return ZERO
    if algorithm == "mpi":  # MPICH's own choice, executed in C
        algorithm, overhead = mpich_choice(int(nbytes), p), 0.0
    plan = plan_of(algorithm, nbytes, p, link.serial, MessageCost(link, overhead), **options)
    ranks = ranks or p
    slow = stretch(machine, ranks)
    if link is machine.inter and machine.notes.get("nodes_from") == "split_type":
        slow = 1.0  # between nodes found by Split_type a network link sets the pace, not the shared cores
    lat, bw = _sum(plan.path, link, overhead, slow)
    result = Prediction(lat + bw, lat, bw, "path")
    if machine.cores is not None and ranks > machine.cores:
        # all copies of all ranks must fit on the cores: time >= total work / cores
        base = slow / max(1.0, ranks / machine.cores)  # the fit's own share of the cores, taken out
        wlat, wbw = _sum(plan.work, link, overhead, base * groups / machine.cores)
        if wlat + wbw > result.seconds:
            result = Prediction(wlat + wbw, wlat, wbw, "cpu")
    return result


def breakdown(algorithm: str, nbytes: int, p: int, machine: Machine, **options) -> Prediction:
    """Predicted time of one broadcast, split into latency and bandwidth terms.

    Every call of gpulab's ``bcast`` (MPI's own 'mpi' too: it is reached through
    the same entry) first spends ``machine.call`` seconds of Python, counted as latency.
    """
    result = _messages(algorithm, nbytes, p, machine, options)
    if p < 2 or not machine.call:
        return result
    call = machine.call * stretch(machine, p)
    return Prediction(result.seconds + call, result.latency + call, result.bandwidth, result.bound)


def _messages(algorithm: str, nbytes: int, p: int, machine: Machine, options: dict) -> Prediction:
    if algorithm == "hierarchical":
        rpn = options.get("ranks_per_node") or machine.ranks_per_node or p
        nodes, local = math.ceil(p / rpn), min(rpn, p)
        # emulated nodes (the machine is one node): all p ranks share its cores in both phases,
        # and the nodes' intra broadcasts run at the same time
        emulated = machine.ranks_per_node is None
        inter = _flat(options.get("inter", "binomial"), nbytes, nodes, machine.inter, machine,
                      options.get("inter_options") or {}, ranks=p if emulated else nodes)
        intra = _flat(options.get("intra", "binomial"), nbytes, local, machine.intra, machine,
                      options.get("intra_options") or {}, ranks=p if emulated else local,
                      groups=nodes if emulated else 1)
        return inter + intra
    if algorithm == "mpi" and machine.ranks_per_node is not None and p > machine.ranks_per_node:
        return mpich_bcast(nbytes, block_nodes(p, machine.ranks_per_node), machine)  # ranks in node blocks
    return _flat(algorithm, nbytes, p, machine.link(p), machine, options)


def predict(algorithm: str, nbytes: int, p: int, machine: Machine, *,
            rank_nodes=None, **options) -> float:
    """Predicted seconds for one broadcast of ``nbytes`` over ``p`` ranks (0 for p = 1).

    ``rank_nodes`` (node of each rank, e.g. a round-robin placement) prices each message of the
    flat trees and the chain at its own link (``gpulab.bcast.cost.placement``); without it a flat
    broadcast that spans nodes pays the network for every message.
    """
    if algorithm == "mpi" and rank_nodes is not None and p > 1 and len(set(rank_nodes)) > 1:
        if len(rank_nodes) != p:
            raise ValueError(f"rank_nodes names {len(rank_nodes)} ranks, not p = {p}")
        return mpich_bcast(nbytes, rank_nodes, machine).seconds + machine.call * stretch(machine, p)
    if rank_nodes is not None and algorithm in PLACED and len(set(rank_nodes)) > 1:
        if len(rank_nodes) != p:
            raise ValueError(f"rank_nodes names {len(rank_nodes)} ranks, not p = {p}")
        call = machine.call * stretch(machine, p) if p > 1 else 0.0
        return placed(algorithm, nbytes, rank_nodes, machine, **options) + call
    return breakdown(algorithm, nbytes, p, machine, **options).seconds


def block_nodes(p: int, ranks_per_node: int | None) -> list[int] | None:
    """The node of each of p ranks placed in blocks of ``ranks_per_node`` (None: all on one node)."""
    return None if ranks_per_node is None or p <= ranks_per_node else [r // ranks_per_node for r in range(p)]


def mpich_bcast(nbytes: int, rank_nodes, machine: Machine, root: int = 0) -> Prediction:
    """MPICH 5's MPI_Bcast with rank i on node ``rank_nodes[i]``: its phases (``gpulab.bcast.cost.mpich.steps``:
    the ch4 rule's composition), one after another, each run in C (no Python overhead).

    A flat phase over several nodes prices a binomial tree message by message on its own link
    (``gpulab.bcast.cost.placement``), the scatter-allgathers at the network's price.
    """
    native = replace(machine, overhead=0.0)
    total = ZERO
    for level, algorithm, ranks in mpich.steps(int(nbytes), rank_nodes, root)[1]:
        if level == "send":  # the root hands the message to its node's leader, on their node
            h = machine.intra.regime(nbytes)
            total = total + Prediction(h.time(nbytes), h.alpha, nbytes * h.beta, "path")
        elif level == "flat" and algorithm in PLACED:
            seconds = placed(algorithm, nbytes, list(rank_nodes), native, root=root)
            total = total + Prediction(seconds, 0.0, seconds, "path")
        else:
            link = machine.intra if level == "intra" else machine.inter
            total = total + _flat(algorithm, nbytes, ranks, link, native, {})
    return total


def best_chunk(algorithm: str, nbytes: int, p: int, machine: Machine) -> int:
    """The chunk size (bytes) that minimises ``predict`` for a pipelined algorithm.

    Analytically (D + (k-1)F)(a + n b / k) is smallest at k* = sqrt((D - F) n b / (F a))
    (chain: D - F = p - 2, F = 1; docs/bcast_model.md derives it). With a protocol
    switch the optimum is found per regime; the integers around k* and the
    regime edges are compared with the full model, so the answer is no worse
    than any other chunk size by ``predict``.
    """
    record = registry.get(algorithm)
    if not record.pipelined:
        raise ValueError(f"best_chunk is for the pipelined algorithms {registry.pipelined_names()}, "
                         f"not {algorithm!r}")
    n = nbytes * record.share  # the bytes one pipeline carries (the split tree's: half)
    if n < 1 or p < 2:
        return max(1, int(math.ceil(n)))
    link = machine.link(p)
    candidates = {1, int(math.ceil(n))}
    regimes = [(link.small, 1, math.inf)] if link.switch is None else [
        (link.small, 1, link.switch - 1), (link.large or link.small, link.switch, math.inf)]
    for h, lo, hi in regimes:
        d, f = record.shape(p, link.serial(lo))
        alpha = h.alpha + machine.overhead
        k_star = math.sqrt(max(d - f, 0) * n * h.beta / (f * alpha)) if alpha > 0 and f else 1.0
        for k in (math.floor(k_star) - 1, math.floor(k_star), math.ceil(k_star), math.ceil(k_star) + 1):
            if k >= 1:
                c = int(math.ceil(n / k))
                candidates.update((c - 1, c, c + 1))
        candidates.update(int(x) for x in (lo, hi) if math.isfinite(x) and x <= n)
    candidates = sorted(c for c in candidates if 1 <= c <= max(1, math.ceil(n)))
    return min(candidates, key=lambda c: (predict(algorithm, nbytes, p, machine, chunk_bytes=c), -c))


def choices(nbytes: int, p: int, machine: Machine) -> list[tuple[str, dict]]:
    """Every (algorithm, options) the model-based choice considers: the registry's candidates at
    model-optimal chunks, and on a machine of several nodes the hierarchical broadcasts."""
    out = registry.candidates(nbytes, p, best_chunk=lambda a: best_chunk(a, nbytes, p, machine))
    if machine.ranks_per_node is not None and machine.ranks_per_node < p:
        nodes, local = math.ceil(p / machine.ranks_per_node), machine.ranks_per_node
        inter_chunk = best_chunk("chain", nbytes, nodes, level(machine, "inter"))
        intra_chunk = best_chunk("chain", nbytes, local, level(machine, "intra"))
        for inter, inter_options in (("binomial", {}), ("chain", {"chunk_bytes": inter_chunk})):
            for intra, intra_options in (("binomial", {}), ("chain", {"chunk_bytes": intra_chunk})):
                out.append(("hierarchical", {"inter": inter, "intra": intra, "inter_options": inter_options,
                                             "intra_options": intra_options}))
    return out


def level(machine: Machine, which: str) -> Machine:
    """One level of a machine as a one-node machine, e.g. to size the chunks of a hierarchical level."""
    link = getattr(machine, which)
    return replace(machine, intra=link, inter=link, ranks_per_node=None)


def as_run(levels: Machine, on_nodes: bool, name: str | None = None) -> Machine:
    """The fitted two-level machine as the ranks really run: across its nodes when they are (emulated)
    nodes, so a flat broadcast that spans them pays the link; on one machine the two levels are the
    same memory, so every rank is on one node and flat algorithms use the intra fit."""
    return replace(levels, name=name or levels.name, ranks_per_node=levels.ranks_per_node if on_nodes else None)


def choose(nbytes: int, p: int, machine: Machine) -> tuple[str, dict, list[tuple[float, str, dict]]]:
    """The model's pick: (algorithm, options, ranking as (seconds, algorithm, options), fastest first)."""
    ranking = sorted(((predict(a, nbytes, p, machine, **o), a, o) for a, o in choices(nbytes, p, machine)),
                     key=lambda r: r[0])
    return ranking[0][1], ranking[0][2], ranking


def textbook(machine: Machine) -> Machine:
    """The same machine as plain Hockney: one alpha and one beta for every size (the straight-line
    fit through the same ping-pong points when the fit kept it), no overhead, no CPU limit."""
    def plain(level: str) -> Link:
        line = machine.notes.get("fit", {}).get(level, {}).get("one_line")
        return Link(LinkLevel(line["alpha"], line["beta"])) if line else Link(getattr(machine, level).small)
    return replace(machine, name=machine.name + " (textbook)", intra=plain("intra"), inter=plain("inter"),
                   overhead=0.0, cores=None, call=0.0)


def dumps(machine: Machine) -> str:
    return json.dumps(machine.to_dict(), indent=1)
