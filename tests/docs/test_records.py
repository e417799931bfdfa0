"""The records in docs/results: each says what it measured, the exact command, the system it ran on, the date
(UTC) and the kit's commit (the schema: docs/results/README.md), and each is read by the kit or cited by a guide."""

import json
import os
import re
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from gpulab.records import provenance, write_sidecar

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
REQUIRED = ("what", "command", "system", "date", "commit")
OPTIONAL = ("keep_because", "note")
DATE = re.compile(r"\d{4}-\d\d-\d\d(T\d\d:\d\d:\d\d(\+00:00|Z)| \d\d:\d\d UTC)")
COMMIT = re.compile(r"[0-9a-f]{7,40}(\+dirty)?")
SIDECAR = ".meta.json"


def stem(path: Path) -> str:
    return path.name.split(".")[0]


def records() -> list[Path]:
    """What docs/results holds besides its README, the sidecars and the plots: a JSON, a text file, a folder of
    one run's outputs, or a CSV (the same run as the JSON of its stem, which carries the header)."""
    out = []
    for path in sorted(RESULTS.iterdir()):
        if path.name == "README.md" or path.name.endswith(SIDECAR) or path.suffix == ".png":
            continue
        if path.suffix == ".csv" and (RESULTS / f"{stem(path)}.json").exists():
            continue
        out.append(path)
    return out


def header(path: Path) -> dict | None:
    """The record's header: its sidecar STEM.meta.json, else the JSON object's ``provenance``."""
    sidecar = RESULTS / f"{stem(path)}{SIDECAR}"
    if sidecar.exists():
        return json.loads(sidecar.read_text())
    if path.suffix == ".json" and path.is_file():
        data = json.loads(path.read_text())
        if isinstance(data, dict):
            return data.get("provenance")
    return None


def problems(h: dict) -> list[str]:
    """What a header lacks or gets wrong (empty: it follows the schema)."""
    found = [f"no {key}" for key in REQUIRED if key not in h]
    found += [f"unknown key {key}" for key in h if key not in REQUIRED + OPTIONAL]
    for key in ("what", "command", *(k for k in OPTIONAL if k in h)):
        if key in h and not (isinstance(h[key], str) and h[key].strip() and "\n" not in h[key]):
            found.append(f"{key} must be one non-empty line")
    system = h.get("system")
    if not (isinstance(system, dict) and isinstance(system.get("cores"), int) and system["cores"] > 0):
        found.append("system must say at least its cores")
    if not (isinstance(h.get("date"), str) and DATE.fullmatch(h["date"])):
        found.append(f"date {h.get('date')!r} is not a UTC date and time")
    if not (isinstance(h.get("commit"), str) and COMMIT.fullmatch(h["commit"])):
        found.append(f"commit {h.get('commit')!r} is not a git commit")
    return found


@pytest.mark.parametrize("path", records(), ids=lambda p: p.name)
def test_every_record_says_what_how_where_when_and_at_which_commit(path):
    h = header(path)
    assert h is not None, f"{path.name}: no header (a 'provenance' object, or {stem(path)}{SIDECAR} beside it)"
    assert not problems(h), f"{path.name}: {problems(h)}"


def test_what_the_kit_writes_is_a_header_the_schema_takes():
    """``gpulab.records.provenance``, which the commands and benchmarks put in every new record."""
    h = provenance("a one-line description", "gpulab bench bcast -n 2")
    assert not problems(h), problems(h)
    wrong = problems({**h, "what": "two\nlines", "date": "yesterday"})
    assert wrong == ["what must be one non-empty line", "date 'yesterday' is not a UTC date and time"]


def test_the_scoreboard_record_carries_the_header():
    from gpulab.scoreboard.board import record

    h = record([], quick=True, seconds=1.0)["provenance"]
    assert not problems(h) and "scoreboard" in h["what"]


@pytest.mark.timeout(180)
def test_a_gpulab_bench_record_carries_the_header(tmp_path):
    """`gpulab bench bcast --json` on 2 ranks (the job's own timeout names a rank that hangs)."""
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, "-m", "gpulab.cli", "bench", "bcast", "-n", "2", "--algorithms", "mpi",
                           "--sizes", "1K", "--iters", "5", "--warmup", "1", "--quiet", "--json", str(out)],
                          capture_output=True, text=True, timeout=150, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    h = json.loads(out.read_text())["provenance"]
    assert not problems(h), problems(h)
    assert h["command"].startswith("gpulab bench bcast -n 2") and h["system"]["mpi"].startswith("MPICH")


