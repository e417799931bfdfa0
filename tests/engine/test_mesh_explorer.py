"""The mesh explorer and the timeline drawings without Jupyter or MPI: a fake runner stands in."""

import pytest

from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.timeline import summarize
from gpulab.engine.parallel.timeline_plot import breakdown, gantt
from gpulab.engine.perf.timing import bench_config
from gpulab.widgets.mesh_explorer import MeshExplorer, valid_factors


def fake_events(rank: int, overlap: bool) -> list[dict]:
    """Forward kernel, an all-reduce (async and hidden with overlap), a blocking gather."""
    events = [{"kind": "phase", "name": "forward", "start": 0.0, "end": 0.010},
              {"kind": "compute", "name": "h.0.attn.c_attn fwd", "start": 0.0, "end": 0.004}]
    if overlap:
        events.append({"kind": "comm", "op": "all_reduce", "group": "row", "size": 2, "nbytes": 4096,
                       "async": True, "start": 0.004, "end": 0.008, "blocked": [[0.004, 0.0042]]})
        events.append({"kind": "compute", "name": "dW", "start": 0.0042, "end": 0.008})
    else:
        events.append({"kind": "comm", "op": "all_reduce", "group": "row", "size": 2, "nbytes": 4096,
                       "async": False, "start": 0.004, "end": 0.007, "blocked": [[0.004, 0.007]]})
    events.append({"kind": "comm", "op": "all_gather", "group": "depth", "size": 2, "nbytes": 1024,
                   "async": False, "start": 0.008 + rank * 1e-4, "end": 0.009, "blocked": [[0.008, 0.009]]})
    return events


class FakeRunner:
    p = 4

    def __init__(self):
        self.calls = []

    def measure(self, world, config, shape, batch_size, overlap, device="host"):
        self.calls.append((world, tuple(shape), batch_size, overlap) + ((device,) if device != "host" else ()))
        events = [fake_events(r, overlap.any) for r in range(world)]
        summary = summarize(events[0])
        return {"shape": list(shape), "iter_s": summary["wall_s"], "summary": summary, "events": events,
                "memory": {"weight_cache": 2048 if overlap.cache else 0}}


class FakeMachine:
    """Enough of a machine for perfmodel.predict: a fixed cost per call and per FLOP."""
    name, value_bytes, state_bytes_per_param, usable_memory, memory_bytes, peak = "fake", 4, 16, 0.9, 1e12, 1e9

    def collective_s(self, op, size, stride, nbytes):
        return 1e-4 + nbytes * 1e-9

    def compute_s(self, work):
        return work["matmul_flops"] * 1e-10

    def overlap_efficiency_for(self, progress):
        return 0.5


def test_dropdowns_offer_only_valid_shapes():
    explorer = MeshExplorer(FakeRunner())
    cfg = explorer.config  # n_head 8, n_embd 128, vocab 128, batch 16
    assert explorer.world.value == 4 and list(explorer.row.options) == [1, 2, 4]
    explorer.row.value = 2
    assert list(explorer.col.options) == [1, 2]
    explorer.col.value = 2
    assert list(explorer.depth.options) == [1] and explorer.shape == (2, 2, 1, 1)
    explorer.world.value = 3  # 3 divides neither heads, features nor the batch of 16
    assert list(explorer.row.options) == [1] and explorer.shape is None and explorer.run_button.disabled
    assert "no valid data size" in explorer.data.value
    explorer.world.value = 4
    explorer.row.value, explorer.col.value, explorer.depth.value = 1, 1, 2
    assert explorer.shape == (1, 1, 2, 2) and not explorer.run_button.disabled
    assert "HSDP shard 2 x replicate 2" in explorer.data.value  # the shape's strategy, named
    explorer.row.value, explorer.depth.value = 4, 1
    assert explorer.shape == (4, 1, 1, 1) and "Megatron-LM TP4" in explorer.data.value
    assert valid_factors(12, 8) == [1, 2, 4] and cfg.n_head == 8


def test_run_measures_draws_and_compares_with_the_model():
    runner = FakeRunner()
    explorer = MeshExplorer(runner, machine=FakeMachine())
    explorer.row.value, explorer.col.value, explorer.depth.value = 2, 1, 2
    explorer.run_button.click()
    explorer.switches["oar"].value = explorer.switches["cache"].value = True
    row = explorer.run()
    assert [c[1] for c in runner.calls] == [(2, 1, 2, 1)] * 2
    assert runner.calls[1][3] == Overlap(oar=True, cache=True, bucket_bytes=256 << 10)
    assert row["label"] == "#2 (2, 1, 2, 1) oar+cache"
    table = explorer.rows()
    assert [r["cache KiB"] for r in table] == [0, 2]
    assert [r["strategy"] for r in table] == ["AxoNN 4D (2,1,2,1)"] * 2
    assert table[1]["hidden ms"] > 0 == table[0]["hidden ms"]
    assert all(r["predicted ms"] > 0 for r in table)
    assert "2 (2, 1, 2, 1)" in explorer.status.value


