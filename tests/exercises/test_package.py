"""gpulab.exercises' face: every public name resolves, none is hidden by a module of the same name (a
``from gpulab.exercises import on_engines`` that returned a module once did), and importing starts no MPI."""

import pkgutil
import subprocess
import sys

import gpulab.exercises


def test_public_names_resolve_and_no_module_shadows_one():
    modules = {m.name for m in pkgutil.iter_modules(gpulab.exercises.__path__)}
    assert not modules & set(gpulab.exercises.__all__)
    for name in gpulab.exercises.__all__:
        assert not isinstance(getattr(gpulab.exercises, name), type(sys)), name


def test_importing_every_name_does_not_initialise_mpi():
    code = ("import sys, gpulab.exercises as e\n[getattr(e, n) for n in e.__all__]\n"
            "assert 'mpi4py.MPI' not in sys.modules, 'MPI initialised on import'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
