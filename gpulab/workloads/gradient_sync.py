"""The cost model's price of data-parallel gradient synchronisation as a reduce followed by a broadcast.

CNTK, the framework of the broadcast paper's training result (Awan et al. 2018), sums gradients with an
allreduce (its SimpleDistGradAggregator calls MPI_Allreduce or NCCL's all-reduce); the miniature *assumes*
the MPI library runs that allreduce as a reduce followed by a broadcast, so that a better broadcast shortens
every iteration. The measured version is ``gpulab.workloads.reduce_bcast_training``.

    from gpulab.bcast.cost.profiles import profile
    predicted_sync(553 << 20, 128, profile("kesch"))   # {"reduce_ms", "mpi_bcast_ms", "tuned_bcast_ms", ...}
"""

from __future__ import annotations

from gpulab.bcast.cost.hockney import Machine, choose, mpich_choice, predict


def predicted_sync(nbytes: int, p: int, machine: Machine) -> dict:
    """The cost model's reduce + broadcast of ``nbytes`` over ``p`` ranks: MPI_Bcast's choice against the
    model's best broadcast (``gpulab.bcast.cost.hockney.choose``), times in ms.

    The reduce is priced as MPICH's long-message reduce (reduce-scatter then gather: the messages of
    scatter + ring allgather, the additions left out); it is the same in both. Compute is not modelled.
    """
    mpi_name = mpich_choice(nbytes, p)
    tuned_name, tuned_options, ranking = choose(nbytes, p, machine)
    reduce_s, mpi_s, tuned_s = predict("scatter_allgather_ring", nbytes, p, machine), \
        predict(mpi_name, nbytes, p, machine), ranking[0][0]
    return {"p": p, "nbytes": nbytes, "reduce_ms": reduce_s * 1e3, "mpi_algorithm": mpi_name,
            "mpi_bcast_ms": mpi_s * 1e3, "tuned_algorithm": tuned_name, "tuned_options": tuned_options,
            "tuned_bcast_ms": tuned_s * 1e3, "sync_saving": 1 - (reduce_s + tuned_s) / (reduce_s + mpi_s)}
