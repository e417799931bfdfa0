"""The recorded measurements the scoreboard reads: docs/results/*.json of this checkout, never numbers typed in code.

An installed wheel carries the same folder as gpulab/recorded_results (pyproject's force-include).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpulab.scoreboard.claim import NotMeasured

ENV_RESULTS = "GPULAB_RESULTS"  # another folder of records (a course's own runs); default: this checkout's docs/results
PACKAGE = Path(__file__).resolve().parents[1]


def results_dir() -> Path:
    """$GPULAB_RESULTS, else the checkout's docs/results (editable install), else the wheel's copy."""
    if os.environ.get(ENV_RESULTS):
        return Path(os.environ[ENV_RESULTS])
    checkout = PACKAGE.parent / "docs" / "results"
    return checkout if checkout.is_dir() else PACKAGE / "recorded_results"


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
