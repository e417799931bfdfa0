"""The widgets' logic without Jupyter or MPI: a fake runner stands in for the engines."""

import pytest

from gpulab.bcast.plots.drawings import series_of, step_columns
from gpulab.widgets import BcastExplorer, PatternView, patterns_figure, size_label, sweep_figure

OPTIONS = {"binomial": [], "chain": ["chunk_bytes"], "knomial": ["radix"], "hierarchical":
           ["ranks_per_node", "inter", "intra"], "mpi": []}


class FakeRunner:
    """Times grow with size; chain is slower for small messages. Traces are a chain 0->1->2->3."""

    p = 4
    algorithms = OPTIONS

    def __init__(self, fail_on=None):
        self.calls, self.fail_on = [], fail_on

    def measure(self, algorithm, nbytes, root=0, options=None, device="host"):
        self.calls.append((algorithm, nbytes, root, options) + ((device,) if device != "host" else ()))
        if algorithm == self.fail_on:
            raise RuntimeError(f"engine 2 died while running {algorithm}")
        avg = 10.0 * (3 if algorithm == "chain" else 1) + nbytes / 1e3
        path = "host" if device == "host" else "nccl" if algorithm == "nccl" else (options or {}).get("path", "staged")
        return {"algorithm": algorithm, "nbytes": nbytes, "p": self.p, "root": root, "options": options or {},
                "avg_us": avg, "min_us": avg * 0.9, "max_us": avg * 1.1, "algbw_GBps": nbytes / avg / 1e3,
                "busbw_GBps": nbytes / avg / 1e3, "valid": True, "device": device, "path": path}

    def trace(self, algorithm, p, nbytes, root=0, options=None):
        return [{"algorithm": algorithm, "phase": "pipeline", "step": s, "src": s, "dst": s + 1,
                 "nbytes": nbytes, "t_start": float(s), "t_end": s + 0.5} for s in range(p - 1)]


def test_size_labels():
    assert [size_label(n) for n in (1, 1023, 1024, 3 << 20, 1 << 30)] == ["1", "1023", "1K", "3M", "1G"]


def test_pressing_run_measures_the_plan_and_draws_one_line_per_series():
    runner = FakeRunner()
    explorer = BcastExplorer(runner, sizes=(1 << 10, 1 << 13), algorithms=("binomial", "chain"))
    explorer.chunk.value = 1 << 12
    explorer.run_button.click()
    # 4 sizes x (binomial, chain, native mpi), each with only the options it accepts, in 6 rounds
    assert len(explorer.results) == 12 and explorer.rounds.value == 6
    assert ("chain", 1 << 10, 0, {"chunk_bytes": 4096}) in runner.calls
    assert ("binomial", 1 << 10, 0, {}) in runner.calls
    assert explorer.progress.value == explorer.progress.max == 72
    assert all(runner.calls[i:i + 12] == runner.calls[:12] for i in range(0, 72, 12))  # interleaved rounds
    labels = [line.get_label() for line in explorer.figure.axes[0].lines]
    assert labels == ["#1 binomial", "#1 chain(chunk_bytes=4K)", "#1 mpi"]
    assert "<td>#1 mpi</td>" in explorer.table.value
    assert "(n=6, 97%)" in explorer.table.value  # six rounds: a 96.9% interval of each median


def test_a_run_redraws_curve_by_curve_at_most_once_a_second_and_always_at_its_end(monkeypatch):
    from types import SimpleNamespace

    from gpulab.widgets import explorer as module

    clock = {"now": 100.0}
    monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: clock["now"]))  # the explorer's clock only

    class SlowRunner(FakeRunner):  # each measurement takes 0.3 s of the fake clock
        def measure(self, *args, **kwargs):
            clock["now"] += 0.3
            return super().measure(*args, **kwargs)

    explorer = BcastExplorer(SlowRunner(), sizes=(1 << 10, 1 << 11), algorithms=("binomial", "chain"), rounds=3)
    drawn, redraw = [], explorer.redraw

    def counted_redraw():
        drawn.append(explorer.progress.value)
        redraw()
    monkeypatch.setattr(explorer, "redraw", counted_redraw)
    explorer.run()
    # 3 curves of 2 sizes x 3 rounds, 0.6 s a curve: the first curve drawn, then every other one
    # (a second apart), and the end of the run, whatever the clock says
    assert drawn == [2, 6, 10, 14, 18]
    assert explorer._drawn[1] == (1, 18) and len(explorer.figure.axes[0].lines) == 3
    drawn.clear()
    clock["now"] += 0.1  # a second run, at once: its first curve waits for the clock too
    explorer.run()
    assert drawn == [4, 8, 12, 16, 18]


