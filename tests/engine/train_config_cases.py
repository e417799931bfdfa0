"""Rank-side runs of ``train(TrainConfig(...))`` built in Python, no command line (run by test_train_config.py)."""

from __future__ import annotations

import json
from pathlib import Path

from gpulab.engine.training.config import TrainConfig
from gpulab.engine.training.loop import train
from tests.mpi_steps import step

TINY = dict(batch_size=4, block_size=16, n_layer=1, n_head=2, n_embd=16, lr=1e-2, warmup=1, sample=0,
            eval_batches=1, progress_bar=False)


def train_steps(comm, out: str, steps: int, shape: list, resume: str | None = None) -> dict:
    """Train ``steps`` steps on ``shape``; every rank returns its exit code, rank 0 the loss log too."""
    config = TrainConfig(shape=tuple(shape), steps=steps, out=out, resume=resume, **TINY)
    step(f"training {steps} steps on {config.shape}")
    code = train(config)
    log = Path(out).with_suffix(".loss.jsonl")
    return {"code": code, "log": [json.loads(line) for line in log.read_text().splitlines()] if comm.rank == 0
            else None}
