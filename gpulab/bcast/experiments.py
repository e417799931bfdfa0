"""The measurements behind ``gpulab tune``: run on every rank of an MPI job, results on rank 0.

    fit(comm)                      ping-pong -> fitted Machine (dict)
    tune(comm, sizes, ...)         sweep -> tuning table for comm.size
    compare(comm, sizes, ...)      auto vs MPI_Bcast vs every fixed algorithm, side by side
    accuracy(comm, sizes, ...)     every algorithm measured, for predicted-vs-measured
    workload(comm, network, ...)   see gpulab.workloads.bench

``gpulab.tune_cli`` starts one job per process count and merges what rank 0 returns.
"""

from __future__ import annotations

from contextlib import contextmanager

DEFAULT_ALGORITHMS = ("linear", "binomial", "knomial", "binary_tree", "split_binary_tree", "chain",
                      "scatter_allgather_rd", "scatter_allgather_ring", "hierarchical", "mpi")


@contextmanager
def auto_registered(table=None):
    """Let ``measure_bcast`` time what ``bcast(..., algorithm="auto")`` does, under the name "auto".

    ``table`` is the tuning file to decide from (None: the default lookup, as bcast itself does).
    """
    from gpulab.bcast import ALGORITHMS
    from gpulab.bcast.algorithms import run_algorithm
    from gpulab.bcast.select import select

    def auto(buf, root=0, comm=None):
        name, options = select(buf.nbytes, comm, table)  # decided on every call, as bcast does
        return run_algorithm(name, buf, root, comm, **options)

    ALGORITHMS["auto"] = auto
    try:
        yield
    finally:
        del ALGORITHMS["auto"]


def _measure(comm, name, nbytes, time_budget, **options):
    from gpulab.bench import measure_bcast

    warmup = 2 if nbytes >= (1 << 20) else None  # OSU's 10 warm-ups of a 64 MiB bcast would take seconds here
    return measure_bcast(comm, name, nbytes, warmup=warmup, time_budget=time_budget,
                         validate=nbytes <= (4 << 20), **options)


def fit(comm, sizes=None, ranks_per_node=None, time_budget=0.02) -> dict | None:
    from gpulab.bcast.fit import SIZES, fit_machine, pingpong

    samples = pingpong(comm, sizes or SIZES, ranks_per_node=ranks_per_node, time_budget=time_budget)
    machine = fit_machine(samples, p=comm.size, ranks_per_node=ranks_per_node)
    return machine.to_dict() if comm.rank == 0 else None


def tune(comm, sizes, *, chunks, radices, time_budget, margin, machine=None, progress=None) -> dict | None:
    from gpulab.bcast.model import Machine
    from gpulab.bcast.tuning import build_table, sweep

    m = Machine.from_dict(machine) if machine else None
    rows = sweep(comm, sizes, chunks=chunks, radices=radices, machine=m, time_budget=time_budget,
                 margin=margin, progress=progress)
    return build_table(rows, comm.size, margin) if comm.rank == 0 else None


def compare(comm, sizes, *, table, time_budget, algorithms=DEFAULT_ALGORITHMS, progress=None) -> list | None:
    """At each size: auto (with the table), MPI_Bcast, and every fixed algorithm at its default options."""
    from gpulab.bcast.select import select

    fixed = [a for a in algorithms if a not in ("mpi", "hierarchical")]
    rows = []
    with auto_registered(table):
        for nbytes in sizes:
            for name in ("auto", "mpi", *fixed):
                row = _measure(comm, name, nbytes, time_budget)
                if name == "auto":
                    decision = select(nbytes, comm, table)
                    row.update(chosen=decision.name, chosen_options=decision.options, source=decision.source,
                               reason=decision.reason)
                rows.append(row)
                if progress:
                    progress(row)
    return rows if comm.rank == 0 else None


def accuracy(comm, sizes, *, time_budget, algorithms=DEFAULT_ALGORITHMS, ranks_per_node=2,
             progress=None) -> list | None:
    """Every algorithm at its default options (hierarchical on emulated nodes of ``ranks_per_node``)."""
    rows = []
    for nbytes in sizes:
        for name in algorithms:
            options = {"ranks_per_node": ranks_per_node} if name == "hierarchical" else {}
            rows.append(_measure(comm, name, nbytes, time_budget, **options))
            if progress:
                progress(rows[-1])
    return rows if comm.rank == 0 else None
