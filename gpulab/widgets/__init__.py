"""Notebook widgets over live MPI engines: the broadcast explorer and the communication-pattern view.

The measuring happens on the engines (``EngineRunner``); these modules only
collect rows and draw them, so they are tested without Jupyter or MPI by
handing them a fake runner.
"""

from gpulab.bcast.drawings import pattern_figure, sweep_figure
from gpulab.widgets.cluster_panel import ClusterPanel, notebook_engines
from gpulab.widgets.explorer import BcastExplorer, crossover
from gpulab.widgets.pattern import PatternView, patterns_figure, show_patterns
from gpulab.widgets.plots import as_image, size_label
from gpulab.widgets.runner import EngineRunner
from gpulab.widgets.source import show_code, source_of
from gpulab.widgets.tables import Table

__all__ = ["BcastExplorer", "ClusterPanel", "EngineRunner", "notebook_engines", "Table", "as_image", "crossover", "PatternView", "pattern_figure", "patterns_figure",
           "show_code", "show_patterns", "size_label", "source_of", "sweep_figure"]
