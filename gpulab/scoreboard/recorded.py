"""The recorded measurements the scoreboard reads: docs/results/*.json of this checkout, never numbers typed in code."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpulab.scoreboard.claim import NotMeasured

ENV_RESULTS = "GPULAB_RESULTS"  # another folder of records (a course's own runs); default: this checkout's docs/results


def results_dir() -> Path:
    return Path(os.environ.get(ENV_RESULTS) or Path(__file__).resolve().parents[2] / "docs" / "results")


def read(name: str):
    """The JSON of docs/results/NAME; ``NotMeasured`` when this checkout has no such record."""
    path = results_dir() / name
    if not path.exists():
        raise NotMeasured(f"no recorded run: {path} is missing")
    return json.loads(path.read_text())


def source(name: str) -> str:
    return f"docs/results/{name}"


def times_by(records: list[dict], key) -> dict:
    """{(key(record), nbytes): max_us}: the slowest rank's mean time, which the model predicts."""
    return {(key(r), r["nbytes"]): r["max_us"] for r in records}
