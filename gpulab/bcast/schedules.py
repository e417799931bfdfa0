"""Message schedules of the broadcast algorithms: what the cost model charges for.

For each algorithm of ``gpulab.bcast.ALGORITHMS`` this returns a ``Plan``:
the messages on the critical path (the chain of messages the last rank waits
for) and all messages sent by all ranks (the total work), as lists of
``(count, bytes each)``. ``gpulab.bcast.model`` turns a plan into seconds with
alpha-beta (Hockney) costs. Everything is read from the algorithms' own
schedules (the ops ``execute`` runs), not from textbook approximations: the
trees' depths from their send lists (a k-nomial root with fewer than radix-1
children at a level is charged only for the children it has); the pipelines'
(D, F) from the path one chunk takes through every rank's schedule; and the scatter-allgather
algorithms, made of blocking Send, Recv and Sendrecv only, by replaying every
rank's schedule message by message (``blocking_path``), so uneven blocks,
fold/unfold steps and empty messages are charged as they run.

``serial(nbytes)`` says whether one rank's concurrent sends of that size queue
behind each other (the sender copies: single-port Hockney) or overlap (the
receiver copies, as MPICH's single-copy CMA path does on one node). Sends a
schedule makes one after another (binomial's) are serial whatever the link.

    plan = schedule("chain", 1 << 20, 8, serial=lambda s: True, chunk_bytes=65536)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

from gpulab.bcast import pipelined, scatter_allgather, trees
from gpulab.bcast.group import SEND, SENDRECV
from gpulab.bcast.layouts import DEFAULT_CHUNK


# the algorithms made only of blocking Send, Recv and Sendrecv: their model replays their schedules
BLOCKING = {"scatter_allgather_rd": scatter_allgather.scatter_allgather_rd,
            "scatter_allgather_ring": scatter_allgather.scatter_allgather_ring}


REPLAY_MAX_P = 64


def _nominal(nbytes: float) -> float:
    return 1024.0 + nbytes


@dataclass(frozen=True)
class Plan:
    path: tuple[tuple[float, float], ...]  # (messages, bytes each) on the critical path
    work: tuple[tuple[float, float], ...]  # (messages, bytes each) sent by all ranks together


def _tree_depth(children: Callable[[int], list[int]], p: int, serial: bool) -> int:
    """Messages on the longest root-to-rank path; with serial sends the j-th child waits for j messages."""
    depth, frontier, deepest = {0: 0}, [0], 0
    while frontier:
        vr = frontier.pop()
        for j, child in enumerate(children(vr)):
            depth[child] = depth[vr] + (j + 1 if serial else 1)
            deepest = max(deepest, depth[child])
            frontier.append(child)
    return deepest


def _sent_to(schedule) -> list[int]:
    return [op.peer for op in schedule if op.phase]  # only sends carry a phase


@functools.lru_cache(maxsize=4096)
def knomial_depth(p: int, radix: int, serial: bool) -> int:
    """Depth of the tree the binomial (radix 2) or k-nomial schedules send along, root 0."""
    build = trees.binomial if radix == 2 else functools.partial(trees.knomial, radix=radix)
    root_sends = build(p, 0, 0, 1)
    serial = serial or any(op.kind == SEND for op in root_sends)
    return _tree_depth(lambda vr: _sent_to(build(p, 0, vr, 1)), p, serial)


def _chunks(nbytes: float, chunk_bytes: int | None) -> tuple[int, float]:
    """(k chunks, bytes each): the algorithms cut n into ceil(n/c) pieces; charged at the mean size."""
    chunk = DEFAULT_CHUNK if chunk_bytes is None else chunk_bytes
    k = max(1, math.ceil(nbytes / chunk))
    return k, nbytes / k


# the pipelined algorithms: their model reads (D, F) from the path one chunk takes through their schedules
PIPELINES = {"chain": pipelined.chain, "binary_tree": pipelined.binary_tree,
             "split_binary_tree": pipelined.split_binary_tree}


@functools.lru_cache(maxsize=4096)
def pipeline_shape(algorithm: str, p: int, serial: bool) -> tuple[int, int]:
    """(D, F) of a pipelined tree: the first chunk needs D message times to reach the last rank,
    and each later chunk F more (the busiest forwarder sends F messages per chunk).
    Time = (D + (k - 1) F) t(n/k), minimised at k* = sqrt((D - F) n beta / (F alpha)).

    Both are read from every rank's schedule of a one-chunk message (the split tree: one chunk
    per half), the pipeline phase only; with ``serial`` sends a forwarder's j-th child waits for j.
    Building the split tree's schedules takes O(p^2) steps, so beyond ``REPLAY_MAX_P`` ranks the
    binary tree's, whose heap its halves travel down, stand in (a test checks they agree up to there).
    """
    if algorithm not in PIPELINES:
        raise ValueError(f"{algorithm!r} is not a pipelined algorithm")
    if p < 2:
        return 0, 0
    split = algorithm == "split_binary_tree" and p <= REPLAY_MAX_P
    build = PIPELINES["binary_tree" if algorithm == "split_binary_tree" and not split else algorithm]
    sends = [[op.peer for op in build(p, 0, vr, 2 if split else 1, chunk_bytes=1)
              if op.phase and op.phase != "exchange"] for vr in range(p)]
    return _tree_depth(sends.__getitem__, p, serial), max(map(len, sends)) if serial else 1


def _messages_of(ops) -> tuple[list, list]:
    """Per op of one rank's schedule: the message it sends (peer, bytes) or None, and the one it receives."""
    sends = [(op.peer, op.hi - op.lo) if op.kind in (SEND, SENDRECV) else None for op in ops]
    receives = [(op.src, op.rhi - op.rlo) if op.kind == SENDRECV else None if op.kind == SEND
                else (op.peer, op.hi - op.lo) for op in ops]
    return sends, receives


