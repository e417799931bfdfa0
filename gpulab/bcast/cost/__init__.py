"""What a broadcast costs: the alpha-beta model, and what MPICH's own MPI_Bcast runs.

hockney (``Machine``, ``predict``, ``best_chunk``: the cost model), placement (each
message at its own link when ranks sit on several nodes), mpich (MPICH's rules for
MPI_Bcast on a layout), profiles (machines a learner cannot access), link_floor (a fit
held to its emulated link's rate).
"""