class NoisyRunner(FakeRunner):
    """Each call's time is the next of a list: rounds of one point differ, as on a shared machine."""

    def __init__(self, times):
        super().__init__()
        self.times = iter(times)

    def measure(self, *args, **kwargs):
        row = super().measure(*args, **kwargs)
        avg = next(self.times)
        return dict(row, avg_us=avg, busbw_GBps=row["nbytes"] / avg / 1e3)


def test_a_point_is_the_median_of_its_rounds_with_its_interval():
    # two sizes, one algorithm, nine rounds: the size-1K point gets 50, 10, 30, 20, 90, 40, 35, 25, 45 us
    size_1k = [50, 10, 30, 20, 90, 40, 35, 25, 45]
    size_2k = [5, 6, 4, 7, 8, 6, 5, 7, 6]
    explorer = BcastExplorer(NoisyRunner([t for pair in zip(size_1k, size_2k) for t in pair]),
                             sizes=(1 << 10, 1 << 11), algorithms=("binomial",), rounds=9)
    explorer.with_mpi.value = False
    rows = explorer.run()
    assert [r["avg_us"] for r in rows] == [35, 6]
    assert rows[0]["rounds_us"] == size_1k and rows[0]["busbw_GBps"] == pytest.approx(1024 / 35 / 1e3)
    # nine samples: the 2nd smallest to the 2nd largest hold the median with 96.1%, the extremes left out
    assert rows[0]["avg_interval_us"] == {"median": 35, "low": 20, "high": 50, "n": 9,
                                          "confidence": pytest.approx(0.9609375)}
    time_axis = explorer.figure.axes[0]
    assert list(time_axis.lines[0].get_ydata()) == [35, 6]
    band = time_axis.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == 5 and band.max() == 50  # the intervals, not the fastest and slowest rounds (4, 90)
    assert "median of rounds, band: its 95% interval" in time_axis.get_ylabel()
    assert "35.00 [20.00, 50.00] (n=9, 96%)" in explorer.table.value


def test_runs_accumulate_for_comparison_and_clear_resets():
    explorer = BcastExplorer(FakeRunner(), sizes=(1, 4), algorithms=("chain",))
    explorer.with_mpi.value = False
    explorer.run()
    explorer.chunk.value = 1 << 20
    explorer.run()
    labels = [line.get_label() for line in explorer.figure.axes[1].lines]
    assert labels == ["#1 chain(chunk_bytes=64K)", "#2 chain(chunk_bytes=1M)"]
    explorer.clear()
    assert explorer.results == [] and len(explorer.figure.axes[0].lines) == 0


def test_options_follow_the_sliders():
    explorer = BcastExplorer(FakeRunner())
    explorer.radix.value, explorer.ranks_per_node.value, explorer.root.value = 3, 2, 1
    assert explorer.options_for("knomial") == {"radix": 3}
    assert explorer.options_for("hierarchical") == {"ranks_per_node": 2}
    explorer.algorithms.value = ("knomial",)
    explorer.with_mpi.value = False
    explorer.sizes.value = (64, 64)
    explorer.run()
    assert explorer.results[0]["root"] == 1


class GpuRunner(FakeRunner):
    devices = ["host", "cupy", "fake"]


