"""The broadcast explorer: pick sizes, algorithms and their options, press Run, compare the curves.

    from gpulab.cluster.bcast_runner import EngineRunner
    from gpulab.widgets import BcastExplorer
    explorer = BcastExplorer(EngineRunner(engines))
    explorer                      # shows the controls in a notebook
    explorer.run()                # what the Run button does; returns the new rows

Each run measures every chosen algorithm at every power-of-two size in the
range (native MPI_Bcast alongside), ``rounds`` times, the rounds interleaved
so that a burst of load on a shared machine hits one round of every point
rather than every round of one point. A point shows the median of its rounds
(``results.over_rounds``: every time column the median over rounds) with the
median's 95% interval as a band on the plot and ``median [low, high]`` in the
table: a bump inside the band is noise, not an effect. With a fitted
``machine`` the cost model's time for the last rank stands beside each point
(dotted on the plot). The rows go to ``explorer.results``; earlier runs stay
on the plot so runs can be compared.

Buffers: host (numpy), GPU (CuPy, where every engine has one) or the fake
GPU; for device buffers the path (auto, staged through host memory,
CUDA-aware) and NCCL's broadcast alongside (CuPy only). Curves of device
buffers are labelled with the device and the path taken.

MPICH's own algorithms (``mpi:<algorithm>``) are not offered: the engines are
one MPI job, and MPICH fixes its broadcast algorithm at MPI_Init, so a native
variant needs a job of its own (``gpulab bench bcast`` starts one per variant).
"""

from __future__ import annotations

import html
import time

import ipywidgets as W
from IPython.display import display

from gpulab.backend import DEVICES
from gpulab.bcast.algorithms import registry
from gpulab.bcast.cost.hockney import predict
from gpulab.bcast.measurement.results import over_rounds
from gpulab.bcast.plots.drawings import series_of, sweep_figure
from gpulab.stats import Interval
from gpulab.widgets.plots import as_image, size_label

SIZES = [1 << k for k in range(0, 27)]  # 1 B .. 64 MiB
CHUNKS = [1 << k for k in range(10, 23)]  # 1 KiB .. 4 MiB
ROUNDS = 6  # rounds per point by default: the fewest whose order statistics bracket the median at 95%
# A redraw renders the figure to PNG, which costs far more than a small size's measurement: during a run,
# at most one a second (redrawn after every curve of every round, a run of small sizes spends most of its
# time drawing)
REDRAW_EVERY_S = 1.0
NATIVE_NOTE = ("<small>MPICH's own algorithms (<code>mpi:pipelined_tree/kary/1</code>, ...) cannot run here: "
               "MPICH fixes its broadcast algorithm when the engines' job starts. "
               "<code>gpulab bench bcast --algorithms mpi,mpi:binomial,...</code> runs each in a job of its "
               "own (docs/mpi_libraries.md).</small>")


