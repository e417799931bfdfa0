"""The wheel is light: the package and the records it reads at run time, nothing else of docs/. Installed from it
(not editable, as a class hub's user environment installs it), the kit reads the recorded board and runs
notebook 00."""

import ast
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from gpulab.scoreboard import recorded
from gpulab.scoreboard.board import all_claims
from tests.notebooks.nbrun import NOTEBOOKS, SOURCES, execute, what_went_wrong
from tests.notebooks.parameters import PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
LIMIT = 1 << 20  # bytes, compressed (docs/results/README.md)
INSIDE = "gpulab/recorded_results/"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return next(out.glob("gpulab-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel unpacked as pip installs it, into a folder of its own (its dependencies come from this
    environment: what is tested is the package, not pip)."""
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def installed_env(site: Path) -> dict:
    """An environment in which ``import gpulab`` finds the installed copy, not this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("GPULAB_RESULTS", "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(site)}


def test_the_wheel_is_under_a_megabyte_and_carries_exactly_the_shipped_records(wheel):
    assert wheel.stat().st_size < LIMIT, f"{wheel.name}: {wheel.stat().st_size / 1e6:.2f} MB compressed"
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.removeprefix(INSIDE) for n in names if n.startswith(INSIDE))
    assert shipped == sorted(recorded.SHIPPED)
    assert not [n for n in names if n.startswith("docs/") or n.endswith((".png", ".ipynb", ".meta.json"))]


def test_pyproject_forces_in_the_shipped_records_and_nothing_else():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    forced = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "force-include"]
    assert forced == {f"docs/results/{n}": f"{INSIDE}{n}" for n in recorded.SHIPPED}
    assert all((RESULTS / n).is_file() for n in recorded.SHIPPED)


def test_every_claims_record_is_shipped(tmp_path, monkeypatch):
    """The scoreboard's recorded column from the shipped records alone: no claim lacks its record."""
    for name in recorded.SHIPPED:
        (tmp_path / name).write_bytes((RESULTS / name).read_bytes())
    monkeypatch.setenv(recorded.ENV_RESULTS, str(tmp_path))
    for claim in all_claims().values():
        if not claim.gpu:
            assert claim.recorded()["value"] is not None, claim.id


def records_named_in(path: Path) -> set[str]:
    """The records a source file names in its string literals (a glob such as ``emulated_engine_*.json``
    names every record it matches; ``*.json`` in a sentence names none), those that exist in docs/results."""
    literals = [n.value for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    names = set()
    for text in literals:
        for token in re.findall(r"[\w*.-]+\.json", text):
            if len(token.split("*")[0]) >= 6:
                names |= {p.name for p in RESULTS.glob(token.split("/")[-1]) if p.is_file()}
    return names


def test_what_the_notebooks_and_the_scoreboard_read_is_shipped():
    """Every record a notebook or the scoreboard's code names is in the wheel; the notebooks read records
    only through ``results_dir()`` (a path into docs/ would miss the installed copy)."""
    sources = [*SOURCES.glob("*.py"), *(ROOT / "gpulab" / "scoreboard").glob("*.py")]
    read = set().union(*(records_named_in(p) for p in sources))
    assert read and read <= set(recorded.SHIPPED), sorted(read - set(recorded.SHIPPED))
    assert not [p.name for p in SOURCES.glob("*.py") if re.search(r"""["']\.\./docs/results""", p.read_text())]


def test_an_installed_wheel_reads_its_own_records(installed, tmp_path):
    code = ("import json\nfrom gpulab.scoreboard import recorded\nfrom gpulab.scoreboard.board import all_claims\n"
            "print(json.dumps({'dir': str(recorded.results_dir()), 'claims': {c.id: c.recorded()['text'] for c in "
            "all_claims().values() if not c.gpu}}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=installed_env(installed))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["dir"] == str(installed / "gpulab" / "recorded_results")
    assert out["claims"] and all(out["claims"].values())


@pytest.mark.timeout(300)
def test_an_installed_wheel_runs_the_quick_scoreboard_far_enough_to_show_the_records(installed, tmp_path):
    """`gpulab scoreboard --quick` as the hub's learner types it, one claim: its recorded row is read from the
    wheel's copy (the live rows are tests/scoreboard's)."""
    done = subprocess.run([sys.executable, "-m", "gpulab.cli", "scoreboard", "--quick", "--claims", "c"],
                          capture_output=True, text=True, timeout=280, cwd=tmp_path, env=installed_env(installed))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    recorded_line = next(line for line in done.stdout.splitlines() if line.strip().startswith("recorded:"))
    assert "docs/results/emulated_placement.json" in recorded_line and "- (" not in recorded_line, recorded_line


@pytest.mark.timeout(600)
def test_an_installed_wheel_runs_notebook_00(installed, tmp_path, ipython_dir, monkeypatch):
    """Notebook 00 (its recorded scoreboard included) from a folder with no checkout beside it, its kernel
    and engines importing the installed gpulab; a last cell says which gpulab and which records it read."""
    nb = nbformat.read(NOTEBOOKS / "00_start_here.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import gpulab\nfrom gpulab.scoreboard.recorded import results_dir\n"
                                              "print('USED', gpulab.__file__, results_dir())"))
    notebook = tmp_path / "course" / "00_start_here.ipynb"
    notebook.parent.mkdir()
    nbformat.write(nb, notebook)
    for key, value in installed_env(installed).items():
        monkeypatch.setenv(key, value)
    nb = execute(notebook, PARAMETERS["00_start_here"], ipython_dir=ipython_dir, cell_timeout=180)
    assert not what_went_wrong(nb)
    used = "".join(o.get("text", "") for o in nb.cells[-1].outputs).split()
    assert used[1:] == [str(installed / "gpulab" / "__init__.py"), str(installed / "gpulab" / "recorded_results")]
