"""MPICH's own broadcast algorithms as benchmark rows: ``mpi:<algorithm>[/<tree type>[/<k>]]``, one MPI job each.

MPICH reads its control variables once, at MPI_Init, so a job can force one
broadcast algorithm and no other: every variant runs in a job of its own,
started with ``environment(name)`` (``gpulab bench bcast`` and
``gpulab tune bcast --export`` do this), and is timed as the plain MPI_Bcast.

    mpi:binomial                      MPIR_CVAR_BCAST_INTRA_ALGORITHM=binomial
    mpi:pipelined_tree/kary/1         a chain inside MPICH (k-ary tree with k = 1, pipelined)
    mpi:pipelined_tree/knomial_1/4    a pipelined 4-nomial tree
    mpi:tree/kary/2                   a binary tree, not pipelined

``--chunk-bytes`` becomes MPIR_CVAR_BCAST_TREE_PIPELINE_CHUNK_SIZE and ``--radix``
MPIR_CVAR_BCAST_TREE_KVAL where the name gives no k. Nothing here starts MPI.
"""

from __future__ import annotations

PREFIX = "mpi:"
ENV = "GPULAB_NATIVE_VARIANT"  # set in a variant's job: the variant its control variables force
# MPIR_CVAR_BCAST_INTRA_ALGORITHM's values in the mpich 5.0.2 wheel (`mpivars`)
ALGORITHMS = ("binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather", "pipelined_tree",
              "tree", "smp", "nb")
TREES = ("pipelined_tree", "tree")  # the two that take a tree type and k
TREE_TYPES = ("kary", "knomial_1", "knomial_2")
# the selection file's name of each algorithm (maint/tuning/coll/mpir/generic.json)
FUNCTIONS = {name: f"MPIR_Bcast_intra_{name}" for name in ALGORITHMS}
# what the tuner measures unless told otherwise: every algorithm that runs on any communicator, the
# trees as a chain (k = 1) and a binary tree (k = 2); smp needs several ranks per node, nb is binomial's
# non-blocking twin
TUNED = ("mpi", "mpi:binomial", "mpi:scatter_recursive_doubling_allgather", "mpi:scatter_ring_allgather",
         "mpi:pipelined_tree/kary/1", "mpi:pipelined_tree/kary/2")


def is_variant(name: str) -> bool:
    return name.startswith(PREFIX)


def parse(name: str) -> tuple[str, str | None, int | None]:
    """'mpi:pipelined_tree/kary/1' -> ('pipelined_tree', 'kary', 1); ValueError naming what is valid."""
    if not is_variant(name):
        raise ValueError(f"{name!r} is not a native variant (they are named {PREFIX}<MPICH algorithm>)")
    algorithm, *tree = name[len(PREFIX):].split("/")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"{name!r}: MPICH has no broadcast algorithm {algorithm!r}; valid: "
                         f"{', '.join(PREFIX + a for a in ALGORITHMS)}")
    if tree and algorithm not in TREES:
        raise ValueError(f"{name!r}: only {' and '.join(TREES)} take a tree type and k")
    if len(tree) > 2 or (tree and tree[0] not in TREE_TYPES):
        raise ValueError(f"{name!r}: write {PREFIX}{algorithm}/<tree type>/<k>, tree type one of {TREE_TYPES}")
    if len(tree) == 2 and not (tree[1].isdigit() and int(tree[1]) >= 1):
        raise ValueError(f"{name!r}: k must be a whole number >= 1")
    return algorithm, (tree[0] if tree else None), (int(tree[1]) if len(tree) == 2 else None)


def environment(name: str, *, chunk_bytes: int | None = None, radix: int | None = None) -> dict[str, str]:
    """The MPICH control variables that force variant ``name`` (plus ``ENV``); {} for plain 'mpi'.

    A row's name ('mpi:pipelined_tree/kary/1@256K') carries its chunk size itself."""
    if name == "mpi":
        return {}
    name, _, chunk = name.partition("@")
    if chunk:
        from gpulab.bcast.sizes import parse_size

        chunk_bytes = parse_size(chunk)
    algorithm, tree_type, k = parse(name)
    env = {"MPIR_CVAR_BCAST_INTRA_ALGORITHM": algorithm, ENV: variant_name(name, chunk_bytes, radix)}
    if algorithm in TREES:
        if tree_type:
            env["MPIR_CVAR_BCAST_TREE_TYPE"] = tree_type
        if k or radix:
            env["MPIR_CVAR_BCAST_TREE_KVAL"] = str(k or radix)
        if chunk_bytes and algorithm == "pipelined_tree":
            env["MPIR_CVAR_BCAST_TREE_PIPELINE_CHUNK_SIZE"] = str(chunk_bytes)
    return env


def variant_name(name: str, chunk_bytes: int | None = None, radix: int | None = None) -> str:
    """The row's name: the variant with the options that reached MPICH ('mpi:pipelined_tree/kary/1@256K')."""
    algorithm, tree_type, k = parse(name)
    if algorithm not in TREES:
        return name
    if radix and not k:
        name = f"{PREFIX}{algorithm}/{tree_type or 'kary'}/{radix}"
    return f"{name}@{_size_text(chunk_bytes)}" if chunk_bytes and algorithm == "pipelined_tree" else name


def _size_text(nbytes: int) -> str:
    """64K for whole KiB, else the bytes: a text that ``parse_size`` reads back."""
    from gpulab.bcast.sizes import format_size

    return format_size(nbytes) if nbytes % 1024 == 0 else str(nbytes)


def selection_leaf(row_name: str) -> tuple[str, dict]:
    """A row's name ('mpi:pipelined_tree/kary/1@256K') -> MPICH's selection-file leaf (key, parameters)."""
    from gpulab.bcast.sizes import parse_size

    base, _, chunk = row_name.partition("@")
    algorithm, tree_type, k = parse(base)
    params = {}
    if algorithm in TREES:
        # MPICH's defaults where the name gives none (MPIR_CVAR_BCAST_TREE_TYPE/KVAL/PIPELINE_CHUNK_SIZE)
        params = {f"tree_type={tree_type or 'kary'}": {}, f"k={k or 2}": {}}
        if algorithm == "pipelined_tree":
            params[f"chunk_size={parse_size(chunk) if chunk else 8192}"] = {}
    return f"algorithm={FUNCTIONS[algorithm]}", params


def check_library(version: str, name: str) -> None:
    """Refuse an MPICH variant under another MPI library, naming the library found."""
    if not version.startswith("MPICH"):
        first = version.strip().splitlines()[0] if version.strip() else "an unknown MPI library"
        raise ValueError(f"{name} forces an MPICH algorithm through MPICH's control variables, but this job's "
                         f"MPI library is {first!r}; see docs/mpi_libraries.md for its own settings")
