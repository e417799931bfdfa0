"""Notebook widgets over live MPI engines: the broadcast explorer and the communication-pattern view.

Widgets only draw. What the engines run to measure and trace lives beside the
cluster code (``gpulab.cluster.bcast_runner.EngineRunner``,
``gpulab.cluster.mesh_runner.MeshRunner``); the widgets collect its rows and
draw them, so they are tested without Jupyter or MPI by handing them a fake
runner.

The names below are imported on first use, so that importing one widget does
not import ipywidgets and matplotlib for all of them.
"""

from gpulab.lazy_exports import lazy_exports

_HOMES = {
    "pattern_figure": "gpulab.bcast.plots.drawings", "sweep_figure": "gpulab.bcast.plots.drawings",
    "ClusterPanel": "gpulab.widgets.cluster_panel", "notebook_engines": "gpulab.widgets.cluster_panel",
    "BcastExplorer": "gpulab.widgets.explorer", "crossover": "gpulab.bcast.measurement.results",
    "PatternView": "gpulab.widgets.pattern", "patterns_figure": "gpulab.widgets.pattern",
    "show_patterns": "gpulab.widgets.pattern",
    "as_image": "gpulab.widgets.plots", "size_label": "gpulab.widgets.plots",
    "show_code": "gpulab.widgets.source", "source_of": "gpulab.widgets.source",
    "Table": "gpulab.widgets.tables",
}


lazy_exports(globals(), _HOMES)
