"""Compiling the broadcast's C entry (``fastpath.c``): at install time, or by hand after switching MPI.

    python -m gpulab.bcast.runtime.build                  # beside fastpath.c, where fastpath loads it
    python -m gpulab.bcast.runtime.build --target DIR/_fastpath.so --mpicc mpicc.openmpi

``pip install`` runs ``build`` through the build hook (hatch_build.py); where it fails (no compiler,
no MPI headers) the install goes on and the Python entry runs. The compiler wrapper is $MPICC, the
``mpicc`` next to Python, or PATH's; it is used for mpi.h's types only: the module links no MPI
library (it takes mpi4py's at run time). The module replaces any old one in one rename, so processes
building at once each leave a whole module, and a build record beside it (``record_of``) names what
it was built with: the loader keeps the Python entry when the Python, numpy or mpi4py running differ.

Imports nothing of gpulab: the build hook loads this file by its path, before gpulab is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("fastpath.c")
REBUILD = "python -m gpulab.bcast.runtime.build"


class BuildError(RuntimeError):
    """The C entry could not be built; the message says why and what to do."""


def module_name() -> str:
    """The C entry's file name for this Python (``_fastpath.cpython-311-x86_64-linux-gnu.so``)."""
    return "_fastpath" + sysconfig.get_config_var("EXT_SUFFIX")


def default_target() -> Path:
    """Where an install puts the module and where the loader looks: beside ``fastpath.c``."""
    return SOURCE.with_name(module_name())


def record_of(module: Path) -> Path:
    """The build record beside a module (JSON: ``versions()`` at build time and the wrapper)."""
    return module.with_name(module.name + ".json")


def versions() -> dict:
    """What a module built here depends on: the source, Python, numpy's and mpi4py's headers."""
    import mpi4py
    import numpy

    return {"source": hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16], "python": sys.version,
            "numpy": numpy.__version__, "mpi4py": mpi4py.__version__}


def mpicc() -> str | None:
    """The MPI compiler wrapper: $MPICC (a name or a path), the one next to Python, or PATH's."""
    if os.environ.get("MPICC"):
        return shutil.which(os.environ["MPICC"])
    here = Path(sys.executable).parent / "mpicc"
    return str(here) if here.exists() else shutil.which("mpicc")


def build(target: Path | None = None, wrapper: str | None = None) -> Path:
    """Compile the C entry into ``target`` (default ``default_target()``) with ``wrapper`` (default ``mpicc()``)."""
    import mpi4py
    import numpy

    target = Path(target or default_target())
    wrapper = wrapper or mpicc()
    if wrapper is None or shutil.which(wrapper) is None:
        asked = wrapper or os.environ.get("MPICC")
        raise BuildError(f"MPICC={asked} is no command" if asked else
                         "no mpicc found: install an MPI (pip install mpich) or set MPICC to its compiler wrapper")
    wrapper = shutil.which(wrapper)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        work = tempfile.TemporaryDirectory(dir=target.parent, prefix=".fastpath-build-")
    except OSError as error:
        raise BuildError(f"cannot write into {target.parent} ({error.strerror}): build as its owner, or into a "
                         f"directory of yours with `{REBUILD} --target DIR/{module_name()}` and set "
                         f"GPULAB_FASTPATH_MODULE to that file") from None
    with work as tmp:  # built beside the target, then renamed over it: no reader sees half a file
        out = Path(tmp) / target.name
        includes = [sysconfig.get_paths()["include"], numpy.get_include(), mpi4py.get_include()]
        # --as-needed: the wrapper's -lmpi is dropped, since every MPI call goes through a pointer
        command = [wrapper, "-O2", "-shared", "-fPIC", *(f"-I{d}" for d in includes), str(SOURCE),
                   "-Wl,--as-needed", "-o", str(out)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as error:
            raise BuildError(f"{' '.join(command)} did not run: {error}") from None
        if done.returncode:
            raise BuildError(f"{' '.join(command)} failed: {done.stderr.strip()[-2000:]}")
        if b"libmpi" in out.read_bytes():
            raise BuildError(f"{out.name} was linked to an MPI library; it must take mpi4py's")
        record = record_of(out)
        record.write_text(json.dumps({**versions(), "wrapper": wrapper}, indent=1))
        os.replace(out, target)
        os.replace(record, record_of(target))
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Build gpulab's broadcast entry in C (gpulab/bcast/runtime).")
    parser.add_argument("--target", type=Path, default=None, help=f"the module to write (default: beside "
                        f"fastpath.c, {module_name()}, where gpulab loads it)")
    parser.add_argument("--mpicc", default=None, help="the MPI compiler wrapper (default: $MPICC, the mpicc next "
                        "to Python, or PATH's)")
    args = parser.parse_args(argv)
    try:
        path = build(args.target, args.mpicc)
    except BuildError as error:
        print(f"gpulab: the C entry was not built: {error}", file=sys.stderr)
        return 1
    print(f"built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
