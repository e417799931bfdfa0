"""Measuring broadcasts on ranks, and what is made of the measurements.

measure (OSU-style timing of one algorithm), rounds (a sweep of them in interleaved
rounds, until each point's interval is narrow or the time is up), pingpong_fit (the machine's alpha-beta
fit), experiments (what ``gpulab tune`` measures: sweeps, confirmations, accuracy),
native_variants (MPICH's own MPI_Bcast algorithms, forced one at a time), export (a
tuning table as MPICH's or Open MPI's own configuration), report and results (tables,
a point's median over rounds, crossovers), nccl (NCCL's broadcast, for comparison).
"""