def test_a_failed_run_shows_in_the_status():
    class Broken(FakeRunner):
        def measure(self, *args, **kwargs):
            raise RuntimeError("engine 2 died")

    explorer = MeshExplorer(Broken())
    explorer.run_button.click()  # must not raise into the event loop
    assert "engine 2 died" in explorer.status.value and explorer.results == []
    with pytest.raises(RuntimeError):
        explorer.run()


def test_gantt_and_breakdown_draw_every_rank_and_run():
    events = [fake_events(r, True) for r in range(3)]
    fig = gantt(events, title="three ranks")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 2", "rank 1", "rank 0"]
    labels = [h.get_label() for h in ax.get_legend().legend_handles]
    assert "row (solid: waiting)" in labels and "depth (solid: waiting)" in labels
    rows = [{"label": "off", "summary": summarize(fake_events(0, False))},
            {"label": "on", "summary": summarize(fake_events(0, True))}]
    fig = breakdown(rows, [{"iter_s": 0.01, "compute_s": 0.005}] * 2)
    assert len(fig.axes[0].patches) == 6  # compute, exposed, hidden for each run
    assert bench_config().n_head == 8


def test_the_device_menu_follows_the_runner_and_reaches_the_measurement():
    assert [v for _, v in MeshExplorer(FakeRunner()).device.options] == ["host"]

    class GpuRunner(FakeRunner):
        devices = ["host", "cupy", "fake"]

    runner = GpuRunner()
    explorer = MeshExplorer(runner)
    explorer.device.value = "cupy"
    row = explorer.run()
    assert runner.calls[-1][-1] == "cupy" and row["label"].endswith(" on cupy")


def test_the_model_prices_only_runs_on_the_device_it_was_fitted_on():
    class GpuRunner(FakeRunner):
        devices = ["host", "cupy", "fake"]

    class GpuMachine(FakeMachine):
        device = "cupy"

    explorer = MeshExplorer(GpuRunner(), machine=GpuMachine())
    assert explorer.device.value == "cupy"  # the menu starts where the model was fitted
    explorer.run()
    explorer.device.value = "host"
    explorer.run()
    assert [r["predicted ms"] > 0 for r in explorer.rows()] == [True, False]  # nan: not priced
    assert "fitted with arrays on cupy" in explorer.status.value and "device='host'" in explorer.status.value
    assert MeshExplorer(GpuRunner(), machine=FakeMachine()).device.value == "host"  # a host fit: host runs


class RoundsRunner(FakeRunner):
    """Each run is six rounds whose iterations took 10, 12, 11, 30, 9 and 11 ms: one disturbed round."""

    def measure(self, *args, **kwargs):
        from gpulab.engine.perf.timing import over_rounds

        row = super().measure(*args, **kwargs)
        rounds = [dict(row, iter_s=t / 1e3, batch_size=16, seq_len=64, model_flops=1e9, peak_flops=None)
                  for t in (10, 12, 11, 30, 9, 11)]
        return over_rounds(rounds)


def test_a_run_shows_its_median_over_rounds_with_the_interval_beside_the_model():
    explorer = MeshExplorer(RoundsRunner(), machine=FakeMachine())
    row = explorer.run()
    assert row["iter_s"] == pytest.approx(0.011) and row["rounds"] == 6
    interval = row["iter_s_interval"]
    assert interval["low"] == pytest.approx(0.009) and interval["high"] == pytest.approx(0.03)
    assert row["tokens_per_s"] == pytest.approx(16 * 64 / 0.011)  # the rates follow the median
    (line,) = explorer.rows()
    assert line["iter ms"] == pytest.approx(11.0) and line["95% interval ms"] == "[9.0, 30.0] (n=6, 97%)"
    assert line["predicted ms"] > 0
    assert "11.0 ms [9.00, 30.0] (n=6, 97%) per iteration" in explorer.status.value
    fig = breakdown([dict(row, label="run")], None)
    (bars,) = [c for c in fig.axes[0].containers if type(c).__name__ == "ErrorbarContainer"]
    assert bars.get_label() == "measured iteration: median, 95% interval"


def test_over_rounds_takes_the_median_round_whole_and_the_median_time():
    from gpulab.engine.perf.timing import over_rounds

    rounds = [{"iter_s": t, "summary": {"tag": t}, "batch_size": 2, "seq_len": 4, "model_flops": 8.0,
               "peak_flops": 4.0} for t in (3.0, 1.0, 2.0, 4.0)]
    row = over_rounds(rounds)
    assert row["iter_s"] == 2.5 and row["iter_s_rounds"] == [3.0, 1.0, 2.0, 4.0] and row["rounds"] == 4
    assert row["summary"] == {"tag": 2.0}  # an even count: the lower of the middle two rounds
    assert row["mfu"] == pytest.approx(8.0 / 2.5 / 4.0) and row["tokens_per_s"] == pytest.approx(8 / 2.5)
    assert row["iter_s_interval"]["n"] == 4 and row["iter_s_interval"]["confidence"] < 0.95  # four: not 95%
