"""The notebook runner is strict: a failing %%px cell and a hanging cell both fail, and nothing leaks.

These run the deliberately broken notebooks in tests/notebooks/data.
"""

import time

import pytest

from tests.cluster.procs import stop_leftovers
from tests.notebooks.nbrun import CellExecutionError, CellTimeoutError, execute

DATA = __import__("pathlib").Path(__file__).parent / "data"


def test_failed_px_magic_fails_the_notebook(ipython_dir):
    # the UsageError is only in the reply status and a stderr line, not an error output
    with pytest.raises(CellExecutionError, match="UsageError"):
        execute(DATA / "broken_px.ipynb", ipython_dir=ipython_dir, cell_timeout=60)
    # the kernel was shut down mid-notebook: the cluster's reaper must stop the engines
    assert stop_leftovers(ipython_dir) == []


def test_hanging_px_cell_times_out_and_is_cleaned_up(ipython_dir):
    start = time.monotonic()
    with pytest.raises(CellTimeoutError, match=r"(?s)timed out.*MPI\.COMM_WORLD\.barrier\(\)"):
        # the hanging cell gets 5 s; the others (a kernel and two engines starting on busy cores) 60
        execute(DATA / "hang_px.ipynb", ipython_dir=ipython_dir,
                cell_timeout=lambda cell: 5 if cell.source.startswith("%%px") else 60)
    assert time.monotonic() - start < 90
    # the kernel, stuck in %%px, had to be killed; gpulab's reaper must still stop mpiexec and the engines
    assert stop_leftovers(ipython_dir) == []


def test_px_cell_stuck_in_a_collective_fails_fast_with_the_stuck_line(ipython_dir):
    # the engines' cell watchdog (cell_timeout=5) ends them; %%px then fails, and gpulab shows where
    start = time.monotonic()
    with pytest.raises(CellExecutionError) as failure:
        execute(DATA / "watchdog_px.ipynb", ipython_dir=ipython_dir, cell_timeout=60)
    assert time.monotonic() - start < 50
    assert "engine0: %%px cell stopped by its watchdog after 5 s, stuck at cell line 3: " \
           "MPI.COMM_WORLD.barrier()" in str(failure.value)
    assert stop_leftovers(ipython_dir) == []


def test_nbval_convention_is_strict_too(tmp_path):
    # `pytest --nbval-lax` with notebooks/conftest.py fails a cell whose %%px magic failed (plain nbval
    # 0.11 passes it). No engines needed: the UsageError comes from the magic not being on the first line.
    import shutil
    import subprocess
    import sys

    import nbformat

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("# comment\n%%px\nprint(x)")]
    nbformat.write(nb, tmp_path / "broken.ipynb")
    run = lambda: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-q", "broken.ipynb"],
        cwd=tmp_path, capture_output=True, text=True, timeout=180)
    shutil.copy(DATA.parents[2] / "notebooks" / "conftest.py", tmp_path / "conftest.py")
    strict = run()
    assert strict.returncode != 0 and "UsageError" in strict.stdout, strict.stdout[-2000:]
