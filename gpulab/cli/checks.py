"""Argument types shared by the commands: bad input is answered before any MPI job starts.

Each is an argparse ``type=``: it returns the parsed value or raises
``argparse.ArgumentTypeError``, which the parser turns into one line
(``gpulab bench bcast: error: argument --sizes: not a size: 'bogus' ...``) and
exit status 2, on the launching process, before ``mpiexec`` runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpulab.bcast.sizes import parse_size, size_range


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) and exit 2."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def usage_error(message: str):
    """Refuse the command line as the parser does: one line on stderr, exit status 2."""
    print(message, file=sys.stderr)
    sys.exit(2)


def typed(convert, what: str):
    def check(text):
        try:
            return convert(text)
        except (ValueError, TypeError) as err:
            raise argparse.ArgumentTypeError(str(err) if str(err) else f"not {what}: {text!r}") from None
    check.__name__ = what  # argparse names the type in some messages
    return check


def _int_at_least(low: int):
    def convert(text):
        value = int(text)
        if value < low:
            raise ValueError(f"must be >= {low}, got {value}")
        return value
    return convert


positive_int = typed(_int_at_least(1), "a positive integer")
nonnegative_int = typed(_int_at_least(0), "a non-negative integer")
radix = typed(_int_at_least(2), "a radix")


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise ValueError(f"must be > 0, got {text}")
    return value


def _nonnegative_float(text):
    value = float(text)
    if not value >= 0:
        raise ValueError(f"must be >= 0, got {text}")
    return value


positive_float = typed(_positive_float, "a positive number")
nonnegative_float = typed(_nonnegative_float, "a non-negative number")


def _size(text):
    value = parse_size(text)
    if value < 1:
        raise ValueError(f"must be at least 1 byte, got {text!r}")
    return value


size = typed(_size, "a size")  # '64K' -> 65536, at least 1 byte
sizes = typed(size_range, "a size list")  # '1K:64M' or '1K,3000,1M'


def _output_path(text: str) -> str:
    """A file path that can be written: an existing folder above it that this user may write to."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise ValueError(f"{text} is a folder, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{text} exists and is not writable")
    parent = path.parent
    while not parent.exists():  # it will be created: the first existing ancestor must be writable
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {text}: {parent} is not a writable folder")
    return text


output_path = typed(_output_path, "a writable path")
