"""The tuning table: measured best algorithm per process count and message-size range.

``gpulab tune bcast`` sweeps algorithms x chunk sizes x radices x sizes on the
ranks it runs on (``gpulab.bcast.measurement.experiments.sweep``), turns the timings into
size ranges (``build_table``) and stores them, with the fitted alpha-beta model, in one
JSON file that ``select()`` (and so ``bcast(..., algorithm="auto")``) reads:

    {"version": 1, "models": {"4": <a machine description, gpulab.machines>},
     "tables": {"4": {"p": 4, "margin": 0.1, "ranges": [{"lo": 0, "hi": 1448, "algorithm": "mpi",
                                                         "options": {}, ...}, ...], "measured": [...]}}}

The file is found at an explicit path, else $GPULAB_TUNING_TABLE, else
~/.cache/gpulab/bcast_tuning.json. Every rank reads the same file, so every
rank makes the same choice; nothing here communicates. The fit it holds is a
machine file's description: ``gpulab.machines.load(table_path(), p=p)``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

VERSION = 1
ENV = "GPULAB_TUNING_TABLE"
MARGIN = 0.10  # an algorithm must beat MPI_Bcast by this much, in the sweep and in the confirmation, to replace it


def table_path(path=None) -> Path:
    if path is not None:
        return Path(path).expanduser()
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "gpulab" / "bcast_tuning.json"


_files: dict = {}  # path -> parsed file (or None): read once per process, see load()
generation = 0  # bumped whenever this process writes or forgets a file, so select() re-decides
on_forget: list = []  # called after a bump (the fast path forgets the plans "auto" made)


def load(path=None) -> dict | None:
    """The parsed file, or None when it does not exist.

    Read once per process and then kept: every rank of a job must decide alike,
    so a file rewritten by another process mid-run is not picked up until
    ``forget()`` (``gpulab.bcast.selection.auto.reload()``) is called on every rank.
    Writes from this process (``save``/``update``) are seen at once.
    """
    key = str(table_path(path))
    if key not in _files:
        try:
            data = json.loads(Path(key).read_text())
        except FileNotFoundError:
            data = None
        if data is not None and data.get("version") != VERSION:
            raise ValueError(f"{key}: tuning file version {data.get('version')!r}, expected {VERSION}; "
                             f"re-run `gpulab tune bcast`")
        _files[key] = data
    return _files[key]


def forget() -> None:
    """Drop what was read, so the next load() reads the files again."""
    global generation
    _files.clear()
    generation += 1
    for hook in on_forget:
        hook()


def save(data: dict, path=None) -> Path:
    """Write atomically (temp file + rename), so a rank never reads half a file."""
    path = table_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(data, f, indent=1)
    os.chmod(f.name, 0o644)  # a temporary file is private; the table is meant to be shared
    os.replace(f.name, path)
    forget()
    return path


def update(path=None, *, p: int, model: dict | None = None, table: dict | None = None,
           metadata: dict | None = None) -> Path:
    """Store the model and/or table for p ranks, keeping what the file holds for other p."""
    data = load(path) or {"version": VERSION, "models": {}, "tables": {}}
    data = {**data, "models": dict(data.get("models", {})), "tables": dict(data.get("tables", {}))}
    if model is not None:
        data["models"][str(p)] = model
    if table is not None:
        data["tables"][str(p)] = table
    if metadata:
        data.setdefault("metadata", {})[str(p)] = metadata
    return save(data, path)


def lookup(data: dict | None, nbytes: int, p: int) -> dict | None:
    """The table range holding nbytes for exactly p ranks, or None."""
    return range_of((data or {}).get("tables", {}).get(str(p)), nbytes)


def range_of(table: dict | None, nbytes: int) -> dict | None:
    """The range of one process count's table (``build_table``) that holds nbytes, or None."""
    for entry in (table or {}).get("ranges", []):
        if entry["lo"] <= nbytes and (entry["hi"] is None or nbytes < entry["hi"]):
            return entry
    return None


def _key(name: str, options: dict) -> str:
    return name + json.dumps(options, sort_keys=True)


def choose_measured(rows: list[dict], margin: float = MARGIN) -> tuple[dict, str]:
    """The row to use at one size, and why: native MPI unless something beats it by the margin."""
    fastest = min(rows, key=lambda r: r["avg_us"])
    native = next((r for r in rows if r["algorithm"] == "mpi"), None)
    if native is None or fastest is native:
        return fastest, "fastest measured"
    if fastest["avg_us"] * (1 + margin) < native["avg_us"]:
        return fastest, f"{native['avg_us'] / fastest['avg_us']:.2f}x faster than MPI_Bcast"
    return native, (f"MPI_Bcast kept: {fastest['algorithm']} was only "
                    f"{native['avg_us'] / fastest['avg_us']:.2f}x faster (margin {margin:.0%})")


def build_table(rows: list[dict], p: int, margin: float = MARGIN) -> dict:
    """Size ranges from a sweep's rows: each measured size owns the range up to the geometric mid-points."""
    sizes = sorted({r["nbytes"] for r in rows})
    picks = []
    for size in sizes:
        here = [r for r in rows if r["nbytes"] == size and r.get("valid", True)]
        row, why = choose_measured(here, margin)
        picks.append({"at": size, "algorithm": row["algorithm"], "options": row["options"], "us": row["avg_us"],
                      "mpi_us": next((r["avg_us"] for r in here if r["algorithm"] == "mpi"), None), "why": why})
    ranges = []
    for i, pick in enumerate(picks):
        lo = 0 if i == 0 else int(math.isqrt(sizes[i - 1] * sizes[i]))
        hi = None if i == len(picks) - 1 else int(math.isqrt(sizes[i] * sizes[i + 1]))
        if ranges and _key(ranges[-1]["algorithm"], ranges[-1]["options"]) == _key(pick["algorithm"], pick["options"]):
            ranges[-1]["hi"] = hi  # same choice as the range before: extend it
            ranges[-1]["measured_at"].append(pick["at"])
            continue
        ranges.append({"lo": lo, "hi": hi, "algorithm": pick["algorithm"], "options": pick["options"],
                       "measured_at": [pick["at"]], "us": pick["us"], "mpi_us": pick["mpi_us"], "why": pick["why"]})
    return {"p": p, "margin": margin, "ranges": ranges,
            "measured": [{k: r[k] for k in ("algorithm", "options", "nbytes", "avg_us", "valid", "confirm_speedups")
                          if k in r} for r in rows]}
