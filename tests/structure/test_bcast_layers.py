"""The broadcast package in one direction: each part imports only the parts below it, and never the engine."""

import subprocess
import sys

from tests.structure.test_imports import PACKAGE, _imports

# gpulab.bcast's parts, bottom to top (a module or a subpackage each)
LAYERS = ("sizes", "runtime", "algorithms", "cost", "selection", "entry", "measurement", "plots")
BCAST = "gpulab.bcast"


def _layer(module: str) -> int | None:
    """The index in LAYERS of a module of gpulab.bcast; None for the package itself (its lazy public face)."""
    if module == BCAST:
        return None
    part = module[len(BCAST) + 1:].split(".")[0]
    assert part in LAYERS, f"{module} belongs to no part of gpulab.bcast; add it to one of {LAYERS}"
    return LAYERS.index(part)


def _bcast_modules(graph: dict) -> list[str]:
    return sorted(m for m in graph if m == BCAST or m.startswith(BCAST + "."))


def test_every_part_imports_only_the_parts_below_it():
    """Top-level and function-level imports alike (``_imports`` reads both)."""
    graph = _imports()
    upward = [f"{m} ({LAYERS[_layer(m)]}) imports {t} ({LAYERS[_layer(t)]})"
              for m in _bcast_modules(graph) if _layer(m) is not None
              for t in sorted(graph[m]) if t.startswith(BCAST + ".") and _layer(t) > _layer(m)]
    assert not upward, "\n".join(upward)


def test_the_parts_are_the_folders():
    """Every part named in LAYERS exists, and every module of gpulab/bcast sits in one."""
    found = {p.stem if p.suffix == ".py" else p.name for p in (PACKAGE / "bcast").iterdir()
             if p.suffix == ".py" and p.stem != "__init__" or p.is_dir() and (p / "__init__.py").exists()}
    assert found == set(LAYERS)
    graph = _imports()
    assert all(_layer(m) is not None for m in _bcast_modules(graph) if m != BCAST)


def test_the_broadcast_reaches_no_engine():
    """Following every import, deferred ones too, from any module of gpulab.bcast: no gpulab.engine."""
    graph = _imports()
    via = {m: None for m in _bcast_modules(graph)}  # module -> the module that imports it on the way
    todo = list(via)
    while todo:
        module = todo.pop()
        for target in sorted(graph.get(module, ())):
            if target not in via:
                via[target] = module
                todo.append(target)
    chains = []
    for module in sorted(m for m in via if m.startswith("gpulab.engine")):
        chain = [module]
        while via[chain[-1]] is not None:
            chain.append(via[chain[-1]])
        chains.append(" <- ".join(chain))
    assert not chains, "\n".join(chains[:5])


def test_deciding_with_a_machine_profile_loads_no_engine():
    """``select`` with $GPULAB_MACHINE naming a profile: the broadcast's machine comes from gpulab.machines."""
    code = ("import sys\nfrom gpulab.bcast import bcast, select\n"
            "class Comm:\n    size = 8\n"
            "decision = select(1 << 20, Comm())\n"
            "print(decision.source, sorted(m for m in sys.modules if m.startswith('gpulab.engine')))")
    env = {"GPULAB_MACHINE": "dgx-h100", "GPULAB_TUNING_TABLE": "/nonexistent/tuning.json", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "machine []", out.stdout
