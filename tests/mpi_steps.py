"""``step("what")`` marks progress inside an MPI test so a timeout can say where each rank was."""

from pathlib import Path

_log = None


def open_log(path: Path) -> None:
    global _log
    _log = open(path, "a", buffering=1)  # line-buffered: survives SIGKILL up to the last step


def step(what: str) -> None:
    if _log is not None:
        _log.write(what + "\n")