def test_a_record_in_a_fixed_format_gets_its_header_beside_it(tmp_path):
    """``python -m gpulab.records FILE --what ... --command ...``: a fitted machine, a tuning table, a list."""
    record = tmp_path / "fit_p2.json"
    record.write_text("[1, 2]")
    sidecar = write_sidecar(record, "a fit on 2 ranks", "gpulab model fit -n 2 --out fit_p2.json")
    assert sidecar == tmp_path / f"fit_p2{SIDECAR}"
    h = json.loads(sidecar.read_text())
    assert not problems(h) and h["command"] == "gpulab model fit -n 2 --out fit_p2.json"


def test_every_sidecar_belongs_to_a_record():
    names = {p.name for p in RESULTS.iterdir()}
    stems = {stem(p) for p in records()}
    orphans = [p.name for p in RESULTS.glob(f"*{SIDECAR}") if p.name.removesuffix(SIDECAR) not in stems | names]
    assert not orphans


def corpus(*, guides_only: bool = False) -> str:
    """The text that reads or cites records: the guides and README, and (unless ``guides_only``) the code,
    notebooks, benchmarks, scripts and tests (these tests and the records' own README left out)."""
    guides = [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md") if p != RESULTS / "README.md")]
    code = [*(ROOT / "gpulab").rglob("*.py"), *(ROOT / "notebooks_src").glob("*.py"),
            *(ROOT / "benchmarks").glob("*.py"),
            *(p for p in (ROOT / "scripts").iterdir() if p.is_file()),
            *(p for p in (ROOT / "tests").rglob("*.py") if "tests/docs" not in p.as_posix())]
    return "\n".join(p.read_text() for p in (guides if guides_only else guides + code))


def globs_in(text: str) -> set[str]:
    """The patterns ``text`` names records by (``engine_accuracy_*_run*.json``): globs whose fixed start is at
    least 6 characters, so that ``*.json`` names nothing."""
    return {m for m in re.findall(r"[\w.*-]*\*[\w.*-]*", text) if len(m.split("*")[0]) >= 6}


def cited(name: str, text: str, globs: set[str]) -> bool:
    """``name`` appears in ``text``, or one of its ``globs`` matches it."""
    return name in text or any(fnmatch(name, g) for g in globs)


def test_every_record_is_read_or_cited():
    """docs/results holds what the kit reads (the scoreboard, the notebooks, a test, a benchmark's report) or a
    guide cites: a record nothing names is an exploration, and lives in git history."""
    text = corpus()
    globs = globs_in(text)
    assert not [p.name for p in records() if not cited(p.name, text, globs)]


def test_every_plot_is_shown_or_cited_by_a_guide():
    """A plot is in a guide, or beside a record of its stem that a guide cites (a series' plots go with it)."""
    text = corpus(guides_only=True)
    globs = globs_in(text)
    assert not [p.name for p in RESULTS.glob("*.png")
                if not (cited(p.name, text, globs) or cited(f"{stem(p)}.json", text, globs))]


def test_records_of_repeated_runs_are_numbered_only_within_one_series():
    """A name says what was measured, not when or how often it was tried: ``_runK`` only for the K-th run of
    one command in a series a guide tabulates (docs/engine_model_accuracy.md), no dates, no "before"."""
    names = [p.name for p in RESULTS.iterdir()]
    assert not [n for n in names if re.search(r"\d{4}-\d\d-\d\d|before|earlier|explored|again", n)]
    assert not [n for n in names if re.search(r"_run\d", n) and not n.startswith("engine_accuracy_")]


def test_a_notebook_can_say_when_and_with_which_kit_a_record_was_taken():
    """``gpulab.records.stamp``, what notebooks print beside a recorded measurement: the header's date and commit."""
    from gpulab.records import stamp

    stamped = 0
    for path in records():
        h = header(path)
        if path.suffix == ".json" and path.is_file() and h:
            assert stamp(path) == f"{h['date']}, kit {h['commit']}", path.name
            stamped += 1
    assert stamped >= 5
