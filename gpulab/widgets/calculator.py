"""The at-scale calculator: memory per GPU, wire bytes, iteration time and MFU, without MPI or engines.

    from gpulab.widgets.calculator import Calculator
    calc = Calculator()                 # shows its controls and figures in a notebook
    calc.model.value = "gpt-80b"        # every control recomputes at once
    calc.result["stages"], calc.result["fit"], calc.result["wire"], calc.result["time"], calc.result["mfu"]
    calc.cache.value = True             # keep gathered weights from forward to backward: memory for traffic
    calc.draw_volume()                  # per-GPU traffic against GPU count, 1D vs 3D (slower: a search)

Everything is arithmetic (``gpulab.engine.perf``): ``memory_model`` for the
memory of each pipeline stage, ``wire.wire_by_group`` for what each GPU
sends, ``compare.evaluate`` for the predicted iteration (compute, exposed
communication, pipeline bubble) and MFU. Nothing imports mpi4py, so the
notebook runs on Binder or a laptop. ``data`` is what is left of the world:
world / (row x col x depth x pipe). The overlap is AxoNN's (``OVERLAP``);
``cache`` adds its weight cache (``overlap_weights``): backward gathers no
weights again, and each GPU holds every gathered block of its stage.
"""

from __future__ import annotations

from dataclasses import replace

import ipywidgets as W
from IPython.display import display

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.pipeline import SCHEDULES, check_pipeline
from gpulab.engine.perf.compare import evaluate, time_split
from gpulab.engine.perf.machines import MACHINES, machine
from gpulab.engine.perf.memory_model import KINDS, fit, machine_precision, stage_memory
from gpulab.engine.perf.predict import GPT_SIZES, gpt_config
from gpulab.engine.perf.wire import tensor_parallel_volume, wire_by_group
from gpulab.widgets.calculator_plots import LABELS, memory_figure, time_figure, volume_figure
from gpulab.widgets.plots import as_image

OVERLAP = Overlap.parse("oar,ors,oag,buckets", bucket_bytes=64 << 20)  # AxoNN's way, as ``gpulab model``
CUSTOM = "custom (width, depth, heads)"


def _powers(lo: int, hi: int) -> list[int]:
    return [1 << k for k in range(lo.bit_length() - 1, hi.bit_length())]


