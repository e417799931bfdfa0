"""The recorded measurements the scoreboard and the notebooks read: docs/results/*.json of this checkout, never
numbers typed in code.

An installed wheel carries the records in ``SHIPPED``, and nothing else of docs/, as gpulab/recorded_results
(pyproject's force-include lists the same files; tests/docs/test_wheel.py checks both).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpulab.scoreboard.claim import NotMeasured
from gpulab.scoreboard.evidence import rounds_of

ENV_RESULTS = "GPULAB_RESULTS"  # another folder of records (a course's own runs); default: this checkout's docs/results
PACKAGE = Path(__file__).resolve().parents[1]
SHIPPED = (  # every record read at run time: by the scoreboard's claims and by the notebooks (00, 02, 03, 05, 06, 07)
    "scoreboard_quick.json",
    "emulated_crossover.json", "emulated_chunks.json", "emulated_placement.json", "emulated_auto.json",
    "emulated_training_4x1.json", "emulated_engine_100mbit.json",
    "engine_machine_p4.json", "engine_grid_p4.json", "engine_grid_p8.json", "engine_overlap_p4.json",
    "bcast_accuracy.json", "bcast_tuning.json",
)


def results_dir() -> Path:
    """$GPULAB_RESULTS, else the checkout's docs/results (editable install), else the wheel's copy."""
    if os.environ.get(ENV_RESULTS):
        return Path(os.environ[ENV_RESULTS])
    checkout = PACKAGE.parent / "docs" / "results"
    return checkout if checkout.is_dir() else PACKAGE / "recorded_results"


def path(name: str) -> Path:
    """docs/results/NAME (or the wheel's copy); ``NotMeasured`` when this checkout has no such record."""
    found = results_dir() / name
    if not found.exists():
        raise NotMeasured(f"no recorded run: {found} is missing")
    return found


def read(name: str):
    """The JSON of docs/results/NAME; ``NotMeasured`` when this checkout has no such record."""
    return json.loads(path(name).read_text())


def source(name: str) -> str:
    return f"docs/results/{name}"


def samples_by(records: list[dict], key) -> dict:
    """{(key(record), nbytes): [max_us of each round]}: the slowest rank's mean time, which the model predicts
    (a record of one run: one sample)."""
    return {(key(r), r["nbytes"]): rounds_of(r, "max_us") for r in records}
