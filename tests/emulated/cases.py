"""Rank functions for the emulated-cluster tests (run through tests.mpi_harness.run_mpi)."""

from __future__ import annotations

import os
import time

import numpy as np
from mpi4py import MPI

from gpulab.bcast import ALGORITHMS
from tests.mpi_steps import step


def where(comm: MPI.Comm) -> dict:
    """This rank's view of the topology: its node-local communicator and the launch's record."""
    from gpulab.bcast.algorithms.hierarchical import node_of_rank

    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    out = {"local_size": shared.size, "node_of_rank": node_of_rank(comm, None),
           "netns": os.stat("/proc/self/ns/net").st_ino, "topology": os.environ.get("GPULAB_TOPOLOGY"),
           "cpus": sorted(os.sched_getaffinity(0))}
    shared.Free()
    return out


def transfer_times(comm: MPI.Comm, nbytes: int, pairs: list, repeats: int = 2) -> dict:
    """Seconds for one ``nbytes`` message src -> dst (best of ``repeats``), per pair, measured by dst."""
    buf = np.ones(nbytes, dtype=np.uint8)
    times = {}
    for src, dst in pairs:
        best = float("inf")
        for _ in range(repeats):
            step(f"{src}->{dst}")
            comm.Barrier()
            if comm.rank == src:
                comm.Recv(buf[:1], source=dst, tag=1)  # dst is ready: time only the transfer
                comm.Send(buf, dst, tag=2)
            elif comm.rank == dst:
                start = MPI.Wtime()
                comm.Send(buf[:1], src, tag=1)
                comm.Recv(buf, source=src, tag=2)
                best = min(best, MPI.Wtime() - start)
        times[f"{src}->{dst}"] = best
    return times if comm.rank in {d for _, d in pairs} else {}


def all_algorithms_bit_exact(comm: MPI.Comm, sizes: tuple = (0, 1, 1000, 70_001)) -> list:
    """Every algorithm, from the first and the last rank, random bytes compared with the root's."""
    checked = []
    for name in sorted(ALGORITHMS):
        for root in sorted({0, comm.size - 1}):
            for nbytes in sizes:
                step(f"{name} root={root} {nbytes}")
                expected = np.random.default_rng(nbytes + 7 * root).integers(0, 256, nbytes, dtype=np.uint8)
                buf = expected.copy() if comm.rank == root else np.zeros(nbytes, np.uint8)
                options = {"chunk_bytes": 4096} if name in ("chain", "binary_tree", "split_binary_tree") else {}
                out = ALGORITHMS[name](buf, root, comm, **options)
                got = out if out is not None else buf
                assert np.array_equal(np.asarray(got).view(np.uint8), expected), (name, root, nbytes)
                checked.append(f"{name}/{root}/{nbytes}")
    return checked


def hierarchical_crossings(comm: MPI.Comm, nbytes: int = 100_000) -> dict:
    """Trace a hierarchical broadcast on the real nodes: who sent to whom."""
    from gpulab.bcast import gather_trace, tracing

    expected = np.arange(nbytes, dtype=np.uint8)
    buf = expected.copy() if comm.rank == 0 else np.zeros(nbytes, np.uint8)
    with tracing() as events:
        ALGORITHMS["hierarchical"](buf, 0, comm)
    assert np.array_equal(buf, expected)
    trace = gather_trace(events, comm)
    return {"messages": [(e["src"], e["dst"], e["nbytes"]) for e in trace]} if trace is not None else {}


def announce_ready(rank: int) -> None:
    """Write this rank's pid to $GPULAB_TEST_READY.<rank> whole: written under another name and renamed,
    since the tests wait for the file to exist and then read it (an open-then-write file was read empty)."""
    path = os.environ["GPULAB_TEST_READY"] + f".{rank}"
    with open(path + ".part", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".part", path)


def sleep_forever(comm: MPI.Comm) -> None:
    step("sleeping")
    announce_ready(comm.rank)
    while True:
        time.sleep(1)


def two_level_fit(comm: MPI.Comm, sizes: list, time_budget: float = 0.002) -> dict | None:
    """The cost model fitted by ping-pong on the cluster, and its prediction for every algorithm."""
    from gpulab.bcast.cost.hockney import Machine, predict
    from gpulab.bcast.measurement import experiments

    fitted = experiments.fit(comm, sizes, time_budget=time_budget)
    if comm.rank != 0:
        return None
    machine = Machine.from_dict(fitted)
    nbytes = 4 << 20
    return {"machine": fitted, "ranks_per_node": machine.ranks_per_node,
            "intra_beta": machine.intra.regime(nbytes).beta, "inter_beta": machine.inter.regime(nbytes).beta,
            "predicted_s": {name: predict(name, nbytes, comm.size, machine) for name in sorted(ALGORITHMS)}}


def bcast_forever(comm: MPI.Comm, nbytes: int, algorithm: str = "chain") -> None:
    """Broadcast ``nbytes`` again and again (until a fault ends the job); say when running."""
    buf = np.zeros(nbytes, np.uint8)
    for i in range(10**9):
        step(f"bcast {i}")
        ALGORITHMS[algorithm](buf, 0, comm)
        if i == 1:
            announce_ready(comm.rank)
