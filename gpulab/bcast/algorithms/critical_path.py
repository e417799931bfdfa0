"""The critical paths of the broadcasts' schedules: the messages the cost model charges for.

For a flat algorithm this gives a ``Plan``: the messages on the critical path
(the chain of messages the last rank waits for) and all messages sent by all
ranks (the total work), as lists of ``(count, bytes each)``.
``gpulab.bcast.cost.hockney`` turns a plan into seconds with alpha-beta (Hockney)
costs. Everything is read from the algorithms' own schedule builders (the ops
``execute`` runs), not from textbook approximations: a tree's depth from its
send lists (a k-nomial root with fewer than radix-1 children at a level is
charged only for the children it has); a pipeline's (D, F) from the path one
chunk takes through every rank's schedule; and schedules made of blocking
Send, Recv and Sendrecv only (the scatter-allgathers) by replaying every
rank's schedule message by message (``replay``), so uneven blocks, fold/unfold
steps and empty messages are charged as they run.

The functions here take the schedule builder itself (``builder(p, root, me,
nbytes, **options)``); each algorithm's record in ``gpulab.bcast.algorithms.registry``
says which of them prices it. ``serial`` says whether one rank's concurrent
sends queue behind each other (the sender copies: single-port Hockney) or
overlap (the receiver copies, as MPICH's single-copy CMA path does on one
node). Sends a schedule makes one after another (binomial's) are serial
whatever the link.

    tree_plan(trees.binomial, 1 << 20, 8, serial_n=True, serial_chunk=True)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from gpulab.bcast.algorithms.tree_shapes import DEFAULT_CHUNK
from gpulab.bcast.runtime.executor import SEND, SENDRECV

REPLAY_MAX_P = 64


def nominal(nbytes: float) -> float:
    """A message's cost when none is given: its bytes plus a 1 KiB-equivalent latency."""
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
def tree_depth(build: Callable, p: int, serial: bool, options: tuple = ()) -> int:
    """Depth of the tree an unsegmented schedule builder sends along, root 0 (``options``: its
    keyword options as sorted (name, value) pairs)."""
    kwargs = dict(options)
    root_sends = build(p, 0, 0, 1, **kwargs)
    serial = serial or any(op.kind == SEND for op in root_sends)
    return _tree_depth(lambda vr: _sent_to(build(p, 0, vr, 1, **kwargs)), p, serial)


def _chunks(nbytes: float, chunk_bytes: int | None) -> tuple[int, float]:
    """(k chunks, bytes each): the algorithms cut n into ceil(n/c) pieces; charged at the mean size."""
    chunk = DEFAULT_CHUNK if chunk_bytes is None else chunk_bytes
    k = max(1, math.ceil(nbytes / chunk))
    return k, nbytes / k


@functools.lru_cache(maxsize=4096)
def pipeline_shape(build: Callable, p: int, serial: bool, halves: int = 1,
                   stand_in: Callable | None = None) -> tuple[int, int]:
    """(D, F) of a pipelined tree: the first chunk needs D message times to reach the last rank,
    and each later chunk F more (the busiest forwarder sends F messages per chunk).
    Time = (D + (k - 1) F) t(n/k), minimised at k* = sqrt((D - F) n beta / (F alpha)).

    Both are read from every rank's schedule of a message of one chunk per pipeline (``halves``
    pipelines: the split tree's two), the pipeline phase only; with ``serial`` sends a forwarder's
    j-th child waits for j. Building some schedules takes O(p^2) steps (the split tree's), so
    beyond ``REPLAY_MAX_P`` ranks the one-pipeline ``stand_in`` (whose tree the halves travel
    down) is read instead (a test checks they agree up to there).
    """
    if p < 2:
        return 0, 0
    if stand_in is not None and p > REPLAY_MAX_P:
        build, halves = stand_in, 1
    sends = [[op.peer for op in build(p, 0, vr, halves, chunk_bytes=1)
              if op.phase and op.phase != "exchange"] for vr in range(p)]
    return _tree_depth(sends.__getitem__, p, serial), max(map(len, sends)) if serial else 1