@functools.lru_cache(maxsize=4096)
def blocking_path(algorithm: str, nbytes: int, p: int, cost: Callable[[float], float]) -> Plan:
    """The critical path and the work of a schedule of blocking ops, read from every rank's schedule.

    Replays the schedules with each message taking ``cost(bytes)`` seconds:
    a message starts when both its sender and its receiver have reached it (a
    blocking Send, Recv or Sendrecv), and a rank moves on when every message of
    its op has arrived. The path is the chain of messages behind the last rank
    to finish; which chain that is can depend on alpha and beta, hence ``cost``.
    Each message is handled once (a rank that moves on wakes only itself and
    the rank sending to it), so a replay costs O(messages), not O(p) per step.
    """
    ops = [BLOCKING[algorithm](p, 0, me, nbytes) for me in range(p)]
    sends, receives = zip(*map(_messages_of, ops))
    pos, clock = [0] * p, [(0.0, None)] * p  # per rank: (seconds, its path as (size, previous) links)
    arrived: list[list] = [[] for _ in range(p)]  # arrivals of each rank's current op so far
    sending, receiving = [False] * p, [False] * p  # its current op's send / receive has started
    ready = list(range(p))  # ranks whose current op may now start a message
    seconds: dict[int, float] = {}  # cost per message size (a ring's blocks are nearly all one size)
    while ready:
        me = ready.pop()
        i = pos[me]
        if i == len(ops[me]) or sending[me] or sends[me][i] is None:
            continue
        peer, size = sends[me][i]
        j = pos[peer]
        if j == len(ops[peer]) or receiving[peer] or receives[peer][j] != (me, size):
            continue
        sending[me] = receiving[peer] = True
        start = clock[peer] if clock[peer][0] > clock[me][0] else clock[me]
        if size not in seconds:
            seconds[size] = cost(size)
        arrival = (start[0] + seconds[size], (size, start[1]))
        for rank, k in ((me, i), (peer, j)):
            arrived[rank].append(arrival)
            if len(arrived[rank]) == (sends[rank][k] is not None) + (receives[rank][k] is not None):
                clock[rank] = max(arrived[rank], key=lambda c: c[0])  # its op is done: on to the next
                pos[rank] += 1
                arrived[rank], sending[rank], receiving[rank] = [], False, False
                if pos[rank] < len(ops[rank]):  # it may send now, and whoever sends to it may be waiting
                    ready.append(rank)
                    if receives[rank][pos[rank]] is not None:
                        ready.append(receives[rank][pos[rank]][0])
    if any(pos[me] < len(ops[me]) for me in range(p)):
        raise RuntimeError(f"{algorithm} on {p} ranks: the schedules wait for each other (deadlock)")
    node = max(clock, key=lambda c: c[0])[1]
    work = [op.hi - op.lo for rank_ops in ops for op in rank_ops if op.kind in (SEND, SENDRECV)]
    path = []
    while node is not None:  # the linked path, last message first
        size, node = node
        path.append((1, float(size)))
    return Plan(tuple(reversed(path)), tuple((1, float(size)) for size in work))


def _scatter(nbytes: float, p: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Binomial scatter with blocking sends (scatter_allgather.binomial_scatter).

    Path: the root's sends one after another (relative rank 1 gets its block
    last), work: every non-root rank receives its subtree's blocks once."""
    ss = math.ceil(nbytes / p)
    subtree = lambda v, span: max(0.0, min(min(v + span, p) * ss, nbytes) - min(v * ss, nbytes))  # noqa: E731
    top = 1 << (p - 1).bit_length()
    path, mask = [], top >> 1
    while mask:
        path.append((1, subtree(mask, mask)))
        mask >>= 1
    work = [(1, subtree(vr, vr & -vr)) for vr in range(1, p)]
    return [m for m in path if m[1] > 0], [m for m in work if m[1] > 0]


