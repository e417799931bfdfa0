"""``MPI = lazy_mpi(globals())``: mpi4py.MPI, imported at a module's first ``MPI.x``, not at its import.

Importing mpi4py.MPI initialises MPI. The modules that communicate use this so
that a notebook kernel (which on a cluster runs inside a Slurm job and must
never call MPI_Init) can still import them, to draw or model. After the first
lookup the module's global is the real module: no cost on the hot path.
"""


class _LazyMPI:
    """Stands for mpi4py.MPI in one module until that module first uses it."""

    __slots__ = ("_namespace",)

    def __init__(self, namespace: dict):
        self._namespace = namespace

    def __getattr__(self, name: str):
        from mpi4py import MPI  # the one deferred import of MPI in the package

        self._namespace["MPI"] = MPI  # from now on the module's global is the real module
        return getattr(MPI, name)


def lazy_mpi(namespace: dict):
    """A stand-in for mpi4py.MPI that replaces itself in ``namespace`` at first use."""
    return _LazyMPI(namespace)