class BcastExplorer(W.VBox):
    """Controls + progress + plot + table over a runner (see gpulab.cluster.bcast_runner)."""

    def __init__(self, runner, *, sizes=(1 << 10, 1 << 20), algorithms=None, rounds: int = ROUNDS, machine=None):
        """``algorithms``: those chosen at first (default: the registry's featured ones); ``machine``: a fitted
        ``gpulab.bcast.cost.hockney.Machine`` whose predictions stand beside the measurements (None: none)."""
        algorithms = registry.featured_names() if algorithms is None else algorithms
        self.runner, self.machine, self.results, self._runs = runner, machine, [], 0
        self._drawn = (0.0, None)  # when the figure was last drawn, and after which measurement
        names = [a for a in runner.algorithms if a != "mpi"]
        size_options = [(size_label(s), s) for s in SIZES]
        self.sizes = W.SelectionRangeSlider(options=size_options, index=(SIZES.index(sizes[0]), SIZES.index(sizes[1])),
                                            description="sizes", layout=W.Layout(width="420px"))
        self.algorithms = W.SelectMultiple(options=names, value=[a for a in algorithms if a in names],
                                           description="algorithms", rows=min(len(names), 9))
        self.with_mpi = W.Checkbox(value="mpi" in runner.algorithms, description="native MPI_Bcast alongside",
                                   disabled="mpi" not in runner.algorithms)
        self.native_note = W.HTML(NATIVE_NOTE, layout=W.Layout(width="300px"))
        self.chunk = W.SelectionSlider(options=[(size_label(c), c) for c in CHUNKS], value=1 << 16,
                                       description="chunk size")
        self.radix = W.IntSlider(value=4, min=2, max=8, description="radix")
        # 0: the nodes the ranks really run on (Split_type), what an emulated cluster's placement makes them
        on_nodes = getattr(getattr(runner, "engines", None), "emulated", None) is not None
        self.ranks_per_node = W.IntSlider(value=0 if on_nodes else max(runner.p // 2, 1), min=0,
                                          max=max(runner.p, 1), description="ranks/node",
                                          tooltip="hierarchical's nodes: 0 = the real ones, k = blocks of k ranks")
        self.root = W.IntSlider(value=0, min=0, max=max(runner.p - 1, 0), description="root")
        self.rounds = W.IntSlider(value=rounds, min=1, max=9, description="rounds")
        devices = getattr(runner, "devices", ["host"])
        self.device = W.Dropdown(options=[(DEVICES[d], d) for d in devices], value="host", description="buffers")
        self.path = W.Dropdown(options=["auto", "staged", "cuda-aware"], value="auto", description="GPU path",
                               disabled=True)
        self.with_nccl = W.Checkbox(value=False, description="NCCL alongside (GPU buffers)", disabled=True)
        self.device.observe(lambda _: self._device_changed(), names="value")
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.clear_button = W.Button(description="Clear", icon="trash")
        self.progress = W.IntProgress(value=0, min=0, max=1, description="progress")
        self.status = W.HTML(f"ready: {runner.p} ranks")
        self.status.add_class("gpulab-status")  # what a run reports (tests find it by this class)
        self.plot, self.table = W.Output(), W.HTML()
        self.figure = sweep_figure([])
        self.run_button.on_click(lambda _: self.run(raise_errors=False))
        self.clear_button.on_click(lambda _: self.clear())
        sliders = [self.sizes, self.chunk, self.radix, self.ranks_per_node, self.root, self.rounds]
        controls = W.HBox([W.VBox(sliders),
                           W.VBox([self.algorithms, self.with_mpi, self.native_note]),
                           W.VBox([self.device, self.path, self.with_nccl])])
        super().__init__([controls, W.HBox([self.run_button, self.clear_button, self.progress, self.status]),
                          self.plot, self.table])

    def _device_changed(self) -> None:
        self.path.disabled = self.device.value == "host"
        self.with_nccl.disabled = self.device.value != "cupy"
        if self.with_nccl.disabled:
            self.with_nccl.value = False

    def options_for(self, algorithm: str) -> dict:
        """The current slider values this algorithm accepts (hierarchical gets ranks_per_node unless it is 0,
        the real nodes, etc.);
        for device buffers, the path when one is forced (every algorithm takes it)."""
        if algorithm == "nccl":
            return {}
        current = {"chunk_bytes": self.chunk.value, "radix": self.radix.value,
                   **({"ranks_per_node": self.ranks_per_node.value} if self.ranks_per_node.value else {})}
        options = {k: v for k, v in current.items() if k in self.runner.algorithms[algorithm]}
        if self.device.value != "host" and self.path.value != "auto":
            options["path"] = self.path.value
        return options

    def plan(self) -> list[tuple[str, int, dict]]:
        """(algorithm, nbytes, options) for every measurement the next run makes, in order."""
        lo, hi = self.sizes.value
        algorithms = (list(self.algorithms.value) + (["mpi"] if self.with_mpi.value else [])
                      + (["nccl"] if self.with_nccl.value else []))
        return [(a, n, self.options_for(a)) for a in algorithms for n in SIZES if lo <= n <= hi]

    def run(self, *, raise_errors: bool = True) -> list[dict]:
        """Measure the plan ``rounds`` times, interleaved; one row per point (its median round).

        Rows measured before a failure are kept. The Run button passes raise_errors=False: the error
        then shows in the status line.
        """
        plan, rounds, self._runs = self.plan(), self.rounds.value, self._runs + 1
        self.progress.max, self.progress.value = max(len(plan) * rounds, 1), 0
        earlier, measured = list(self.results), [[] for _ in plan]
        self.run_button.disabled = True
        try:
            for round_ in range(rounds):
                for i, (algorithm, nbytes, options) in enumerate(plan):
                    self.status.value = (f"run #{self._runs}, round {round_ + 1}/{rounds}: {algorithm} "
                                         f"{size_label(nbytes)}B ({i + 1}/{len(plan)})")
                    measured[i].append(self.runner.measure(algorithm, nbytes, self.root.value, options,
                                                           device=self.device.value))
                    self.results = earlier + [self._point(rows) for rows in measured if rows]
                    self.progress.value += 1
                    curve_done = i + 1 == len(plan) or plan[i + 1][0] != algorithm
                    if curve_done and time.monotonic() - self._drawn[0] >= REDRAW_EVERY_S:
                        self.redraw()  # curve by curve: progress you can see
            if self._drawn[1] != (self._runs, self.progress.value):
                self.redraw()
            self.status.value = f"run #{self._runs}: {len(plan)} points x {rounds} rounds done"
        except Exception as err:
            self.status.value = f"<span style='color:#b00'>run #{self._runs} failed: {html.escape(str(err))}</span>"
            self.redraw()
            if raise_errors:
                raise
        finally:
            self.run_button.disabled = False
        return self.results[len(earlier):]

    def _point(self, rounds: list[dict]) -> dict:
        """A point from its rounds so far, with the model's time for the last rank where there is one."""
        row = over_rounds(rounds, run=self._runs)
        if self.machine is not None and row["algorithm"] != "nccl" and row.get("device", "host") == "host":
            try:
                row["model_us"] = predict(row["algorithm"], row["nbytes"], row["p"], self.machine,
                                          **row["options"]) * 1e6
            except (KeyError, TypeError, ValueError):  # an algorithm or option the model does not price
                pass
        return row

    def clear(self):
        self.results, self._runs = [], 0
        self.progress.value = 0
        self.status.value = "cleared"
        self.redraw()

    def redraw(self):
        sweep_figure(self.results, self.figure)
        self.table.value = results_html(self.results)
        with self.plot:
            self.plot.clear_output(wait=True)
            display(as_image(self.figure))
        self._drawn = (time.monotonic(), (self._runs, self.progress.value))


def results_html(rows: list[dict], last: int = 12) -> str:
    """The last few result rows as a small HTML table: each time the median over the point's rounds, the
    average over ranks with its 95% interval; min and max: the fastest and slowest rank; the model's time
    (for the last rank to finish, so beside max) where the explorer has a machine."""
    model = any("model_us" in r for r in rows)
    head = ("<tr><th>series</th><th>size</th><th>avg us: median [95% interval]</th><th>min us (rank)</th>"
            "<th>max us (rank)</th>" + ("<th>model us</th>" if model else "")
            + "<th>busbw GB/s</th><th>valid</th></tr>")
    body = "".join(f"<tr><td>{series_of(r)}</td><td>{size_label(r['nbytes'])}</td><td>{_interval(r)}</td>"
                   f"<td>{r['min_us']:.1f}</td><td>{r['max_us']:.1f}</td>"
                   + (f"<td>{r['model_us']:.1f}</td>" if "model_us" in r else "<td>-</td>" if model else "")
                   + f"<td>{r['busbw_GBps']:.3f}</td><td>{r['valid']}</td></tr>" for r in rows[-last:])
    caption = ("<caption style='text-align:left'>each time: the median over the point's rounds; the interval "
               "holds the true median with the probability shown (n = rounds)</caption>")
    return f"<table>{caption}{head}{body}</table>" if rows else ""


def _interval(row: dict) -> str:
    return html.escape(Interval.from_dict(row["avg_interval_us"]).text(digits=4))
