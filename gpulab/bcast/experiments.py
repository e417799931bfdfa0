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


def fit(comm, sizes=None, ranks_per_node=None, time_budget=0.01, switch="library") -> dict | None:
    from gpulab.bcast.fit import SIZES, call_overhead, fit_machine, pingpong

    samples = pingpong(comm, sizes or SIZES, ranks_per_node=ranks_per_node, time_budget=time_budget)
    call = comm.bcast(call_overhead() if comm.rank == 0 else None, root=0)  # measured alone, no messages
    networked = False
    if ranks_per_node is None:  # real (or emulated) nodes, as Split_type finds them: two levels to fit
        from gpulab.bcast.hierarchical import node_of_rank

        node = node_of_rank(comm, None)
        if len(set(node)) > 1:
            ranks_per_node, networked = max(node.count(n) for n in set(node)), True
    machine = fit_machine(samples, p=comm.size, ranks_per_node=ranks_per_node, switch=switch, call=call)
    if networked:  # nodes with a network between them: the link, not the shared cores, paces 'inter'
        machine.notes["nodes_from"] = "split_type"
    return machine.to_dict() if comm.rank == 0 else None


def tune(comm, sizes, *, chunks, radices, time_budget, margin, machine=None, progress=None) -> dict | None:
    from gpulab.bcast.model import Machine
    from gpulab.bcast.tuning import build_table, sweep

    m = Machine.from_dict(machine) if machine else None
    rows = sweep(comm, sizes, chunks=chunks, radices=radices, machine=m, time_budget=time_budget,
                 margin=margin, progress=progress)
    return build_table(rows, comm.size, margin) if comm.rank == 0 else None


def _best_of_rounds(comm, names_options, nbytes, time_budget, rounds):
    """Measure each (name, options) ``rounds`` times, interleaved (A B C A B C ...), keep each one's fastest.

    Interleaving spreads slow spells of a shared machine over all candidates,
    and the fastest round is the least disturbed one (other processes only add time).
    """
    best = {}
    for _ in range(rounds):
        for name, options in names_options:
            row = _measure(comm, name, nbytes, time_budget, **options)
            key = (name, repr(options))
            row["rounds_us"] = best.get(key, {}).get("rounds_us", []) + [row["avg_us"]]
            row["valid"] = row["valid"] and best.get(key, {}).get("valid", True)
            if key not in best or row["avg_us"] < best[key]["avg_us"]:
                best[key] = row
            else:
                best[key].update(rounds_us=row["rounds_us"], valid=row["valid"])
    return list(best.values())


def compare(comm, sizes, *, table, time_budget, algorithms=DEFAULT_ALGORITHMS, rounds=3, progress=None) -> list | None:
    """At each size: auto (with the table), MPI_Bcast, and every fixed algorithm at its default options."""
    from gpulab.bcast.select import select

    from gpulab.bcast.select import reload

    reload()  # every rank re-reads the tuning file now, together
    fixed = [a for a in algorithms if a not in ("mpi", "hierarchical")]
    rows = []
    with auto_registered(table):
        for nbytes in sizes:
            here = _best_of_rounds(comm, [(name, {}) for name in ("auto", "mpi", *fixed)], nbytes, time_budget,
                                   rounds)
            decision = select(nbytes, comm, table)
            here[0].update(chosen=decision.name, chosen_options=decision.options, source=decision.source,
                           reason=decision.reason)
            rows += here
            if progress:
                for row in here:
                    progress(row)
    return rows if comm.rank == 0 else None


def accuracy(comm, sizes, *, time_budget, algorithms=DEFAULT_ALGORITHMS, ranks_per_node=2, rounds=2,
             progress=None) -> list | None:
    """Every algorithm at its default options (hierarchical on emulated nodes of ``ranks_per_node``)."""
    rows = []
    for nbytes in sizes:
        options = [(name, {"ranks_per_node": ranks_per_node} if name == "hierarchical" else {})
                   for name in algorithms]
        here = _best_of_rounds(comm, options, nbytes, time_budget, rounds)
        rows += here
        if progress:
            for row in here:
                progress(row)
    return rows if comm.rank == 0 else None


def chunk_scan(comm, nbytes, chunks, *, algorithm="chain", time_budget=0.05) -> list | None:
    """One pipelined algorithm at one size over a range of chunk sizes: the measured optimum."""
    rows = [_measure(comm, algorithm, nbytes, time_budget, chunk_bytes=int(c)) for c in chunks]
    return rows if comm.rank == 0 else None


def sub_tables(comm, sizes, process_counts, *, time_budget=0.01, chunks=(64 << 10,), radices=(4,)) -> dict | None:
    """Small tuning tables for several process counts from one job: ranks 0..p-1 sweep while the rest wait.

    (A notebook's engines are one fixed MPI job; ``gpulab tune bcast`` runs a job per p instead.)
    """
    from mpi4py import MPI

    from gpulab.bcast.tuning import build_table, sweep

    tables = {}
    for p in process_counts:
        sub = comm.Split(0 if comm.rank < p else MPI.UNDEFINED, comm.rank)
        if sub != MPI.COMM_NULL:
            rows = sweep(sub, sizes, chunks=chunks, radices=radices, time_budget=time_budget)
            if sub.rank == 0:
                tables[p] = build_table(rows, p)
            sub.Free()
        comm.Barrier()
    return tables if comm.rank == 0 else None


def on_world(what: str, *args, **kwargs):
    """Run one of these experiments on MPI.COMM_WORLD: for ``Engines.run`` from a notebook kernel,
    which must not initialise MPI itself."""
    from mpi4py import MPI

    return globals()[what](MPI.COMM_WORLD, *args, **kwargs)


def workload(comm, networks, algorithms, *, repeats=1, table=None) -> list | None:
    """``gpulab.workloads.bench.broadcast_model`` for several networks, "auto" included."""
    from gpulab.bcast.select import reload
    from gpulab.workloads.bench import broadcast_model

    reload()  # the notebook may have rewritten the tuning file since these engines last read it
    rows = []
    with auto_registered(table):
        for network in networks:
            rows += broadcast_model(comm, network, algorithms, repeats=repeats)
    return rows if comm.rank == 0 else None
