"""The mesh explorer: factor the ranks into (row, col, depth, data), switch overlap on and off, run.

    from gpulab.widgets.mesh_explorer import MeshExplorer
    from gpulab.cluster.mesh_runner import MeshRunner
    runner = MeshRunner(engines)                  # engines = gpulab.cluster.start_engines(4)
    explorer = MeshExplorer(runner, machine=runner.fit_machine())
    explorer                                      # the controls in a notebook
    explorer.run()                                # what the Run button does: one measured row

The dropdowns only ever offer valid shapes: row divides the world size and
the model's heads and vocabulary, col divides what is left and the features,
depth what is left and the batch; data is the rest. Beside data the shape's
name (``gpulab.engine.strategies.describe``: "Megatron-LM TP2 x DP2",
"ZeRO-3/FSDP x4", "AxoNN 4D (2,1,2,1)" ...), also in the table. Run trains a few
iterations on the engines (``gpulab.engine.perf.timing.measure`` on the first
``world`` ranks, in the runner's rounds), then draws the per-rank timeline of
the median round's median iteration and a breakdown of every run so far
(compute, exposed and hidden communication, the median iteration time over
rounds with its 95% interval as an error bar) next to the performance model's
prediction for the same settings; the table gives ``median [low, high]``.
The engines do the measuring; this module only asks and draws, so it is
tested with a fake runner.
"""

from __future__ import annotations

import html

import ipywidgets as W
from IPython.display import display

from gpulab.backend import DEVICES
from gpulab.engine.parallel.mesh import GridShape
from gpulab.engine.parallel.overlap import PROGRESS, SWITCHES, Overlap
from gpulab.engine.parallel.timeline_plot import breakdown, gantt
from gpulab.engine.perf.predict import predict
from gpulab.engine.perf.timing import bench_config
from gpulab.engine.strategies import describe
from gpulab.stats import Interval
from gpulab.widgets.plots import as_image
from gpulab.widgets.tables import Table


def valid_factors(n: int, limit: int | None = None) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0 and (limit is None or limit % k == 0)]


