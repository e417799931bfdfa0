"""The engine-free calculator widget, driven from code: every control recomputes, bad combinations say why,
and it works with mpi4py unimportable."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.engine.perf.memory_model import KINDS
from gpulab.widgets.calculator import CUSTOM, Calculator
from gpulab.widgets.calculator_plots import memory_figure, time_figure, volume_figure

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def calc():
    return Calculator(model="gpt-80b", world=1024, shape=(8, 1, 4), pipe=1, micro_batches=8, global_batch=1024)


def test_it_starts_with_a_breakdown_wire_bytes_and_a_time_split(calc):
    r = calc.result
    assert r["shape"] == (8, 1, 4, 32) and len(r["stages"]) == 1
    assert set(KINDS) <= set(r["busiest"]) and r["busiest"]["total"] > 0
    assert {"row", "depth", "data"} <= set(r["wire"]) and all(v > 0 for v in r["wire"].values())
    assert list(r["time"]) == ["compute", "exposed communication", "bubble"] and r["time"]["bubble"] == 0
    assert 0 < r["mfu"] < 1
    assert "grid row 8 x col 1 x depth 4 x data 32" in calc.status.value
    assert "<td>depth</td>" in calc.wire_table.value


def test_each_control_changes_what_it_should(calc):
    before = calc.result["busiest"]
    calc.zero.value = 1  # optimizer state over the 32 data replicas
    assert calc.result["busiest"]["optimizer"] == pytest.approx(before["optimizer"] / 32)
    calc.recompute.value = False
    assert calc.result["busiest"]["activations"] > before["activations"]
    calc.recompute.value = True
    calc.pipe.value = 4  # 4 stages: data shrinks to 8, one bar per stage, a bubble appears
    assert calc.result["shape"] == (8, 1, 4, 8) and len(calc.result["stages"]) == 4
    assert calc.result["time"]["bubble"] > 0 and "pipe" in calc.result["wire"]
    calc.schedule.value = "gpipe"  # every micro-batch in flight on every stage
    assert all(s["in_flight"] == 8 for s in calc.result["stages"])
    calc.schedule.value = "1f1b"
    assert [s["in_flight"] for s in calc.result["stages"]] == [4, 3, 2, 1]
    limit = calc.result["fit"]["limit"]
    calc.machine.value = "frontier"  # 64 GB per GCD
    assert calc.result["fit"]["limit"] > limit
    calc.machine.value = "perlmutter"
    calc.model.value = CUSTOM
    assert not calc.width.disabled
    calc.width.value, calc.depth_layers.value, calc.heads.value = 2048, 16, 16
    assert calc.config().n_embd == 2048 and calc.result["busiest"]["layers"] == 4
    calc.model.value = "gpt-80b"
    assert calc.width.disabled


def test_the_shape_sliders_show_the_selected_model(calc):
    for name in ("gpt-5b", "gpt-80b"):
        calc.model.value = name
        cfg = calc.config()
        assert (calc.width.value, calc.depth_layers.value, calc.heads.value) == (cfg.n_embd, cfg.n_layer, cfg.n_head)
    assert (calc.width.value, calc.depth_layers.value, calc.heads.value) == (12288, 42, 96)
    calc.model.value = CUSTOM  # a custom model starts from the last one's sliders
    assert calc.config().n_embd == 12288 and not calc.heads.disabled
    calc.model.value = "gpt-80b"


def test_a_combination_that_cannot_run_says_why_in_one_line(calc):
    calc.row.value = 64  # 96 heads do not split over 64 rows
    assert calc.result == {"error": calc.result["error"]} and "n_head (96)" in calc.status.value
    calc.row.value = 8
    calc.world.value = 2  # too few GPUs for the grid
    assert "do not split" in calc.status.value
    calc.world.value = 1024
    assert "error" not in calc.result


def test_the_traffic_plot_compares_1d_and_3d_tensor_parallelism(calc):
    rows = calc.draw_volume([8, 16])
    assert [r["gpus"] for r in rows] == [8, 16]
    for r in rows:  # 3D, at the shape the model picks, sends less than 1D over the same GPUs
        assert r["3d"] < r["1d"] and r["3d_shape"][3] == 1
    fig = volume_figure(rows)
    assert len(fig.axes[0].lines) == 2


def test_figures_stack_every_kind_per_stage():
    stages = [{"stage": s, **{k: (i + 1) * 1e9 for i, k in enumerate(KINDS)}} for s in range(3)]
    fig = memory_figure(stages, limit=36e9, device=40e9)
    assert len(fig.axes[0].patches) == 3 * len(KINDS)
    assert len(time_figure({"compute": 1.0, "exposed communication": 0.5, "bubble": 0.2}, 0.4).axes[0].patches) == 3


def test_it_runs_where_mpi4py_cannot_be_imported():
    code = ("import sys\n"
            "class Hide:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'mpi4py':\n"
            "            raise ImportError('mpi4py is hidden')\n"
            "sys.meta_path.insert(0, Hide())\n"
            "from gpulab.widgets.calculator import Calculator\n"
            "c = Calculator()\n"
            "c.pipe.value = 2\n"
            "print(len(c.result['stages']), any(m.startswith('mpi4py') for m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["2", "False"]


def test_notebook_06_question_2_is_read_off_the_widget():
    """The kit's answer (the weight cache's GB per GPU at the best shape) is what the calculator shows
    when the learner ticks the cache at the shape notebook 06 starts it at."""
    from gpulab.engine.perf.machines import machine
    from gpulab.engine.perf.predict import gpt_config, rank
    from gpulab.lessons import Lesson
    from gpulab.lessons.nb06 import ASSUME, OVERLAP

    context = {"gpt_model": "gpt-20b", "gpus": 1024, "global_batch": 1024}  # the notebook's defaults
    best = rank(gpt_config("gpt-20b"), 1024, 1024, machine("perlmutter"), OVERLAP, **ASSUME)[0]["shape"]
    calc = Calculator(model="gpt-20b", world=1024, shape=tuple(best[:3]), pipe=1, micro_batches=1,
                      global_batch=1024, machine_name="perlmutter")
    assert calc.shape() == tuple(best) and not calc.cache.value
    before = calc.result["busiest"]
    calc.cache.value = True
    after = calc.result["busiest"]
    assert after["weight_cache"] > before["weight_cache"] > 0  # prefetch alone holds one block in flight
    assert "gathered weights" in calc.memory_table.value
    added = (after["total"] - before["total"]) / 1e9
    assert added == pytest.approx(Lesson("06").expected(2, context), rel=1e-12)
    assert Lesson("06").check(2, added, context).verdict == "right"
    # backward gathers nothing again: less depth traffic
    assert calc.result["wire"]["depth"] < Calculator(model="gpt-20b", world=1024, shape=tuple(best[:3]), pipe=1,
                                                     micro_batches=1, global_batch=1024).result["wire"]["depth"]
