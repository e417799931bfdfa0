"""The measurements behind ``gpulab tune``: run on every rank of an MPI job, results on rank 0.

    fit(comm)                      ping-pong -> fitted Machine (dict)
    tune(comm, sizes, ...)         sweep -> tuning table for comm.size
    compare(comm, sizes, ...)      auto vs MPI_Bcast vs every fixed algorithm, side by side
    accuracy(comm, sizes, ...)     every algorithm measured, for predicted-vs-measured
    sweep(comm, sizes, ...)        every candidate at every size, winners confirmed against MPI_Bcast
    native_sweep(comm, sizes, v)   MPI_Bcast as one native variant forces it (the variant's own job)
    on_world(fit, ...)             any of these on MPI.COMM_WORLD, for a notebook's engines

``gpulab tune`` starts one job per process count and merges what rank 0 returns.
The start-up broadcast of real networks is ``gpulab.workloads.startup``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from gpulab.bcast.algorithms import registry
from gpulab.bcast.cost.hockney import Machine, best_chunk
from gpulab.bcast.entry import ALGORITHMS, entry_record, run_algorithm
from gpulab.bcast.measurement import measure, native_variants
from gpulab.bcast.measurement.pingpong_fit import SIZES, call_overhead, fit_machine, pingpong
from gpulab.bcast.selection.auto import reload, select
from gpulab.bcast.selection.tuning import MARGIN, build_table, choose_measured
from gpulab.launch import first_ranks
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

CONFIRM = 4  # interleaved confirmation rounds of the sweep's winner against MPI_Bcast
MAX_CONFIRMS = 3  # candidates confirmed per size before MPI_Bcast is kept

@contextmanager
def auto_registered(table=None):
    """Let ``measure_bcast`` time what ``bcast(..., algorithm="auto")`` does, under the name "auto".

    ``table`` is the tuning file to decide from (None: the default lookup, as bcast itself does).
    """
    def auto(buf, root=0, comm=None):
        decision = select(buf.nbytes, comm, table)  # decided on every call, as bcast does
        return run_algorithm(decision.name, buf, root, comm, **decision.options)

    ALGORITHMS["auto"] = auto
    try:
        yield
    finally:
        del ALGORITHMS["auto"]


def _measure(comm, name, nbytes, time_budget, **options):
    # warm-up and validation scale down with size: OSU's 10 warm-ups of a 64 MiB bcast would take seconds here
    warmup = 2 if nbytes >= (1 << 20) else None
    return measure.measure_bcast(comm, name, nbytes, warmup=warmup, time_budget=time_budget,
                         validate=nbytes <= (4 << 20), **options)


def sweep(comm, sizes, *, chunks=registry.CHUNKS, radices=registry.RADICES, machine=None, time_budget: float = 0.1,
          margin: float = MARGIN, progress=None) -> list[dict]:
    """Measure every candidate at every size on ``comm`` (collective); rows identical on every rank.

    The model's optimal chunk (``best_chunk``) joins the chunk list when a
    fitted machine is given. When something beats MPI_Bcast by the margin, the
    two are measured again in CONFIRM interleaved rounds and the smallest
    speed-up replaces the first one: only a winner of every round enters the
    table. If it fails, the next best is confirmed (up to MAX_CONFIRMS); rows
    never confirmed are not allowed to look faster than MPI_Bcast.
    """
    rows = []
    for nbytes in sizes:
        extra = {best_chunk(a, nbytes, comm.size, machine) for a in registry.pipelined_names()} \
            if machine and comm.size > 1 else ()
        here = []
        for name, options in registry.candidates(nbytes, comm.size, radices=radices, chunks=chunks,
                                                 extra_chunks=extra):
            here.append(_measure(comm, name, nbytes, time_budget, **options))
            if progress:
                progress(here[-1])
        native = next(r for r in here if r["algorithm"] == "mpi")
        for _ in range(MAX_CONFIRMS):  # when a winner fails its confirmation, the next best is tried
            fastest, _ = choose_measured(here, margin)
            if fastest is native or "confirm_speedups" in fastest:
                break
            # confirm: CONFIRM rounds of the two, interleaved; the smallest speed-up decides, so
            # the winner must beat MPI_Bcast in every round: on a shared machine one slow spell of
            # MPI_Bcast would otherwise put an algorithm in the table that is no faster
            ratios = []
            for _ in range(CONFIRM):
                ours = _measure(comm, fastest["algorithm"], nbytes, time_budget, **fastest["options"])["avg_us"]
                ratios.append(_measure(comm, "mpi", nbytes, time_budget)["avg_us"] / ours)
            fastest["confirm_speedups"] = ratios
            fastest["avg_us"] = native["avg_us"] / min(ratios)
        for row in here:  # whatever is still unconfirmed may not replace MPI_Bcast
            if "confirm_speedups" not in row and row is not native:
                row["avg_us"] = max(row["avg_us"], native["avg_us"])
        rows += here
    return rows


def native_sweep(comm, sizes, row_name: str, *, time_budget: float = 0.1, progress=None) -> list | None:
    """Inside the job of one native variant (``native_variants``): the plain MPI_Bcast at every size, which
    the job's MPICH control variables force to that variant, in rows named after it."""
    if row_name != "mpi":
        native_variants.check_library(MPI.Get_library_version(), row_name)
    rows = []
    for nbytes in sizes:
        rows.append({**_measure(comm, "mpi", nbytes, time_budget), "algorithm": row_name,
                     "options": {k: v for k, v in native_variants.environment(row_name).items()
                                                if k.startswith("MPIR_CVAR")}})
        if progress:
            progress(rows[-1])
    return rows if comm.rank == 0 else None


