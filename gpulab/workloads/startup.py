"""Broadcast a whole network's parameters as data-parallel training does at start-up.

Rank ``root`` holds the initial weights; every other rank must receive them
before the first step (PyTorch DDP and Horovod's broadcast_parameters do this).
Two ways, per algorithm:
  layer-wise: one broadcast per parameter tensor (hundreds of calls, many tiny),
  fused:      one broadcast of a single flat buffer holding every tensor.
The difference is the price of latency: the same bytes move either way.

    rows = broadcast_model(comm, "vgg16", ["mpi", "binomial", "chain"])     # on every rank
    gpulab tune workload -n 4 --networks vgg16                                 # from the shell

The tensors are views into one flat buffer, so layer-wise and fused move the
same memory and the model needs its size only once per rank (GPT-2 medium in
fp32: 1.4 GB per rank).
"""

from __future__ import annotations

import numpy as np

from gpulab.bcast.cost.hockney import ZERO, breakdown
from gpulab.bcast.entry import ALGORITHMS
from gpulab.bcast.measurement.experiments import auto_registered
from gpulab.bcast.measurement.report import print_rows
from gpulab.bcast.selection.auto import reload, select
from gpulab.lazy_mpi import lazy_mpi
from gpulab.workloads.networks import layer_bytes

MPI = lazy_mpi(globals())


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
    class _Size:  # select() only looks at comm.size
        size = p

    sizes = layer_bytes(network, itemsize) if isinstance(network, str) else [int(s) for s in network]
    parts = sizes if mode == "layerwise" else [sum(sizes)]
    total = ZERO
    for nbytes in parts:
        if algorithm == "auto":
            decision = select(nbytes, _Size, table)
            name, opts = decision.name, decision.options
        else:
            name, opts = algorithm, options or {}
        total = total + breakdown(name, nbytes, p, machine, **opts)
    return {"algorithm": algorithm, "mode": mode, "predicted_s": total.seconds, "latency_s": total.latency,
            "bandwidth_s": total.bandwidth,
            "latency_share": total.latency / total.seconds if total.seconds else 0.0}


def workload(comm, networks, algorithms, *, repeats=1, table=None) -> list | None:
    """``broadcast_model`` for several networks, "auto" (decided from ``table``) included; rows on rank 0."""
    reload()  # the notebook may have rewritten the tuning file since these engines last read it
    rows = []
    with auto_registered(table):
        for network in networks:
            rows += broadcast_model(comm, network, algorithms, repeats=repeats)
    return rows if comm.rank == 0 else None


def report(rows: list[dict], p: int, machine=None, table=None) -> bool:
    """Print one process count's ``gpulab tune workload`` rows (with the model's split when a fitted
    ``machine`` is known) and the price of layer-wise broadcasting; True when every run was valid."""
    for x in rows:
        if machine is not None:  # the model's split of the same broadcast into alpha and beta terms
            x.update(predicted(x["network"], x["algorithm"], p, machine, mode=x["mode"], options=x["options"],
                               table=table))
    columns = ["network", "algorithm", "mode", "tensors", "min_s", "mean_s"]
    print_rows(rows, columns + (["predicted_s", "latency_share"] if machine else []))
    print_rows(latency_share(rows), ["algorithm", "layerwise_s", "fused_s", "extra_share"])
    return all(x["valid"] for x in rows)