class Calculator(W.VBox):
    def __init__(self, model: str = "gpt-80b", world: int = 1024, shape=(8, 1, 4), pipe: int = 1,
                 micro_batches: int = 8, global_batch: int = 1024, machine_name: str = "perlmutter"):
        slider = W.SelectionSlider
        self.model = W.Dropdown(options=[*GPT_SIZES, CUSTOM], value=model, description="model")
        self.width = W.IntSlider(value=4096, min=512, max=32768, step=512, description="width", disabled=True)
        self.depth_layers = W.IntSlider(value=32, min=1, max=256, description="layers", disabled=True)
        self.heads = W.IntSlider(value=32, min=8, max=256, step=8, description="heads", disabled=True)
        self.world = slider(options=_powers(1, 65536), value=world, description="GPUs")
        self.row, self.col, self.depth = (slider(options=_powers(1, 256), value=v, description=d)
                                          for v, d in zip(shape, ("row", "col", "depth")))
        self.pipe = slider(options=_powers(1, 256), value=pipe, description="pipe stages")
        self.micro_batches = slider(options=_powers(1, 4096), value=micro_batches, description="micro-batches")
        self.global_batch = slider(options=_powers(1, 65536), value=global_batch, description="global batch")
        self.recompute = W.Checkbox(value=True, description="recompute activations")
        self.cache = W.Checkbox(value=False, description="cache gathered weights")
        self.zero = W.Dropdown(options=[0, 1, 2, 3], value=0, description="ZeRO")
        self.schedule = W.Dropdown(options=list(SCHEDULES), value="1f1b", description="schedule")
        self.machine = W.Dropdown(options=list(MACHINES), value=machine_name, description="machine")
        self.status, self.memory_table, self.wire_table = W.HTML(), W.HTML(), W.HTML()
        self.memory_plot, self.time_plot, self.volume_plot = W.Output(), W.Output(), W.Output()
        self.volume_button = W.Button(description="1D vs 3D traffic", icon="line-chart")
        self.volume_button.on_click(lambda _: self.draw_volume())
        self.result: dict = {}
        self.volume_rows: list = []
        self._following = False  # while the shape sliders take the selected model's values
        for control in self.controls():
            control.observe(lambda _: self._following or self.update(), names="value")
        left = W.VBox([self.model, self.width, self.depth_layers, self.heads, self.machine, self.recompute,
                       self.cache, self.zero])
        right = W.VBox([self.world, self.row, self.col, self.depth, self.pipe, self.micro_batches,
                        self.global_batch, self.schedule])
        super().__init__([W.HBox([left, right]), self.status, W.HBox([self.memory_plot, self.memory_table]),
                          self.time_plot, self.wire_table, self.volume_button, self.volume_plot])
        self.update()

    def controls(self) -> list:
        return [self.model, self.width, self.depth_layers, self.heads, self.world, self.row, self.col, self.depth,
                self.pipe, self.micro_batches, self.global_batch, self.recompute, self.cache, self.zero,
                self.schedule, self.machine]

    def config(self) -> GPTConfig:
        if self.model.value != CUSTOM:
            return gpt_config(self.model.value)
        return GPTConfig(vocab_size=51200, block_size=2048, n_layer=self.depth_layers.value, n_head=self.heads.value,
                         n_embd=self.width.value, dtype="float32")

    def overlap(self):
        """AxoNN's overlap, with or without its weight cache."""
        return replace(OVERLAP, cache=self.cache.value)

    def shape(self) -> tuple[int, int, int, int]:
        """(row, col, depth, data): data is what the world leaves; ValueError when it does not divide."""
        R, C, D, pipe = self.row.value, self.col.value, self.depth.value, self.pipe.value
        if self.world.value % (R * C * D * pipe):
            raise ValueError(f"{self.world.value} GPUs do not split into row x col x depth x pipe = "
                             f"{R}x{C}x{D}x{pipe} x data")
        return R, C, D, self.world.value // (R * C * D * pipe)

    def follow_model(self) -> None:
        """The width, layers and heads sliders show the selected model's; they set only a custom one."""
        custom = self.model.value == CUSTOM
        cfg = None if custom else gpt_config(self.model.value)
        self._following = True
        try:
            for w, attr in ((self.width, "n_embd"), (self.depth_layers, "n_layer"), (self.heads, "n_head")):
                w.disabled = not custom
                if cfg is not None:
                    w.value = getattr(cfg, attr)
        finally:
            self._following = False

    def compute(self) -> dict:
        """Every number the widget shows, for the controls' values (ValueError: why none can be shown)."""
        self.follow_model()
        cfg, m, shape = self.config(), machine(self.machine.value), self.shape()
        pipe, micro, batch = self.pipe.value, self.micro_batches.value, self.global_batch.value
        if batch % micro:
            raise ValueError(f"the global batch ({batch}) must be divisible by the micro-batches ({micro})")
        check_divisibility(cfg, shape, batch // micro)
        check_pipeline(cfg.n_layer, pipe, micro, self.schedule.value)
        opts = {"pipe": pipe, "micro_batches": micro, "recompute": self.recompute.value, "overlap": self.overlap()}
        stages = [stage_memory(cfg, shape, s, global_batch=batch, precision=machine_precision(m), zero=self.zero.value,
                               schedule_kind=self.schedule.value, flash_attention=True, **opts)
                  for s in range(pipe)]
        busiest = max(stages, key=lambda s: s["total"])
        row = evaluate(cfg, shape, global_batch=batch, machine=m, flash_attention=True,
                       distributed_optimizer=self.zero.value >= 1, **opts)
        wire = wire_by_group(cfg, shape, global_batch=batch, value_bytes=m.value_bytes, zero=self.zero.value, **opts)
        return {"shape": shape, "stages": stages, "busiest": busiest, "fit": fit(busiest, m), "wire": wire,
                "time": time_split(row), "iter_s": row["iter_s"], "mfu": row["mfu"], "machine": m}

    def update(self) -> None:
        try:
            self.result = self.compute()
        except (ValueError, KeyError) as err:
            self.result = {"error": str(err)}
            self.status.value = f"<b>cannot compute:</b> {err}"
            return
        r, f = self.result, self.result["fit"]
        R, C, D, P = r["shape"]
        verdict = "fits" if f["fits"] else "does <b>not</b> fit: " + "; ".join(f["advice"][:2])
        self.status.value = (f"grid row {R} x col {C} x depth {D} x data {P} x pipe {self.pipe.value}: busiest stage "
                             f"{r['busiest']['total'] / 1e9:.1f} GB of {f['limit'] / 1e9:.0f} GB usable, {verdict}")
        self.memory_table.value = ("<table><tr><th>busiest stage</th><th>GB per GPU</th></tr>"
                                   + "".join(f"<tr><td>{LABELS.get(k, k)}</td><td>{r['busiest'][k] / 1e9:.3g}</td></tr>"
                                             for k in (*KINDS, "total")) + "</table>")
        self.wire_table.value = ("<table><tr><th>group</th><th>GB sent per GPU per iteration</th></tr>"
                                 + "".join(f"<tr><td>{g}</td><td>{b / 1e9:.3g}</td></tr>"
                                           for g, b in sorted(r["wire"].items())) + "</table>")
        self._show(self.memory_plot, memory_figure(r["stages"], f["limit"], f["device_bytes"],
                                                   f"{self.model.value} on {self.world.value} x {r['machine'].name}"))
        self._show(self.time_plot, time_figure(r["time"], r["mfu"], f"iteration {r['iter_s']:.3g} s, "))

    def draw_volume(self, gpus=None) -> list[dict]:
        """Per-GPU traffic against GPU count, 1D vs 3D, for the model, batch and machine chosen."""
        gpus = gpus or _powers(4, 512)
        self.volume_rows = tensor_parallel_volume(self.config(), gpus, global_batch=self.global_batch.value,
                                                  machine=machine(self.machine.value), overlap=self.overlap())
        self._show(self.volume_plot, volume_figure(self.volume_rows, f"{self.model.value}, global batch "
                                                   f"{self.global_batch.value}: one replica, no data parallelism"))
        return self.volume_rows

    @staticmethod
    def _show(output: W.Output, fig) -> None:
        output.clear_output(wait=True)
        with output:
            display(as_image(fig))
