"""``gpulab train`` on the ranks of a job whose rank 1 raises at step 3 (tests/engine/test_train_errors.py)."""

import sys

from mpi4py import MPI

from gpulab.cli import main
from gpulab.engine.training import loop

if MPI.COMM_WORLD.rank == 1:
    real_step = loop.train_step

    def train_step(gpt, opt, batch, **kwargs):
        if opt.t == 2:
            raise RuntimeError("planted failure at step 3")
        return real_step(gpt, opt, batch, **kwargs)

    loop.train_step = train_step

sys.exit(main(["train", *sys.argv[1:]]))