def test_device_buffers_path_and_nccl_alongside():
    ex = BcastExplorer(FakeRunner(), sizes=(1 << 10, 1 << 10))
    assert [v for _, v in ex.device.options] == ["host"]  # a runner without devices: host buffers only
    runner = GpuRunner()
    ex = BcastExplorer(runner, sizes=(1 << 10, 1 << 10), algorithms=("chain",))
    assert ex.path.disabled and ex.with_nccl.disabled
    ex.device.value = "fake"
    assert not ex.path.disabled and ex.with_nccl.disabled  # NCCL needs a real GPU
    ex.path.value = "staged"
    assert ex.options_for("chain") == {"chunk_bytes": 1 << 16, "path": "staged"}
    ex.device.value = "cupy"
    ex.with_nccl.value, ex.with_mpi.value = True, False
    assert [a for a, _, _ in ex.plan()] == ["chain", "nccl"] and ex.plan()[1][2] == {}
    rows = ex.run()
    assert all(call[-1] == "cupy" for call in runner.calls)
    assert {series_of(r) for r in rows} == {"#1 chain(chunk_bytes=64K) [cupy staged]", "#1 nccl [cupy nccl]"}
    ex.device.value = "host"
    assert ex.with_nccl.value is False and "path" not in ex.options_for("chain")


def test_a_failure_shows_in_the_status_and_keeps_earlier_rows():
    explorer = BcastExplorer(FakeRunner(fail_on="mpi"), sizes=(1, 2), algorithms=("binomial",))
    explorer.run_button.click()  # the button must not raise into the event loop
    assert "engine 2 died" in explorer.status.value
    assert len(explorer.results) == 2 and not explorer.run_button.disabled
    with pytest.raises(RuntimeError, match="engine 2 died"):
        explorer.run()  # called from code, it raises


def test_pattern_view_draws_an_arrow_per_message():
    view = PatternView(FakeRunner(), algorithm="chain")
    view.p.value = 3
    view.draw_button.click()
    assert len(view.events) == 2
    ax = view.figure.axes[0]
    assert len(ax.texts) == 2  # annotate() arrows
    assert "2 messages" in ax.get_title()


def test_patterns_figure_has_a_panel_per_algorithm():
    fig = patterns_figure(FakeRunner(), ["binomial", "chain", "knomial"], 4, options={"radix": 2})
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 3 and all(len(ax.texts) == 3 for ax in visible)


def test_the_two_levels_of_a_hierarchical_broadcast_are_separate_rounds():
    events = [{"algorithm": "hierarchical/inter", "phase": "tree", "step": 0, "src": 0, "dst": 2, "t_start": 0.0},
              {"algorithm": "hierarchical/intra", "phase": "tree", "step": 0, "src": 0, "dst": 1, "t_start": 1.0},
              {"algorithm": "hierarchical/intra", "phase": "tree", "step": 0, "src": 2, "dst": 3, "t_start": 1.1}]
    assert step_columns(events) == [("inter tree", 0), ("intra tree", 0)]


def test_step_columns_order_phases_by_time():
    events = [{"phase": "allgather", "step": 0, "t_start": 2.0}, {"phase": "scatter", "step": 1, "t_start": 1.0},
              {"phase": "scatter", "step": 0, "t_start": 0.5}]
    assert step_columns(events) == [("scatter", 0), ("scatter", 1), ("allgather", 0)]


def test_sweep_figure_with_no_rows_is_empty():
    fig = sweep_figure([])
    assert len(fig.axes) == 2 and not fig.axes[0].lines


def test_source_of_reads_functions_without_importing_them():
    from gpulab.widgets import source_of

    code = source_of("bcast/algorithms/trees.py", "binomial", "knomial")
    assert code.startswith("def binomial(") and "def knomial(" in code
    with pytest.raises(KeyError, match="nope"):
        source_of("bcast/algorithms/trees.py", "nope")


def test_widgets_do_not_initialise_mpi_in_the_kernel():
    import subprocess
    import sys

    code = "import gpulab.widgets, gpulab.cluster, sys; print('mpi4py.MPI' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_table_renders_html_and_text():
    from gpulab.widgets import Table

    table = Table([{"a": 1, "b": 0.12345}, {"a": 22, "c": "<x>"}])
    assert table.columns == ["a", "b", "c"]
    assert "<td>0.123</td>" in table._repr_html_() and "&lt;x&gt;" in table._repr_html_()
    assert repr(table).splitlines()[0].split() == ["a", "b", "c"]