def fit(comm, sizes=None, ranks_per_node=None, time_budget=0.01, switch="library") -> dict | None:
    samples = pingpong(comm, sizes or SIZES, ranks_per_node=ranks_per_node, time_budget=time_budget)
    call = comm.bcast(call_overhead() if comm.rank == 0 else None, root=0)  # measured alone, no messages
    networked = False
    if ranks_per_node is None:  # real (or emulated) nodes, as Split_type finds them: two levels to fit
        from gpulab.bcast.algorithms.hierarchical import node_of_rank

        node = node_of_rank(comm, None)
        if len(set(node)) > 1:
            ranks_per_node, networked = max(node.count(n) for n in set(node)), True
    machine = fit_machine(samples, p=comm.size, ranks_per_node=ranks_per_node, switch=switch, call=call)
    machine.notes.update(entry_record())  # the per-call time is the entry's: C or Python
    if networked:  # nodes with a network between them: the link, not the shared cores, paces 'inter'
        machine.notes["nodes_from"] = "split_type"
        # the single-copy switch is shared memory's (the receiver copies, so a sender's concurrent
        # messages overlap); over a network a sender's messages share its one link
        machine = replace(machine, inter=replace(machine.inter, receiver_copies=False))
    return machine.to_dict() if comm.rank == 0 else None


def tune(comm, sizes, *, chunks, radices, time_budget, margin, machine=None, progress=None) -> dict | None:
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


def compare(comm, sizes, *, table, time_budget, algorithms=None, rounds=3, progress=None) -> list | None:
    """At each size: auto (with the table), MPI_Bcast, and every fixed flat algorithm (default: every
    registered one) at its default options."""
    reload()  # every rank re-reads the tuning file now, together
    fixed = [a for a in algorithms or registry.names() if a != "mpi" and registry.get(a).level]
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


def accuracy(comm, sizes, *, time_budget, algorithms=None, ranks_per_node=2, rounds=2,
             progress=None) -> list | None:
    """Every algorithm (default: every registered one) at its default options (those that take
    ``ranks_per_node``, hierarchical, on emulated nodes of that many ranks)."""
    rows = []
    for nbytes in sizes:
        options = [(name, {"ranks_per_node": ranks_per_node} if "ranks_per_node" in registry.get(name).options
                    else {}) for name in algorithms or registry.names()]
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
    tables = {}
    for p in process_counts:
        sub = first_ranks(comm, p)
        if sub is not None:
            rows = sweep(sub, sizes, chunks=chunks, radices=radices, time_budget=time_budget)
            if sub.rank == 0:
                tables[p] = build_table(rows, p)
            sub.Free()
        comm.Barrier()
    return tables if comm.rank == 0 else None


def on_world(experiment, *args, **kwargs):
    """Run ``experiment(MPI.COMM_WORLD, *args, **kwargs)`` (one of these functions, or any taking a
    communicator first): for ``Engines.run`` from a notebook kernel, which must not initialise MPI itself."""
    return experiment(MPI.COMM_WORLD, *args, **kwargs)