class MeshExplorer(W.VBox):
    def __init__(self, runner, *, config=None, batch_size: int = 16, machine=None):
        self.runner, self.machine = runner, machine
        self.config, self.batch_size = config or bench_config(), batch_size
        self.results: list[dict] = []
        self.predictions: list[dict | None] = []
        cfg = self.config
        self.world = W.Dropdown(options=[n for n in range(1, runner.p + 1)], value=runner.p, description="ranks")
        self.row = W.Dropdown(description="row")
        self.col = W.Dropdown(description="col")
        self.depth = W.Dropdown(description="depth")
        self.data = W.HTML()
        self.switches = {name: W.Checkbox(value=False, description=name) for name in SWITCHES}
        # "mpich" is chosen when the job starts (MPIR_CVAR_ASYNC_PROGRESS): running engines cannot switch to it
        self.progress = W.Dropdown(options=[m for m in PROGRESS if m != "mpich"], value="poll",
                                   description="progress")
        self.bucket_kb = W.IntSlider(value=256, min=16, max=4096, step=16, description="bucket KiB")
        devices = getattr(runner, "devices", ["host"])
        fitted = self.fitted_device  # start where the model was fitted: it prices those runs
        self.device = W.Dropdown(options=[(DEVICES[d], d) for d in devices],
                                 value=fitted if fitted in devices else "host", description="arrays on")
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status, self.table = W.HTML(f"ready: {runner.p} engines"), W.Output()
        self.status.add_class("gpulab-status")  # what a run reports (tests find it by this class)
        self.timeline_plot, self.breakdown_plot = W.Output(), W.Output()
        self._limits = {"row": (cfg.n_head, cfg.vocab_size), "col": (cfg.n_embd,), "depth": (batch_size,)}
        self.world.observe(lambda _: self._refresh("world"), "value")
        self.row.observe(lambda _: self._refresh("row"), "value")
        self.col.observe(lambda _: self._refresh("col"), "value")
        self.depth.observe(lambda _: self._refresh("depth"), "value")
        self.run_button.on_click(lambda _: self.run(raise_errors=False))
        self._refresh("world")
        grid = W.VBox([self.world, self.row, self.col, self.depth, self.data])
        options = W.VBox([*self.switches.values(), self.progress, self.bucket_kb, self.device])
        super().__init__([W.HBox([grid, options]), W.HBox([self.run_button, self.status]),
                          self.table, self.timeline_plot, self.breakdown_plot])

    def _options(self, axis: str, remaining: int) -> list[int]:
        opts = [k for k in valid_factors(remaining) if all(lim % k == 0 for lim in self._limits[axis])]
        if axis == "depth":  # depth x data must divide the batch: data is what remains
            opts = [k for k in opts if self.batch_size % remaining == 0]
        return opts or [1]

    def _refresh(self, changed: str) -> None:
        """Offer only the factors still possible after the axes above this one."""
        n = self.world.value
        if changed == "world":
            self._set(self.row, self._options("row", n))
        if changed in ("world", "row"):
            self._set(self.col, self._options("col", n // self.row.value))
        if changed in ("world", "row", "col"):
            self._set(self.depth, self._options("depth", n // (self.row.value * self.col.value)))
        ok = self.shape is not None
        self.data.value = (f"data = {self.shape.data}: <b>{describe(self.shape)}</b>" if ok else
                           "<span style='color:#b00'>no valid data size: pick other factors</span>")
        self.run_button.disabled = not ok

    @staticmethod
    def _set(dropdown, options) -> None:
        keep = dropdown.value if dropdown.value in options else options[0]
        dropdown.options, dropdown.value = options, keep

    @property
    def shape(self):
        R, C, D = self.row.value, self.col.value, self.depth.value
        P = self.world.value // (R * C * D)
        if R * C * D * P != self.world.value or self.batch_size % (D * P):
            return None
        return GridShape(R, C, D, P)

    @property
    def overlap(self) -> Overlap:
        return Overlap(**{n: cb.value for n, cb in self.switches.items()}, progress=self.progress.value,
                       bucket_bytes=self.bucket_kb.value << 10)

    def run(self, *, raise_errors: bool = True) -> dict | None:
        shape, overlap, device = self.shape, self.overlap, self.device.value
        self.status.value = f"running {shape} with overlap {overlap.label()}..."
        self.run_button.disabled = True
        try:
            row = self.runner.measure(self.world.value, self.config, shape, self.batch_size, overlap, device=device)
        except Exception as err:  # shown in the status line; the button must not raise into the event loop
            self.status.value = (f"<span style='color:#b00'>{html.escape(type(err).__name__)}: "
                                 f"{html.escape(str(err))}</span>")
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = self.shape is None
        row["label"] = f"#{len(self.results) + 1} {tuple(shape)} {overlap.label()}" + (
            f" on {device}" if device != "host" else "")
        self.results.append(row)
        self.predictions.append(self._predict(shape, overlap, device))
        caveat = (self.predictions[-1] or {}).get("caveat")
        fitted = self.fitted_device
        self.status.value = f"{row['label']}: {html.escape(iteration_ms(row).text('ms'))} per iteration" + (
            f"; the model's trust is LOW here: {html.escape(caveat)}" if caveat else "") + (
            f"; no prediction: the model was fitted with arrays on {fitted} "
            f"(runner.fit_machine(device={device!r}) fits one for {device})"
            if self.machine is not None and fitted != device else "")
        self.redraw()
        return row

    @property
    def fitted_device(self) -> str:
        """Where the model's machine had its arrays when fitted (a profile, which says none: the host)."""
        return getattr(self.machine, "device", "host")

    def _predict(self, shape, overlap, device: str = "host"):
        if self.machine is None or self.fitted_device != device:  # GPU rates price GPU runs
            return None
        return predict(self.config, shape, self.batch_size, self.machine, overlap)

    def rows(self) -> list[dict]:
        """One line per run: measured (the median over rounds and its interval) and predicted milliseconds."""
        out = []
        for r, p in zip(self.results, self.predictions):
            s = r["summary"]
            iteration = iteration_ms(r)
            out.append({"run": r["label"], "strategy": describe(r["shape"]), "iter ms": iteration.median,
                        "95% interval ms": f"[{iteration.low:.1f}, {iteration.high:.1f}] (n={iteration.n}, "
                                           f"{iteration.confidence:.0%})",
                        "compute ms": s["compute_s"] * 1e3, "exposed ms": s["exposed_comm_s"] * 1e3,
                        "hidden ms": s["hidden_comm_s"] * 1e3,
                        "predicted ms": p["iter_s"] * 1e3 if p else float("nan"),
                        "model trust": "-" if not p else "LOW" if p.get("caveat") else "ok",
                        "cache KiB": r["memory"]["weight_cache"] / 1024})
        return out

    def redraw(self) -> None:
        last = self.results[-1]
        with self.table:
            self.table.clear_output(wait=True)
            display(Table(self.rows(), digits=1))
        with self.timeline_plot:
            self.timeline_plot.clear_output(wait=True)
            display(as_image(gantt(last["events"], title=f"{last['label']}: median iteration")))
        preds = self.predictions if all(self.predictions) else None
        with self.breakdown_plot:
            self.breakdown_plot.clear_output(wait=True)
            display(as_image(breakdown(self.results, preds, title="every run: measured (bars), model (dots)")))


def iteration_ms(row: dict) -> Interval:
    """A run's iteration time in ms: the median over its rounds with their 95% interval (one round: no interval)."""
    if "iter_s_interval" in row:
        return Interval.from_dict(row["iter_s_interval"]).scaled(1e3)
    return Interval(row["iter_s"], row["iter_s"], row["iter_s"], 1, 0.0).scaled(1e3)
