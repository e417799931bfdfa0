"""The notebook runner is strict: a failing %%px cell and a hanging cell both fail, and nothing leaks.

These run the deliberately broken notebooks in tests/notebooks/data.
"""

import time

import pytest

from gpulab import host
from tests.cluster.procs import stop_leftovers
from tests.notebooks.nbrun import RAISES, CellExecutionError, CellTimeoutError, execute

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
    # the engines' cell watchdog (cell_timeout=5, stretched for the machine) ends them; %%px then fails, and
    # gpulab shows where in one paragraph
    start, limit = time.monotonic(), host.time_limit(5, 2)
    with pytest.raises(CellExecutionError) as failure:
        execute(DATA / "watchdog_px.ipynb", ipython_dir=ipython_dir, cell_timeout=60 + limit)
    assert time.monotonic() - start < 45 + limit
    shown = str(failure.value).split("MPI.COMM_WORLD.barrier()\n------------------")[1]  # after the cell's source
    assert "a %%px cell on 2 engines did not finish within" in shown
    assert "Engine 0 was at cell line 3: MPI.COMM_WORLD.barrier()." in shown and "engines.restart()" in shown
    assert not traceback_lines(shown.splitlines())
    assert stop_leftovers(ipython_dir) == []


def traceback_lines(lines: list[str]) -> list[str]:
    """The lines of a Python or IPython traceback among ``lines``."""
    return [line for line in lines if any(mark in line for mark in ("Traceback", 'File "', "Cell In[", "---->"))]


def test_a_limit_that_fires_shows_one_paragraph_not_a_traceback(ipython_dir, tmp_path):
    import nbformat

    code = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [code("from gpulab.cluster import start_engines\n\nengines = start_engines(2)"),
                code("import time\n\nengines.run(time.sleep, 60, timeout=0.5, what='a slow job')",
                     metadata={"tags": [RAISES]}),  # at most 0.5 s x 20 on the busiest machine
                code("engines.stop()")]
    nbformat.write(nb, tmp_path / "slow_job.ipynb")
    ran = execute(tmp_path / "slow_job.ipynb", ipython_dir=ipython_dir, cell_timeout=60)
    errors = [o for o in ran.cells[1].outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ["EngineTimeout"]
    shown = errors[0].traceback  # what the notebook shows: the paragraph, wrapped
    assert " ".join(shown).startswith("EngineTimeout: a slow job on 2 engines did not finish within")
    assert "now load" in " ".join(shown) and "Try:" in " ".join(shown)
    assert not traceback_lines(shown)
    assert stop_leftovers(ipython_dir) == []


def test_nbval_convention_is_strict_too(tmp_path):
    # `pytest -p tests.notebooks.nbval_strict --nbval-lax` fails a cell whose %%px magic failed (plain nbval
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
    shutil.copy(DATA.parent / "nbval_strict.py", tmp_path / "conftest.py")  # loaded as -p would load it
    strict = run()
    assert strict.returncode != 0 and "UsageError" in strict.stdout, strict.stdout[-2000:]