def test_crossover_is_where_the_fast_one_stays_ahead():
    from gpulab.widgets import crossover

    def rows(algorithm, times):
        return [{"algorithm": algorithm, "nbytes": 1 << k, "avg_us": t} for k, t in enumerate(times)]

    measured = rows("binomial", [1, 2, 4, 8, 16]) + rows("chain", [3, 1, 5, 6, 7])
    assert crossover(measured, "chain", "binomial") == 8  # the win at 2 B does not last
    assert crossover(measured, "binomial", "chain") is None


def test_every_time_of_a_row_is_its_median_over_rounds_and_they_stay_in_order():
    """Rounds whose ranks' spreads differ: each column is the median over rounds of its own, and since in
    every round fastest <= average <= slowest rank, their medians keep that order (a row once read avg 43.5,
    min 8.0, max 42.2 when min and max came from another round than the average)."""
    from gpulab.widgets.explorer import results_html

    class RoundsRunner(FakeRunner):
        rounds = iter([(8.0, 42.2), (43.0, 44.0), (40.0, 49.0)])  # (fastest, slowest rank) per round

        def measure(self, *args, **kwargs):
            row = super().measure(*args, **kwargs)
            low, high = next(self.rounds)
            return dict(row, min_us=low, max_us=high, avg_us=(low + high) / 2)

    explorer = BcastExplorer(RoundsRunner(), sizes=(1 << 10, 1 << 10), algorithms=("binomial",), rounds=3)
    explorer.with_mpi.value = False
    (row,) = explorer.run()
    assert (row["avg_us"], row["min_us"], row["max_us"]) == (43.5, 40.0, 44.0)
    assert row["min_us"] <= row["avg_us"] <= row["max_us"]
    assert row["busbw_GBps"] == pytest.approx(1024 / 43.5 / 1e3)
    assert row["rounds_us"] == [25.1, 43.5, 44.5] and row["rounds_max_us"] == [42.2, 44.0, 49.0]
    html = results_html([row])
    assert "<td>43.50 [25.10, 44.50] (n=3, 75%)</td><td>40.0</td><td>44.0</td>" in html


def test_a_fitted_machine_puts_the_model_beside_each_point():
    from gpulab.bcast.cost.hockney import Link, Machine, predict
    from gpulab.widgets.explorer import results_html

    machine = Machine("plain", Link.plain(5e-6, 1e-9), Link.plain(5e-6, 1e-9))
    explorer = BcastExplorer(FakeRunner(), sizes=(1 << 10, 1 << 11), algorithms=("binomial",), rounds=2,
                             machine=machine)
    rows = explorer.run()
    assert [r["model_us"] for r in rows if r["algorithm"] == "binomial"] == [
        pytest.approx(predict("binomial", n, 4, machine) * 1e6) for n in (1 << 10, 1 << 11)]
    assert "<th>model us</th>" in results_html(rows)
    assert len(explorer.figure.axes[0].lines) == 4  # binomial and mpi, each with its model dotted
    assert "<th>model us</th>" not in results_html(BcastExplorer(FakeRunner(), rounds=1).run())


def test_hierarchical_takes_the_real_nodes_on_an_emulated_cluster():
    """ranks/node 0 passes no ranks_per_node (the algorithm asks MPI which node each rank is on): with
    round-robin placement consecutive ranks are on different nodes, so blocks of k would be wrong."""
    from types import SimpleNamespace

    class ClusterRunner(FakeRunner):
        engines = SimpleNamespace(emulated=object())

    on_cluster = BcastExplorer(ClusterRunner())
    assert on_cluster.ranks_per_node.value == 0 and on_cluster.options_for("hierarchical") == {}
    on_cluster.ranks_per_node.value = 2
    assert on_cluster.options_for("hierarchical") == {"ranks_per_node": 2}
    assert BcastExplorer(FakeRunner()).ranks_per_node.value == 2  # one machine: blocks of p/2 stand for nodes