def _messages_of(ops) -> tuple[list, list]:
    """Per op of one rank's schedule: the message it sends (peer, bytes) or None, and the one it receives."""
    sends = [(op.peer, op.hi - op.lo) if op.kind in (SEND, SENDRECV) else None for op in ops]
    receives = [(op.src, op.rhi - op.rlo) if op.kind == SENDRECV else None if op.kind == SEND
                else (op.peer, op.hi - op.lo) for op in ops]
    return sends, receives


@functools.lru_cache(maxsize=4096)
def replay(build: Callable, nbytes: int, p: int, cost: Callable[[float], float]) -> Plan:
    """The critical path and the work of a schedule of blocking ops, read from every rank's schedule.

    Replays the schedules with each message taking ``cost(bytes)`` seconds:
    a message starts when both its sender and its receiver have reached it (a
    blocking Send, Recv or Sendrecv), and a rank moves on when every message of
    its op has arrived. The path is the chain of messages behind the last rank
    to finish; which chain that is can depend on alpha and beta, hence ``cost``.
    Each message is handled once (a rank that moves on wakes only itself and
    the rank sending to it), so a replay costs O(messages), not O(p) per step.
    """
    ops = [build(p, 0, me, nbytes) for me in range(p)]
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
        raise RuntimeError(f"{build.__name__} on {p} ranks: the schedules wait for each other (deadlock)")
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


# The plans of the algorithms' records (``gpulab.bcast.algorithms.registry``): plan(nbytes, p, serial_n,
# serial_chunk, **options), ``serial_n`` for whole messages and ``serial_chunk`` for one chunk.

def linear_plan(nbytes: float, p: int, serial_n: bool, serial_chunk: bool) -> Plan:
    """The root sends the whole message p - 1 times: one after another unless sends overlap."""
    return Plan(((p - 1 if serial_n else 1, nbytes),), ((p - 1, nbytes),))


def tree_plan(build: Callable, nbytes: float, p: int, serial_n: bool, serial_chunk: bool, **options) -> Plan:
    """An unsegmented tree: the whole message once per level of the tree ``build`` sends along."""
    depth = tree_depth(build, p, serial_n, tuple(sorted(options.items())))
    return Plan(((depth, nbytes),), ((p - 1, nbytes),))


def pipeline_plan(shape: Callable, nbytes: float, p: int, serial_n: bool, serial_chunk: bool,
                  chunk_bytes: int | None = None) -> Plan:
    """k chunks down a pipelined tree of shape (D, F) = ``shape(p, serial)``: D + (k - 1) F chunk times."""
    k, s = _chunks(nbytes, chunk_bytes)
    d, f = shape(p, serial_chunk)
    return Plan(((d + (k - 1) * f, s),), ((k * (p - 1), s),))


def split_pipeline_plan(shape: Callable, nbytes: float, p: int, serial_n: bool, serial_chunk: bool,
                        chunk_bytes: int | None = None) -> Plan:
    """Each half pipelined down its own subtree at once, then each rank swaps halves with its partner
    (or gets the missing half from the root)."""
    k, s = _chunks(nbytes / 2, chunk_bytes)
    d, f = shape(p, serial_chunk)
    return Plan(((d + (k - 1) * f, s), (1, nbytes / 2)), ((k * (p - 1), s), (p - 1, nbytes / 2)))


def scatter_allgather_rd_plan(nbytes: float, p: int, serial_n: bool, serial_chunk: bool) -> Plan:
    """Closed form at scale (``replay`` prices it up to ``REPLAY_MAX_P`` ranks): binomial scatter,
    recursive-doubling allgather."""
    path, work = _scatter(nbytes, p)
    more_path, more_work = _allgather_rd(nbytes, p)
    return Plan(tuple(path + more_path), tuple(work + more_work))


def scatter_allgather_ring_plan(nbytes: float, p: int, serial_n: bool, serial_chunk: bool) -> Plan:
    """Closed form at scale (``replay`` prices it up to ``REPLAY_MAX_P`` ranks): binomial scatter,
    ring allgather (p - 1 steps of one block)."""
    path, work = _scatter(nbytes, p)
    ss = math.ceil(nbytes / p)
    block = lambda b: max(0.0, min((b + 1) * ss, nbytes) - min(b * ss, nbytes))  # noqa: E731
    return Plan(tuple(path + [(p - 1, min(ss, nbytes))]), tuple(work + [(p - 1, block(b)) for b in range(p)]))
