"""The layer order written once, in docs/architecture.md, and every import checked against it."""

import re
from pathlib import Path

from tests.structure.test_imports import PACKAGE, _imports

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _layers() -> list[list[str]]:
    """The layers, bottom first, each a list of units (``bcast``, ``host``, ``__init__``...)."""
    text = ARCHITECTURE.read_text()
    block = re.search(r"<!-- layers: top to bottom -->\s*```text\n(.*?)```", text, re.S)
    assert block, f"{ARCHITECTURE} lost its layers block"
    lines = [line.split("  ")[0].split() for line in block.group(1).splitlines() if line.strip()]
    return lines[::-1]


def _unit(module: str) -> str:
    """gpulab.bcast.cost.hockney -> bcast; gpulab.host -> host; gpulab -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_unit_of_the_package_has_one_layer():
    units = [u for layer in _layers() for u in layer]
    assert len(units) == len(set(units)), f"a unit is named twice: {units}"
    found = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir()
             if p.suffix == ".py" or p.is_dir() and (p / "__init__.py").exists()}
    assert found == set(units), (f"in gpulab/ but in no layer: {sorted(found - set(units))}; "
                                 f"in a layer but not in gpulab/: {sorted(set(units) - found)}")


def test_every_import_points_down():
    """Top-level and function-level imports alike: a unit imports itself and the layers below it only."""
    level = {u: i for i, layer in enumerate(_layers()) for u in layer}
    graph = _imports()
    assert "gpulab.machines" in graph["gpulab.bcast.cost.hockney"]  # the graph sees imports across units
    wrong = [f"{m} ({_unit(m)}, layer {level[_unit(m)]}) imports {t} ({_unit(t)}, layer {level[_unit(t)]})"
             for m in sorted(graph) for t in sorted(graph[m])
             if _unit(t) != _unit(m) and level[_unit(t)] >= level[_unit(m)]]
    assert not wrong, "imports that do not point down (docs/architecture.md, Layers):\n" + "\n".join(wrong)
