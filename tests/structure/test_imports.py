"""The package's shape: importing the library never starts MPI, no two modules import each other, and only
what starts emulated clusters imports them (the layer order itself: test_layers.py)."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gpulab"


def test_importing_the_library_leaves_mpi_unloaded():
    """A notebook kernel (on a cluster, inside a Slurm job) must never call MPI_Init."""
    code = ("import sys, gpulab, gpulab.bcast, gpulab.bcast.cost.hockney, gpulab.engine, gpulab.widgets, "
            "gpulab.cluster, gpulab.workloads, gpulab.cli; print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_any_module_leaves_mpi_unloaded():
    """Even the modules that communicate: they import mpi4py.MPI at their first MPI call (``gpulab.lazy_mpi``)."""
    names = sorted(_module_name(p) for p in PACKAGE.rglob("*.py") if p.name != "__main__.py")
    code = f"import importlib, sys\nfor name in {names!r}:\n    importlib.import_module(name)\n" \
           "print('mpi4py.MPI' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_what_ranks_and_engines_import_draws_nothing():
    """Every rank of a ``gpulab`` command builds the whole parser, and every engine imports the module of
    what it runs: with matplotlib and ipywidgets, which they never use, each paid 0.5-1 s of CPU more."""
    code = ("import sys, gpulab.cluster.bcast_runner, gpulab.cluster.mesh_runner, gpulab.cluster.engine_side\n"
            "from gpulab.cli import build_parser\nbuild_parser()\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'ipywidgets'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every gpulab module -> the gpulab modules it imports, at the top or inside functions."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # "from package import submodule" imports the submodule; "from module import name" the module
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                            for a in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def test_no_import_cycles():
    graph = _imports()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"modules that import each other (directly or around a loop): {cycles}"


def test_no_public_name_of_the_broadcast_is_shadowed_by_a_module():
    """``from gpulab.bcast import select`` must give the function even after the module that defines
    it was imported (Python binds an imported submodule to its package under the module's name)."""
    import gpulab.bcast

    assert not [name for name in gpulab.bcast.__all__
                if (PACKAGE / "bcast" / f"{name}.py").exists() or (PACKAGE / "bcast" / name).is_dir()]


def _within(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


# What may start emulated clusters, and so import gpulab.emulated: the commands (--nodes, `gpulab cluster`),
# the notebook widgets (the cluster panel), the engines (start_engines(nodes=...)) and the scoreboard
# (its live rows run on an emulated cluster). Everything else learns where a
# job runs from gpulab.jobsite, which the cluster's state file feeds.
STARTS_EMULATED_CLUSTERS = ("gpulab.emulated", "gpulab.cli", "gpulab.widgets", "gpulab.cluster", "gpulab.scoreboard")


def test_only_what_starts_emulated_clusters_imports_them():
    graph = _imports()
    wrong = {m: sorted(t for t in targets if _within(t, ["gpulab.emulated"]))
             for m, targets in graph.items() if not _within(m, STARTS_EMULATED_CLUSTERS)}
    assert not {m: t for m, t in wrong.items() if t}


def test_launching_loads_only_the_floor():
    """``gpulab.launch`` runs in every rank and on every launch: it reads where a job runs (gpulab.jobsite)
    without loading the emulated cluster, the engines or numpy."""
    code = ("import sys, gpulab.launch\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpulab') or m == 'numpy'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['gpulab', 'gpulab.jobsite', 'gpulab.launch', 'gpulab.lazy_mpi', 'gpulab.procfs']"


def test_mpi_is_imported_in_one_place():
    """Every module that communicates defers MPI the same way (``MPI = lazy_mpi(globals())``): a
    function-level ``from mpi4py import MPI`` elsewhere is a second idiom to learn and to keep lazy."""
    places = [f"{p.relative_to(PACKAGE.parent)}:{node.lineno}"
              for p in PACKAGE.rglob("*.py") if p.name != "lazy_mpi.py"
              for node in ast.walk(ast.parse(p.read_text()))
              if isinstance(node, ast.ImportFrom) and node.module == "mpi4py"
              and any(a.name == "MPI" for a in node.names)
              or isinstance(node, ast.Import) and any(a.name == "mpi4py.MPI" for a in node.names)]
    assert not places, f"import MPI through gpulab.lazy_mpi instead: {places}"
