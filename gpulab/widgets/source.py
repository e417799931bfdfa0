"""Show a gpulab function's source in a notebook, without importing its module.

    show_code("bcast/algorithms/trees.py", "binomial", "knomial")

The modules of the algorithms import mpi4py.MPI (they communicate), and
importing it initialises MPI; they only ever run on the engines, so the
notebook kernel reads their source from the file instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

from IPython.display import Code, display

import gpulab

PACKAGE = Path(gpulab.__file__).parent


def source_of(relative_path: str, *names: str) -> str:
    """The source text of top-level functions/classes ``names`` in gpulab/<relative_path>."""
    text = (PACKAGE / relative_path).read_text()
    found = {node.name: ast.get_source_segment(text, node) for node in ast.parse(text).body
             if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    missing = [name for name in names if name not in found]
    if missing:
        raise KeyError(f"{missing} not found in gpulab/{relative_path}; it defines {sorted(found)}")
    return "\n\n\n".join(found[name] for name in names)


def show_code(relative_path: str, *names: str) -> Code:
    """Display the functions with syntax highlighting (and return the Code object)."""
    code = Code(source_of(relative_path, *names), language="python")
    display(code)
    return code
