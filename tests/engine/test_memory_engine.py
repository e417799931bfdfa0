"""The calculator checked against the engine, on the grids, stages, overlaps, recomputation and
sequence parallelism the suite runs.

Per rank: the memory model's bytes (``perf.memory_model.stage_memory``, engine precision) equal
what ``memory_report`` accounts for weights, gradients, optimizer state, the weight cache and
backward's working set, and the activations agree within 10%; the accounted total is within 15%
of the peak of numpy's arrays that tracemalloc sees during a training step, and not above it
(all of it is held at once). The wire bytes every traced collective records (ring algorithm)
equal ``volume.collective_calls``' by group and op (on one stage, neither recomputing nor
sequence-parallel). One mpiexec job per
world size (tests.mpi_harness.batched_jobs), each rank's numbers come back and are checked here,
so a failure names the case, the rank and the term.
"""

import pytest

from gpulab.engine import grid_shapes
from tests.mpi_harness import batched_jobs

ACTIVATION_TOLERANCE = 0.10
PEAK_TOLERANCE = 0.15
EXACT = {"weights": "parameters", "gradients": "gradients", "optimizer": "optimizer", "weight_cache": "weight_cache",
         "working_set": "working_set"}


def _cases(shapes, pipe=1, micro=1, kinds=("1f1b",), overlaps=("none",), modes=("plain",)):
    return [[list(s), pipe, micro, k, o, mode] for s in shapes for k in kinds for o in overlaps for mode in modes]


CASES = {
    4: (_cases(grid_shapes(4))
        + _cases([(1, 1, 4, 1), (2, 1, 2, 1), (1, 2, 2, 1)], overlaps=("cache", "oag", "all"))
        + _cases(grid_shapes(2), pipe=2, micro=2, kinds=("1f1b", "gpipe"))
        + _cases([(1, 1, 2, 1)], pipe=2, micro=4, kinds=("1f1b", "gpipe"), overlaps=("cache",))
        + _cases([(1, 1, 1, 1)], pipe=4, micro=4, kinds=("1f1b", "gpipe"))
        # recomputation and sequence parallelism (memory_cases.MODES), alone and together
        + _cases([(4, 1, 1, 1)], modes=("full", "selective", "sp"))
        + _cases([(2, 2, 1, 1)], modes=("sp+full", "sp+selective"))
        + _cases([(1, 1, 4, 1)], overlaps=("cache", "oag"), modes=("full",))
        + _cases([(2, 1, 2, 1)], overlaps=("all",), modes=("selective", "sp+full"))
        + _cases([(2, 1, 1, 1)], pipe=2, micro=2, kinds=("1f1b", "gpipe"), modes=("full", "sp"))
        + _cases([(1, 1, 2, 1)], pipe=2, micro=4, kinds=("gpipe",), overlaps=("cache",), modes=("full",))
        + _cases([(1, 1, 1, 1)], pipe=4, micro=4, modes=("full", "selective"))),
    8: (_cases([(2, 1, 2, 2), (1, 2, 2, 2), (2, 2, 2, 1)], overlaps=("none", "cache", "all"))
        + _cases([(2, 1, 1, 2), (1, 2, 2, 1), (2, 2, 1, 1)], pipe=2, micro=2, kinds=("1f1b", "gpipe"))
        + _cases([(1, 2, 1, 1)], pipe=4, micro=8, kinds=("1f1b", "gpipe"))
        + _cases([(2, 2, 2, 1)], overlaps=("all",), modes=("sp+full", "sp+selective"))
        + _cases([(4, 1, 1, 2)], modes=("sp",))
        + _cases([(2, 1, 1, 2)], pipe=2, micro=2, modes=("sp+selective", "full"))),
}


@pytest.fixture(scope="module")
def job():
    return batched_jobs({f"{n} ranks": (n, "tests.engine.memory_cases:memory_and_wire", dict(cases=cases))
                         for n, cases in CASES.items()}, timeout=400)


def _rows(job, n):
    rows = [row for rank in job(f"{n} ranks") for row in rank]
    assert len(rows) == n * len(CASES[n])
    return rows


@pytest.mark.parametrize("n", list(CASES))
def test_model_equals_what_the_engine_accounts(n, job):
    wrong = []
    for r in _rows(job, n):
        acc, pred = r["accounted"], r["predicted"]
        for kind, key in EXACT.items():
            if pred[kind] != acc[key]:
                wrong.append(f"{r['case']} rank {r['rank']}: {kind} predicted {pred[kind]:.0f} B, accounted {acc[key]}")
        err = abs(pred["activations"] - acc["activations"]) / acc["activations"]
        if err > ACTIVATION_TOLERANCE:
            wrong.append(f"{r['case']} rank {r['rank']}: activations predicted {pred['activations']:.0f} B, "
                         f"accounted {acc['activations']} ({err:.1%} off)")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("n", list(CASES))
def test_wire_bytes_traced_equal_the_model(n, job):
    wrong = []
    for r in _rows(job, n):
        # stages: the sends carry each micro-batch's activations, both ways; recomputation and sequence
        # parallelism: volume.collective_calls does not model their collectives
        if r["wire_model"] is None:
            continue
        for key in sorted(set(r["wire"]) | set(r["wire_model"])):
            got, want = r["wire"].get(key, 0.0), r["wire_model"].get(key, 0.0)
            if abs(got - want) > 1e-9 * max(1.0, want):
                wrong.append(f"{r['case']} rank {r['rank']}: {key} traced {got:.0f} B on the wire, model {want:.0f} B")
    assert not wrong, "\n".join(wrong)


def _peak_misses(rows):
    out = []
    for r in rows:
        total, peak = r["accounted"]["total"], r["traced_peak"]
        if abs(peak - total) > PEAK_TOLERANCE * peak:
            terms = ", ".join(f"{k} {v / 1e6:.2f}" for k, v in r["accounted"].items() if k != "total")
            out.append(f"{r['case']} rank {r['rank']} (stage {r['stage']}): traced peak {peak / 1e6:.2f} MB, "
                       f"accounted {total / 1e6:.2f} MB ({peak / total - 1:+.0%}; {terms} MB)")
    return out


@pytest.mark.parametrize("n", list(CASES))
def test_accounted_total_is_within_15_percent_of_the_traced_peak(n, job):
    misses = _peak_misses(_rows(job, n))
    assert not misses, "\n".join(misses)


@pytest.mark.parametrize("n", list(CASES))
def test_traced_peak_is_never_below_what_is_accounted(n, job):
    """What memory_report accounts is held at once at the peak: the trace sees at least that."""
    low = [f"{r['case']} rank {r['rank']}: traced {r['traced_peak']} < accounted {r['accounted']['total']}"
           for r in _rows(job, n) if r["traced_peak"] < 0.99 * r["accounted"]["total"]]
    assert not low, "\n".join(low)
