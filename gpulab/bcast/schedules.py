"""Message schedules of the broadcast algorithms: what the cost model charges for.

For each algorithm of ``gpulab.bcast.ALGORITHMS`` this returns a ``Plan``:
the messages on the critical path (the chain of messages the last rank waits
for) and all messages sent by all ranks (the total work), as lists of
``(count, bytes each)``. ``gpulab.bcast.model`` turns a plan into seconds with
alpha-beta (Hockney) costs. The trees are read from the algorithms' own
schedules (the ops ``execute`` runs); everything else here follows the schedules
in trees.py, pipelined.py and scatter_allgather.py step by step, not the textbook
approximations, e.g. a k-nomial root with fewer than radix-1 children at a
level is charged only for the children it has.

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

from gpulab.bcast import pipelined, trees
from gpulab.bcast.group import SEND
from gpulab.bcast.layouts import DEFAULT_CHUNK


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


@functools.lru_cache(maxsize=4096)
def heap_depth(p: int, serial: bool) -> int:
    """Depth of the binary tree the pipelined schedules send along (one chunk), root 0."""
    return _tree_depth(lambda vr: _sent_to(pipelined.binary_tree(p, 0, vr, 1, chunk_bytes=1)), p, serial)


def _chunks(nbytes: float, chunk_bytes: int | None) -> tuple[int, float]:
    """(k chunks, bytes each): the algorithms cut n into ceil(n/c) pieces; charged at the mean size."""
    chunk = DEFAULT_CHUNK if chunk_bytes is None else chunk_bytes
    k = max(1, math.ceil(nbytes / chunk))
    return k, nbytes / k


def pipeline_shape(algorithm: str, p: int, serial: bool) -> tuple[int, int]:
    """(D, F) of a pipelined tree: the first chunk needs D message times to reach the last rank,
    and each later chunk F more (the busiest forwarder sends F messages per chunk).
    Time = (D + (k - 1) F) t(n/k), minimised at k* = sqrt((D - F) n beta / (F alpha))."""
    if p < 2:
        return 0, 0
    if algorithm == "chain":
        return p - 1, 1
    if algorithm == "binary_tree":
        return heap_depth(p, serial), (2 if serial and p > 2 else 1)
    if algorithm == "split_binary_tree":  # each half travels down one subtree of the same heap
        return heap_depth(p, serial), (2 if serial and p > 2 else 1)
    raise ValueError(f"{algorithm!r} is not a pipelined algorithm")


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
        if p == 2:  # one subtree: rank 1 gets the first half pipelined, the second half from the root
            d, f = 1, 1
        # then each rank swaps halves with its partner (or gets the missing half from the root)
        return Plan(((d + (k - 1) * f, s), (1, n / 2)), ((k * (p - 1), s), (p - 1, n / 2)))
    if algorithm in ("scatter_allgather_rd", "scatter_allgather_ring"):
        path, work = _scatter(n, p)
        if algorithm == "scatter_allgather_ring":
            ss = math.ceil(n / p)
            path, work = path + [(p - 1, min(ss, n))], work + [(p * (p - 1), min(ss, n))]
        else:
            more_path, more_work = _allgather_rd(n, p)
            path, work = path + more_path, work + more_work
        return Plan(tuple(path), tuple(work))
    raise ValueError(f"no schedule for algorithm {algorithm!r}")


def schedule(algorithm: str, nbytes: float, p: int, serial: Callable[[float], bool],
             chunk_bytes: int | None = None, radix: int = 4) -> Plan:
    """The Plan of one flat algorithm (not 'hierarchical', which the model composes from two)."""
    chunk = DEFAULT_CHUNK if chunk_bytes is None else chunk_bytes
    return _plan(algorithm, float(nbytes), int(p), bool(serial(nbytes)),
                 bool(serial(min(chunk, nbytes))), chunk_bytes, int(radix))
