"""Communication-pattern view: who sends to whom in which step, traced on the live engines.

    from gpulab.cluster.bcast_runner import EngineRunner
    from gpulab.widgets import PatternView
    PatternView(EngineRunner(engines))                       # controls + drawing
    show_patterns(runner, ["binomial", "chain", "scatter_allgather_ring"], p=4)

The algorithm really runs (in trace mode) on the first p engines; the arrows
are the messages it sent, so binomial's doubling, the chain's pipeline and
scatter-allgather's two phases can be seen, not just timed.
"""

from __future__ import annotations

import ipywidgets as W
from IPython.display import display
from matplotlib.figure import Figure

from gpulab.bcast.plots.drawings import pattern_figure
from gpulab.widgets.plots import as_image, size_label

CHUNKS = [1 << k for k in range(8, 17)]  # small: a few chunks make the pipeline visible


def patterns_figure(runner, algorithms, p: int, *, nbytes: int = 4096, root: int = 0,
                    options: dict | None = None, columns: int = 2) -> Figure:
    """One pattern panel per algorithm, traced on p ranks (options filtered per algorithm)."""
    rows = -(-len(algorithms) // columns)
    fig = Figure(figsize=(6 * columns, (0.45 * p + 1.6) * rows), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, algorithm in zip(axes, algorithms):
        accepted = {k: v for k, v in (options or {}).items() if k in runner.algorithms[algorithm]}
        events = runner.trace(algorithm, p, nbytes, root, accepted)
        pattern_figure(events, p, title=f"{algorithm} p={p} {size_label(nbytes)}B", ax=ax)
    for ax in axes[len(algorithms):]:
        ax.set_visible(False)
    return fig


def show_patterns(runner, algorithms, p: int, **kwargs) -> Figure:
    """Draw patterns_figure in the notebook and return it."""
    fig = patterns_figure(runner, algorithms, p, **kwargs)
    display(as_image(fig))
    return fig


class PatternView(W.VBox):
    """Algorithm, process count, message size, chunk size, radix, root -> the traced pattern."""

    def __init__(self, runner, *, algorithm: str = "binomial"):
        self.runner, self.events = runner, []
        self.algorithm = W.Dropdown(options=list(runner.algorithms), value=algorithm, description="algorithm")
        self.p = W.IntSlider(value=runner.p, min=2, max=max(runner.p, 2), description="processes")
        self.nbytes = W.SelectionSlider(options=[(size_label(1 << k), 1 << k) for k in range(6, 17)],
                                        value=4096, description="message")
        self.chunk = W.SelectionSlider(options=[(size_label(c), c) for c in CHUNKS], value=1024,
                                       description="chunk size")
        self.radix = W.IntSlider(value=4, min=2, max=8, description="radix")
        self.root = W.IntSlider(value=0, min=0, max=max(runner.p - 1, 0), description="root")
        self.draw_button = W.Button(description="Draw", button_style="primary", icon="pencil")
        self.status, self.plot = W.HTML(), W.Output()
        self.figure = None
        self.draw_button.on_click(lambda _: self.draw(raise_errors=False))
        super().__init__([W.HBox([W.VBox([self.algorithm, self.p, self.root]),
                                  W.VBox([self.nbytes, self.chunk, self.radix])]),
                          W.HBox([self.draw_button, self.status]), self.plot])

    def draw(self, *, raise_errors: bool = True) -> Figure | None:
        algorithm, p = self.algorithm.value, self.p.value
        options = {"chunk_bytes": self.chunk.value, "radix": self.radix.value, "ranks_per_node": max(p // 2, 1)}
        options = {k: v for k, v in options.items() if k in self.runner.algorithms[algorithm]}
        self.status.value = f"tracing {algorithm} on {p} ranks..."
        try:
            self.events = self.runner.trace(algorithm, p, self.nbytes.value, min(self.root.value, p - 1), options)
        except Exception as err:
            self.status.value = f"<span style='color:#b00'>{type(err).__name__}: {err}</span>"
            if raise_errors:
                raise
            return None
        self.figure = pattern_figure(self.events, p, title=f"{algorithm} {options or ''}")
        self.status.value = f"{len(self.events)} messages"
        with self.plot:
            self.plot.clear_output(wait=True)
            display(as_image(self.figure))
        return self.figure
