"""What every record says about the run: what was measured, the command, the system, the date, the kit's commit.

``provenance(what, command)`` is the header docs/results/README.md asks of every record (its
``tests/docs/test_records.py`` checks them); ``metadata(ranks)`` is the fuller description a `gpulab`
job's JSON keeps beside it (MPI library, topology).

    python -m gpulab.records FILE --what "..." --command "..."   # FILE's sidecar, FILE-stem.meta.json
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from gpulab.jobsite import topology_metadata
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())
CHECKOUT = Path(__file__).resolve().parents[1]  # the kit's git checkout, where gpulab runs from one


def metadata(ranks: int, **more) -> dict:
    """Date, command line (without the internal ``--inner-out``), ranks, host, CPU and cores, Python, MPI,
    what the caller adds (``more``: a broadcast's entry, "c" or "python"), topology.

    Call it inside the MPI job (it asks the MPI library for its version).
    """
    return {"date": utc_now(), "command": " ".join(["gpulab", *_args()]), "ranks": ranks, "host": platform.node(),
            "cpu": platform.processor() or platform.machine(), "cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "mpi": " ".join(MPI.Get_library_version().split()[:3]),
            **more, **topology_metadata()}


def provenance(what: str, command: str | None = None, *, date: str | None = None) -> dict:
    """The header of a record: ``what`` was measured (one line: of a docstring, its first paragraph), the exact
    ``command`` (default: this process's), the system it ran on, the date (UTC) and the kit's commit."""
    return {"what": " ".join(what.split("\n\n")[0].split()), "command": command or command_line(), "system": system(),
            "date": date or utc_now(), "commit": kit_commit()}


def stamp(record: dict | os.PathLike) -> str:
    """When a record (its JSON, or its path) was taken and with which kit ("YYYY-MM-DD HH:MM UTC, kit
    <commit>"), what a notebook prints beside a recorded measurement."""
    if not isinstance(record, dict):  # a path: its sidecar STEM.meta.json holds the header where there is one
        path = Path(record)
        sidecar = path.with_name(path.name.split(".")[0] + ".meta.json")
        record = {"provenance": json.loads(sidecar.read_text())} if sidecar.exists() else json.loads(path.read_text())
        if not isinstance(record, dict):
            record = {}
    header = record.get("provenance") or {}
    date = header.get("date") or record.get("date") or "undated"
    return f"{date}, kit {header.get('commit') or record.get('commit') or 'unknown'}"


def command_line() -> str:
    """This process's command as typed: ``gpulab ...`` for the CLI, else ``python SCRIPT ...``."""
    script = Path(sys.argv[0])
    if script.name in ("__main__.py", "gpulab"):
        return " ".join(["gpulab", *_args()])
    where = script.resolve()
    shown = where.relative_to(CHECKOUT) if where.is_relative_to(CHECKOUT) else where
    return " ".join(["python", str(shown), *_args()])


def _args() -> list[str]:
    """This process's arguments without the internal ones (a job's ``--inner-out``, the tuner's temporary files)."""
    return [a for a in sys.argv[1:] if not a.startswith("--inner-out") and "gpulab-tune-" not in a]


def system() -> dict:
    """Cores this process may use, CPU model, OS, Python, the MPI library if one is loaded, the load average."""
    out = {"cores": len(os.sched_getaffinity(0)), "cpu": _cpu_model(), "os": platform.platform(),
           "python": platform.python_version(), "load": [round(x, 2) for x in os.getloadavg()]}
    if "mpi4py.MPI" in sys.modules:  # never starts MPI: a record written outside a job names no library
        out["mpi"] = " ".join(MPI.Get_library_version().split()[:3])
    return out


def kit_commit() -> str:
    """``git rev-parse --short HEAD`` of the checkout gpulab runs from, ``+dirty`` with uncommitted changes;
    an installed gpulab (no checkout) says its version."""
    def git(*argv):
        return subprocess.run(["git", "-C", str(CHECKOUT), *argv], capture_output=True, text=True, timeout=30)

    head = None
    if (CHECKOUT / ".git").exists():  # not an installed gpulab inside some other repository
        try:
            head = git("rev-parse", "--short", "HEAD")
            dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            head = None
    if head is None or head.returncode:
        from gpulab import __version__

        return f"none: an installed gpulab {__version__}"
    return head.stdout.strip() + ("+dirty" if dirty else "")


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_sidecar(path, what: str, command: str) -> Path:
    """``STEM.meta.json`` beside ``path``: the header of a record whose own format takes no extra key (a
    fitted machine, a tuning table, MPICH's selection file, a list, text). Dated by the file's last change."""
    path = Path(path)
    changed = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc)
    sidecar = path.with_name(path.name.split(".")[0] + ".meta.json")
    sidecar.write_text(json.dumps(provenance(what, command, date=changed.isoformat(timespec="seconds")),
                                  indent=1) + "\n")
    return sidecar


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=write_sidecar.__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--what", required=True, help="what the record measured, one line")
    parser.add_argument("--command", required=True, help="the exact command that wrote it")
    args = parser.parse_args()
    print(write_sidecar(args.file, args.what, args.command))