def _allgather_rd(nbytes: float, p: int) -> tuple[list, list]:
    """Recursive doubling over q = 2^floor(log2 p) ranks, with fold/unfold for the p - q extra ones."""
    ss = math.ceil(nbytes / p)
    q = 1 << (p.bit_length() - 1)
    extra = p - q
    blocks = lambda lo, hi: max(0.0, min(hi * ss, nbytes) - min(lo * ss, nbytes))  # noqa: E731
    path, work = [], []
    if extra:
        path.append((1, blocks(q, q + 1)))
        work += [(1, blocks(v, v + 1)) for v in range(q, p)]
    distance = 1
    while distance < q:
        path.append((1, blocks(0, distance)))
        if extra:  # the ranks carrying folded blocks exchange those in a second message
            path.append((1, blocks(q, q + min(distance, extra))))
        for vr in range(q):
            mine = vr & ~(distance - 1)
            work.append((1, blocks(mine, mine + distance)))
            if mine < extra:
                work.append((1, blocks(q + mine, q + min(mine + distance, extra))))
        distance <<= 1
    if extra:  # unfold: rank 0 hands rank q everything but its own block, in two messages
        path += [(1, blocks(0, q)), (1, blocks(q + 1, p))]
        work += [m for vr in range(extra) for m in ((1, blocks(0, vr + q)), (1, blocks(vr + q + 1, p)))]
    return path, work


@functools.lru_cache(maxsize=65536)
def _plan(algorithm: str, nbytes: float, p: int, serial_n: bool, serial_chunk: bool,
          chunk_bytes: int | None, radix: int) -> Plan:
    n = float(nbytes)
    if p < 2 or algorithm == "mpi":
        return Plan((), ())
    if algorithm == "linear":
        return Plan(((p - 1 if serial_n else 1, n),), ((p - 1, n),))
    if algorithm in ("binomial", "knomial"):
        depth = knomial_depth(p, 2 if algorithm == "binomial" else radix, serial_n)
        return Plan(((depth, n),), ((p - 1, n),))
    if algorithm in ("chain", "binary_tree"):
        k, s = _chunks(n, chunk_bytes)
        d, f = pipeline_shape(algorithm, p, serial_chunk)
        return Plan(((d + (k - 1) * f, s),), ((k * (p - 1), s),))
    if algorithm == "split_binary_tree":
        k, s = _chunks(n / 2, chunk_bytes)
        d, f = pipeline_shape(algorithm, p, serial_chunk)
        # then each rank swaps halves with its partner (or gets the missing half from the root)
        return Plan(((d + (k - 1) * f, s), (1, n / 2)), ((k * (p - 1), s), (p - 1, n / 2)))
    if algorithm in ("scatter_allgather_rd", "scatter_allgather_ring"):  # at scale (see schedule())
        path, work = _scatter(n, p)
        if algorithm == "scatter_allgather_ring":
            ss = math.ceil(n / p)
            block = lambda b: max(0.0, min((b + 1) * ss, n) - min(b * ss, n))  # noqa: E731
            path, work = path + [(p - 1, min(ss, n))], work + [(p - 1, block(b)) for b in range(p)]
        else:
            more_path, more_work = _allgather_rd(n, p)
            path, work = path + more_path, work + more_work
        return Plan(tuple(path), tuple(work))
    raise ValueError(f"no schedule for algorithm {algorithm!r}")


def schedule(algorithm: str, nbytes: float, p: int, serial: Callable[[float], bool],
             chunk_bytes: int | None = None, radix: int = 4,
             cost: Callable[[float], float] | None = None) -> Plan:
    """The Plan of one flat algorithm (not 'hierarchical', which the model composes from two).

    ``cost(bytes)``, the seconds of one message, picks the critical path of the
    algorithms replayed from their schedules (``BLOCKING``); without it a
    message costs its bytes plus a 1 KiB-equivalent latency. Replaying costs
    O(p^2) Python steps for the ring, so beyond ``REPLAY_MAX_P`` ranks (profiles
    of large machines) the closed forms of ``_scatter`` and ``_allgather_rd``
    are used for the path (tests/bcast/test_model.py checks they charge the
    replay's seconds within 0.1% at every p up to ``REPLAY_MAX_P``); the total work, which
    only matters where ranks outnumber cores, is charged approximately there.
    """
    if algorithm in BLOCKING and 2 <= p <= REPLAY_MAX_P:
        return blocking_path(algorithm, int(math.ceil(nbytes)), int(p), cost or _nominal)
    chunk = DEFAULT_CHUNK if chunk_bytes is None else chunk_bytes
    return _plan(algorithm, float(nbytes), int(p), bool(serial(nbytes)),
                 bool(serial(min(chunk, nbytes))), chunk_bytes, int(radix))
