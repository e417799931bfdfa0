"""What gpulab runs on each engine besides GPU pinning (``gpulab.launch.pin_gpu``): the watchdog that
records where a task hangs.

These functions are shipped to the engines by ``Engines.run``; they import MPI
there, never in the notebook kernel.
"""

from __future__ import annotations

import faulthandler
import json
import re
from pathlib import Path

from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())


def watched(fn, args, kwargs, timeout, what, dump_file):
    """Run fn; if it still runs after timeout s, write its stack to dump_file.

    faulthandler's watchdog is a C thread, so it fires even while the main thread
    is blocked inside an MPI call, which is exactly when we need the stack.
    """
    with open(dump_file, "w") as f:
        f.write(f"{what}\n")
        f.flush()
        faulthandler.dump_traceback_later(timeout, file=f)
        try:
            return fn(*args, **kwargs)
        finally:
            faulthandler.cancel_dump_traceback_later()


def stuck_at(dump_file, *, below: str = "in watched", cell: list[str] | None = None, frames: int = 3) -> str:
    """Where a faulthandler dump says the task was: its innermost frames above the `below` frame.

    Frames come innermost first, as "File ..., line N in f"; a frame in the
    notebook cell itself is shown with that line of the cell's source.
    """
    text = Path(dump_file).read_text() if Path(dump_file).exists() else ""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
    task = [b for b in blocks if below in b]  # the thread running the task, not the kernel's helpers
    lines = [ln.strip() for ln in (task[0] if task else "").splitlines() if ln.strip().startswith("File")]
    inner = lines[:next((i for i, ln in enumerate(lines) if ln.endswith(below)), len(lines))]
    if cell:
        outer = re.match(r'File ".*", line (\d+) in <module>', inner[-1]) if inner else None
        if outer and int(outer.group(1)) <= len(cell):
            inner[-1] = f"cell line {outer.group(1)}: {cell[int(outer.group(1)) - 1].strip()}"
    if len(inner) > frames:  # the blocking call, and the outermost frame: the code the user ran
        inner = inner[:frames - 1] + ["..."] + inner[-1:]
    return " <- ".join(inner) if inner else "no stack recorded"


def arm_cell_watchdog(timeout: float, dump_dir: str) -> None:
    """Bound every %%px cell on this engine: past timeout s, write the stack to dump_dir and exit.

    %%px itself waits forever, so a cell stuck in a collective would hang the
    notebook. Exiting makes mpiexec end the job, and the notebook's %%px then
    fails at once with EngineError; ``stopped_cells`` says where each engine was.
    Tasks sent by ``Engines.run`` are not cells and have their own bound.
    """
    from IPython import get_ipython  # on the engine (see the module docstring)

    shell = get_ipython()  # the engine's own shell: runs %%px cells, fires pre/post_execute
    dump = open(Path(dump_dir, f"engine{MPI.COMM_WORLD.Get_rank()}-px.txt"), "w")  # noqa: SIM115 (fd used later)

    def header(cell: list[str]):
        dump.seek(0)
        dump.truncate()
        dump.write(json.dumps({"timeout": timeout, "cell": cell}) + "\n")
        dump.flush()  # faulthandler writes after it, at the file's offset

    def arm():  # pre_execute fires for every cell, silent ones included
        header([])
        faulthandler.dump_traceback_later(timeout, exit=True, file=dump)

    shell.events.register("pre_execute", arm)
    shell.events.register("pre_run_cell", lambda info: header(info.raw_cell.splitlines()))  # not when silent
    shell.events.register("post_execute", faulthandler.cancel_dump_traceback_later)


def stopped_cells(dump_dir) -> dict[int, str]:
    """rank -> where its %%px cell was when the cell's watchdog stopped the engine ('cell line 3: comm.barrier()'),
    for every engine whose watchdog fired."""
    stopped = {}
    for dump in Path(dump_dir).glob("engine*-px.txt"):
        text = dump.read_text()
        if "Timeout (" in text:  # faulthandler's header: the watchdog fired
            head = json.loads(text.splitlines()[0])
            rank = int(dump.stem.removeprefix("engine").removesuffix("-px"))
            stopped[rank] = stuck_at(dump, below="in run_code", cell=head["cell"])
    return stopped
