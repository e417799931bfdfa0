"""Broadcast a whole network's parameters as data-parallel training does at start-up.

Rank ``root`` holds the initial weights; every other rank must receive them
before the first step (PyTorch DDP and Horovod's broadcast_parameters do this).
Two ways, per algorithm:
  layer-wise: one broadcast per parameter tensor (hundreds of calls, many tiny),
  fused:      one broadcast of a single flat buffer holding every tensor.
The difference is the price of latency: the same bytes move either way.

    rows = broadcast_model(comm, "vgg16", ["mpi", "binomial", "chain"])     # on every rank
    mpiexec -n 4 python -m gpulab.workloads.bench vgg16                      # quick look

The tensors are views into one flat buffer, so layer-wise and fused move the
same memory and the model needs its size only once per rank (GPT-2 medium in
fp32: 1.4 GB per rank).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from gpulab.workloads.networks import layer_bytes


def _offsets(sizes: list[int]) -> list[slice]:
    edges = np.concatenate([[0], np.cumsum(sizes)])
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _fill(buf: np.ndarray, rank: int, root: int, salt: int) -> None:
    """Mark every 4 KiB with a byte the receivers must end up with (cheap to write and check)."""
    stride = buf[::4096]
    stride[:] = (np.arange(stride.size) + salt) % 251 if rank == root else 255


def _check(buf: np.ndarray, salt: int) -> bool:
    return bool(np.array_equal(buf[::4096], (np.arange(buf[::4096].size) + salt) % 251))


def broadcast_model(comm, network: str | list[int], algorithms, *, repeats: int = 3, root: int = 0,
                    itemsize: int = 4, options: dict | None = None, modes=("layerwise", "fused")) -> list[dict]:
    """Time each algorithm's start-up broadcast of ``network`` (a name, or a list of tensor byte sizes).

    Returns on every rank one row per (algorithm, mode): mean/min seconds over
    ``repeats`` (the slowest rank's time of each repeat), tensors, bytes, valid.
    """
    from gpulab.bcast import ALGORITHMS

    sizes = layer_bytes(network, itemsize) if isinstance(network, str) else [int(s) for s in network]
    buf = np.empty(sum(sizes), dtype=np.uint8)
    views = [buf[s] for s in _offsets(sizes)]
    rows = []
    for algorithm in algorithms:
        run = ALGORITHMS[algorithm]
        opts = (options or {}).get(algorithm, {})
        for mode in modes:
            parts = views if mode == "layerwise" else [buf]
            times, valid = [], True
            for rep in range(repeats + 1):  # the first is a warm-up (page faults, connection set-up)
                _fill(buf, comm.rank, root, salt=rep)
                comm.Barrier()
                t0 = MPI.Wtime()
                for part in parts:
                    run(part, root, comm, **opts)
                elapsed = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
                valid &= _check(buf, salt=rep)
                if rep:
                    times.append(elapsed)
            rows.append({"algorithm": algorithm, "mode": mode, "options": opts, "p": comm.size,
                         "network": network if isinstance(network, str) else "custom",
                         "tensors": len(parts), "nbytes": int(buf.nbytes), "repeats": repeats,
                         "mean_s": float(np.mean(times)), "min_s": float(np.min(times)),
                         "valid": bool(comm.allreduce(valid, op=MPI.LAND))})
    return rows


def latency_share(rows: list[dict]) -> list[dict]:
    """Per algorithm: layer-wise minus fused time, the measured cost of many small broadcasts."""
    by = {(r["algorithm"], r["mode"]): r for r in rows}
    out = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        lw, fu = by.get((algorithm, "layerwise")), by.get((algorithm, "fused"))
        if lw and fu:
            extra = max(0.0, lw["min_s"] - fu["min_s"])
            out.append({"algorithm": algorithm, "layerwise_s": lw["min_s"], "fused_s": fu["min_s"],
                        "extra_s": extra, "extra_share": extra / lw["min_s"] if lw["min_s"] else 0.0})
    return out


def predicted(network: str | list[int], algorithm: str, p: int, machine, *, mode: str = "layerwise",
              itemsize: int = 4, options: dict | None = None, table=None) -> dict:
    """The model's time for the same broadcast, split into latency (alpha) and bandwidth (beta) terms.

    For "auto" each tensor is charged with the algorithm ``select()`` picks for its size.
    """
    from gpulab.bcast.model import ZERO, breakdown
    from gpulab.bcast.select import select

    class _Size:  # select() only looks at comm.size
        size = p

    sizes = layer_bytes(network, itemsize) if isinstance(network, str) else [int(s) for s in network]
    parts = sizes if mode == "layerwise" else [sum(sizes)]
    total = ZERO
    for nbytes in parts:
        name, opts = (select(nbytes, _Size, table) if algorithm == "auto" else (algorithm, options or {}))
        total = total + breakdown(name, nbytes, p, machine, **opts)
    return {"algorithm": algorithm, "mode": mode, "predicted_s": total.seconds, "latency_s": total.latency,
            "bandwidth_s": total.bandwidth,
            "latency_share": total.latency / total.seconds if total.seconds else 0.0}


if __name__ == "__main__":
    import sys

    world = MPI.COMM_WORLD
    result = broadcast_model(world, sys.argv[1] if len(sys.argv) > 1 else "alexnet", ["mpi", "binomial", "chain"])
    if world.rank == 0:
        for r in result:
            print(f"{r['algorithm']:>10} {r['mode']:>9} {r['tensors']:4d} tensors {r['min_s'] * 1e3:9.1f} ms")
