"""The broadcast algorithms: each one's schedule builder, its critical path, and the registry.

tree_shapes (the trees), trees (linear, binomial, k-nomial), pipelined (chain, binary
and split binary trees), scatter_allgather (recursive doubling, ring), hierarchical
(two levels), native (MPI's own MPI_Bcast), critical_path (the messages a plan charges,
read from the schedules), registry (one record per algorithm: what runs, how it is
priced and tuned; everything above loops over it).
"""
