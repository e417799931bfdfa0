"""Test beds: what the tests start or install on this machine as root (a private Slurm, Debian packages).

They live with the tests, not in gpulab: a learner's kernel or a user's script never starts a Slurm or
runs apt-get. ``slurm`` is usable by people too, from a clone: ``python -m tests.testbeds.slurm up``.
"""
