"""Claims (a)-(c) of the broadcast paper: measured on emulated nodes, read from docs/results, predicted by the model."""

from __future__ import annotations

import math
import statistics

import numpy as np

from gpulab import stats
from gpulab.bcast.sizes import format_size
from gpulab.scoreboard import recorded as rec
from gpulab.scoreboard.claim import AWAN, AWAN_JOURNAL, DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, Claim
from gpulab.scoreboard.evidence import all_of, decide, decide_each, decisive, no_interval, ratio, rounds_of, text

K, M = 1 << 10, 1 << 20
# The link sets the time only when it is slow enough: with 2 cores shared by other jobs, a rank that forwards
# a chunk waits for a core, which at 1 Gbit/s costs as much as the link (load 15: the chain lost to binomial at
# every size). Quick mode takes 100 Mbit/s, its largest sizes 16-32x smaller; the full run keeps the records'.
LINK = {True: "100mbit", False: "1gbit"}
CROSSOVER_SIZES = {True: [16 * K, 64 * K, 256 * K, M], False: [16 * K, 64 * K, 256 * K, M, 4 * M, 8 * M, 32 * M]}
CHUNK_SIZE = {True: 2 * M, False: 32 * M}
CHUNKS = [16 * K, 64 * K, 256 * K, M, 4 * M]  # the scan of docs/emulated_bcast.md; the model's own chunk is added
DENSE = {True: (2, 2, [M]), False: (4, 2, [M, 8 * M, 32 * M])}  # nodes, ranks per node, sizes

# Verdict thresholds: a "win" must be clearly larger than a tie (10%), and a size "match" may be off by about
# one step of the scanned sizes. How much the runs move is the intervals' business (``evidence``), not theirs.
CROSSOVER_FACTOR = 2.0  # the model's crossover may lie a factor 2 outside the measured bracket (sizes step 4x)
CHUNK_TOLERANCE = 0.10  # the chain at the model's chunk may be 10% slower than at the best scanned chunk
HIER_MARGIN = 0.10  # hierarchical must be 10% faster than the flat binomial tree
ACCURACY_RECORD = "emulated_crossover.json"  # the model's predictions beside the measurements on emulated nodes


def iters_for(bench) -> dict:
    """Per point and round: a warm-up and 2 timed broadcasts (quick) or 3; ``bench.rounds`` rounds."""
    return {"iters": 2 if bench.quick else 3, "warmup": 1, "time_budget": 1.0 if bench.quick else 3.0,
            "rounds": bench.rounds}


def iters_at(bench, nbytes: int) -> int:
    """More timed broadcasts per round for small messages (up to 8x below 256 KiB): a few milliseconds each,
    one rank that waits for a core would otherwise be the whole sample."""
    return iters_for(bench)["iters"] * max(1, min(8, 256 * K // nbytes))


def machine_of(fit: dict):
    from gpulab.bcast.cost.hockney import Machine

    return Machine.from_dict(fit)


def recorded_run(name: str, placement: str = "block") -> dict:
    return next(r for r in rec.read(name) if r["topology"]["placement"] == placement)


def medians(samples: list) -> list[float]:
    return [statistics.median(s) for s in samples]


# (a) ---------------------------------------------------------------------------------------------------------
def faster_of(iv: dict) -> str:
    """"chain" when the whole interval of chain / binomial lies below 1, "binomial" when above, else "undecided"
    (also when the runs give no 95% interval)."""
    if not decisive(iv):
        return "undecided"
    outcome = stats.judge(stats.Interval.from_dict(iv), 1.0, "<").outcome
    return {stats.HOLDS: "chain", stats.DOES_NOT_HOLD: "binomial"}.get(outcome, "undecided")


def brackets(sizes: list[int], faster: list[str]) -> list[dict]:
    """Every crossover the per-size verdicts allow: the chain faster from ``above`` on (None: not even at the
    last size), and not faster at ``below``, the size before it (None: the chain from the first size)."""
    out = []
    for k in range(len(sizes) + 1):
        if all(f != "binomial" for f in faster[k:]) and (k == 0 or faster[k - 1] != "chain"):
            out.append({"below": sizes[k - 1] if k else None, "above": sizes[k] if k < len(sizes) else None})
    return out


def crossover_value(samples: dict, sizes: list[int]) -> dict:
    """From {(algorithm, bytes): per-round times}: per size the paired ratio chain / binomial, which is faster,
    and the crossovers consistent with that."""
    ratios = [ratio(samples[("chain", n)], samples[("binomial", n)]) for n in sizes]
    faster = [faster_of(r) for r in ratios]
    by_median = ["chain" if r["median"] < 1 else "binomial" for r in ratios]
    return {"sizes": sizes, "ratios": ratios, "faster": faster, "brackets": brackets(sizes, faster),
            "median_bracket": brackets(sizes, by_median)[0],
            "chain_us": medians([samples[("chain", n)] for n in sizes]),
            "binomial_us": medians([samples[("binomial", n)] for n in sizes])}


def _bracket_text(b: dict) -> str:
    if b["above"] is None:
        return f"above {format_size(b['below'])} (the chain never faster)"
    return f"{format_size(b['below'])}..{format_size(b['above'])}" if b["below"] else f"<= {format_size(b['above'])}"


def _crossover_text(v: dict) -> str:
    if all(decisive(r) for r in v["ratios"]):
        per_size = ", ".join(f"{format_size(n)} {text(r)} {f}" for n, r, f in zip(v["sizes"], v["ratios"], v["faster"]))
        return f"chain / binomial: {per_size}; crossover {' or '.join(_bracket_text(b) for b in v['brackets'])}"
    per_size = ", ".join(f"{format_size(n)} {text(r)}" for n, r in zip(v["sizes"], v["ratios"]))
    return f"chain / binomial: {per_size}; crossover by the medians {_bracket_text(v['median_bracket'])}"


def _crossover_bytes(chain: list[float], binomial: list[float], sizes: list[int]) -> float:
    """The smallest of ``sizes`` from which the chain is faster at every larger size: 0 when it is from the
    first, inf when it is not even at the last."""
    k = len(sizes)
    while k > 0 and chain[k - 1] < binomial[k - 1]:
        k -= 1
    return 0.0 if k == 0 else math.inf if k == len(sizes) else float(sizes[k])


def predicted_crossover(fit: dict, p: int, lo: int, hi: int, chunk: int | None = None, error: float = 0.0,
                        error_source: str = "") -> dict:
    """Where the model puts the chain (at ``chunk``, or its best chunk at each size) ahead of binomial up to
    ``hi``, looked for at 4 sizes per octave (19%: finer than the tolerance) from lo / 4 to hi * 4; ``range``:
    where it may lie if each predicted time is off by the model's ``error`` (the ratio by (1 + e) / (1 - e)).
    Bytes: 0 = the chain fastest from the start, None = no crossover."""
    from gpulab.bcast.cost.hockney import best_chunk, predict

    m = machine_of(fit)
    sizes = [int(x) for x in np.geomspace(lo // 4, hi * 4, 4 * round(math.log2(16 * hi / lo)) + 1)]
    chain = [predict("chain", n, p, m, chunk_bytes=chunk or best_chunk("chain", n, p, m)) for n in sizes]
    binomial = [predict("binomial", n, p, m) for n in sizes]
    skew = (1 + error) / max(1 - error, 0.1)
    at = [_crossover_bytes([c * f for c in chain], binomial, sizes) for f in (1.0, 1 / skew, skew)]
    c, low, high = (None if math.isinf(x) else x for x in at)
    return {"crossover_bytes": c or None, "chain_from_start": c == 0, "range": [low, high], "error": error,
            "error_source": error_source, "searched": [sizes[0], sizes[-1]]}


def model_error() -> tuple[float, str]:
    """The broadcast model's stated error on emulated nodes: the median |predicted - measured| / measured over
    every point of the recorded crossover run, predicted by the model fitted on the same cluster."""
    try:
        points = [r for r in recorded_run(ACCURACY_RECORD)["records"] if r.get("predicted_us")]
    except (rec.NotMeasured, StopIteration):
        return 0.0, "no accuracy record"
    error = float(np.median([abs(r["predicted_us"] / r["max_us"] - 1) for r in points]))
    return error, f"its median error over {len(points)} points of {rec.source(ACCURACY_RECORD)}"


def _bound(x: float | None) -> str:
    """A crossover size in words: 0 is the chain ahead from the smallest size, None binomial up to the largest."""
    return "the smallest size" if x == 0 else "beyond the largest" if x is None else format_size(int(x))


def _model_crossover_text(v: dict) -> str:
    sizes = v.get("searched")
    of = f" of {format_size(sizes[0])}..{format_size(sizes[1])}" if sizes else ""
    if v["chain_from_start"]:
        head = f"chain fastest at every size{of}"
    elif v["crossover_bytes"]:
        head = f"crossover at {format_size(int(v['crossover_bytes']))}"
    else:
        head = f"binomial fastest at every size{of}, no crossover"
    if not v["error"]:
        return head
    low, high = v["range"]
    if low == high:
        return f"{head} (the same within its {v['error']:.0%} error)"
    return f"{head} (within its {v['error']:.0%} error from {_bound(low)} to {_bound(high)})"


def crossover_live(bench) -> dict:
    from gpulab.bcast.cost.hockney import best_chunk

    sizes = CROSSOVER_SIZES[bench.quick]
    with bench.cluster(4, 1, LINK[bench.quick]) as where:
        fit = bench.bcast_fit(where, 4)
        points = [p for n in sizes for p in (["binomial", n, {}, iters_at(bench, n)],
                                             ["chain", n, {"chunk_bytes": best_chunk("chain", n, 4, machine_of(fit))},
                                              iters_at(bench, n)])]
        rows = bench.on_ranks(4, "times", {"points": points, **iters_for(bench)})
    value = crossover_value(rec.samples_by(rows, lambda r: r["algorithm"]), sizes)
    model = predicted_crossover(fit, 4, sizes[0], sizes[-1], None, *model_error())  # the chain at the model's chunk
    return {"value": value, "text": _crossover_text(value), "where": where.describe(4),
            "model": {"value": model, "text": _model_crossover_text(model), "source": "cost model fitted here"}}


def crossover_recorded() -> dict:
    run = recorded_run("emulated_crossover.json")
    samples = rec.samples_by(run["records"], lambda r: r["algorithm"])
    value = crossover_value(samples, sorted({n for _, n in samples}))
    return {"value": value, "text": _crossover_text(value), "source": rec.source("emulated_crossover.json")}


def crossover_model(bench) -> dict:
    run = recorded_run("emulated_crossover.json")
    sizes = sorted({r["nbytes"] for r in run["records"]})
    chunk = next(r["options"]["chunk_bytes"] for r in run["records"] if r["algorithm"] == "chain")  # as recorded
    model = predicted_crossover(run["model"], run["metadata"]["ranks"], sizes[0], sizes[-1], chunk, *model_error())
    return {"value": model, "text": _model_crossover_text(model),
            "source": "cost model fitted in " + rec.source("emulated_crossover.json")}


def _within(b: dict, low: float, high: float) -> bool | None:
    """Does every crossover of the model's range lie within the factor of bracket ``b`` (True), none (False),
    or some (None)? A bracket open at one end (the chain faster from the smallest size, or not even at the
    largest) says only on which side of the sizes the crossover lies: it can refute the model, not confirm it."""
    below, above = b["below"], b["above"]
    if above is None:  # the chain not faster even at the largest size: the crossover lies above ``below``
        return False if high < below / CROSSOVER_FACTOR else None
    if not below:  # the chain faster from the smallest size: the crossover lies at or below ``above``
        return False if low > above * CROSSOVER_FACTOR else None
    floor, ceiling = below / CROSSOVER_FACTOR, above * CROSSOVER_FACTOR
    if floor <= low and high <= ceiling:
        return True
    return False if high < floor or low > ceiling else None


def crossover_judge(v: dict, model: dict | None) -> tuple[str, str]:
    """Holds when every crossover the measured intervals allow lies within the factor of every crossover the
    model's error allows, does not hold when none does, else inconclusive."""
    if not all(decisive(r) for r in v["ratios"]):
        return INCONCLUSIVE, (f"chain / binomial at each size: {no_interval(min(r['n'] for r in v['ratios']))}, "
                              "so the sizes where each is faster are not known")
    if model is None:
        return INCONCLUSIVE, "no model prediction to compare the measured crossover with"
    low, high = (math.inf if x is None else x for x in model["range"])
    fits = [_within(b, low, high) for b in v["brackets"]]
    verdict = HOLDS if all(f is True for f in fits) else DOES_NOT_HOLD if not any(fits) and None not in fits \
        else INCONCLUSIVE
    lies = {HOLDS: "lies", DOES_NOT_HOLD: "does not lie", INCONCLUSIVE: "may or may not lie"}[verdict]
    allowed = " or ".join(_bracket_text(b) for b in v["brackets"])
    return verdict, (f"the model's {_model_crossover_text(model)} {lies} within a factor {CROSSOVER_FACTOR:g} of "
                     f"the measured crossover ({allowed}, as the intervals of chain / binomial per size allow); "
                     f"the model's error: {model['error_source'] or 'not stated'}")


# (b) ---------------------------------------------------------------------------------------------------------
def chunk_value(samples: dict, model_chunk: int) -> dict:
    """From {chunk: per-round times}: the fastest chunk (by median), and the time at the model's chunk (or the
    scanned chunk nearest it, when it was not measured) over the time at each other chunk, paired by round."""
    times = {c: statistics.median(s) for c, s in samples.items()}
    best = min(times, key=times.get)
    near = min(times, key=lambda c: abs(math.log(c / model_chunk)))
    over = {str(c): ratio(samples[near], samples[c]) for c in sorted(samples)}
    return {"chunks_us": {str(c): t for c, t in sorted(times.items())}, "best_chunk": best, "model_chunk": model_chunk,
            "measured_at": near, "at_model_over_best": over[str(best)], "at_model_over": over}


def _chunk_text(v: dict) -> str:
    at = "" if v["measured_at"] == v["model_chunk"] else f" (nearest scanned {format_size(v['measured_at'])})"
    return f"best chunk {format_size(v['best_chunk'])}; model's chunk{at} {text(v['at_model_over_best'])} the best time"


def chunk_live(bench) -> dict:
    from gpulab.bcast.cost.hockney import best_chunk

    n = CHUNK_SIZE[bench.quick]
    with bench.cluster(4, 1, LINK[bench.quick]) as where:
        fit = bench.bcast_fit(where, 4)
        chosen = best_chunk("chain", n, 4, machine_of(fit))
        chunks = sorted({*(c for c in CHUNKS if c < n), chosen})
        rows = bench.on_ranks(4, "times", {"points": [["chain", n, {"chunk_bytes": c}] for c in chunks],
                                           **iters_for(bench)})
    value = chunk_value({r["options"]["chunk_bytes"]: rounds_of(r, "max_us") for r in rows}, chosen)
    return {"value": value, "text": f"{format_size(n)}: " + _chunk_text(value), "where": where.describe(4),
            "model": {"value": {"best_chunk": chosen}, "text": f"best chunk {format_size(chosen)} at {format_size(n)}",
                      "source": "cost model fitted here"}}


def chunk_recorded() -> dict:
    run = recorded_run("emulated_chunks.json")
    value = chunk_value({r["options"]["chunk_bytes"]: rounds_of(r, "max_us") for r in run["records"]},
                        run["best_chunk"])
    return {"value": value, "text": _chunk_text(value), "source": rec.source("emulated_chunks.json")}


def chunk_model(bench) -> dict:
    run = recorded_run("emulated_chunks.json")
    return {"value": {"best_chunk": run["best_chunk"]}, "text": f"best chunk {format_size(run['best_chunk'])}",
            "source": "cost model fitted in " + rec.source("emulated_chunks.json")}


def chunk_judge(v: dict, model: dict | None) -> tuple[str, str]:
    """The chain at the model's chunk may take at most 1 + CHUNK_TOLERANCE times its time at every scanned chunk."""
    allowed = 1 + CHUNK_TOLERANCE
    verdict, why = decide_each({f"at the model's chunk / at {format_size(int(c))}": iv
                                for c, iv in v["at_model_over"].items() if int(c) != v["measured_at"]}, allowed, "<=",
                               all_of)
    head = (f"the chain at the model's chunk takes {text(v['at_model_over_best'])} its time at the best scanned "
            f"chunk {format_size(v['best_chunk'])} (allowed {allowed:.2f}x at every chunk)")
    return verdict, head if verdict == HOLDS else f"{head}: {why}"


# (c) ---------------------------------------------------------------------------------------------------------
def placement_value(samples: dict, sizes: list[int]) -> dict:
    flat, hier = ([samples[(a, n)] for n in sizes] for a in ("binomial", "hierarchical"))
    return {"sizes": sizes, "flat_us": medians(flat), "hierarchical_us": medians(hier),
            "speedup": ratio(flat[-1], hier[-1])}


def _placement_text(v: dict) -> str:
    return f"hierarchical {text(v['speedup'])} faster than flat binomial at {format_size(v['sizes'][-1])}"


def placement_predicted(fit: dict, sizes: list[int], rank_nodes: list[int]) -> dict:
    from gpulab.bcast.cost.hockney import predict

    m, p = machine_of(fit), len(rank_nodes)
    flat = predict("binomial", sizes[-1], p, m, rank_nodes=rank_nodes)
    hier = predict("hierarchical", sizes[-1], p, m)
    return {"speedup": flat / hier}


def placement_live(bench) -> dict:
    nodes, rpn, sizes = DENSE[bench.quick]
    p = nodes * rpn
    # round-robin: consecutive ranks on different nodes, so the flat tree crosses the network at every step;
    # with block placement a binomial tree is already node-aware (docs/emulated_bcast.md)
    with bench.cluster(nodes, rpn, LINK[bench.quick], placement="round-robin") as where:
        fit = bench.bcast_fit(where, p)
        rows = bench.on_ranks(p, "times", {"points": [[a, n, {}] for n in sizes for a in ("binomial", "hierarchical")],
                                           **iters_for(bench)})
        rank_nodes = where.topology.get("rank_nodes") or [0] * p
    value = placement_value(rec.samples_by(rows, lambda r: r["algorithm"]), sizes)
    model = placement_predicted(fit, sizes, rank_nodes)
    return {"value": value, "text": _placement_text(value), "where": where.describe(p),
            "model": {"value": model, "text": f"{model['speedup']:.2f}x", "source": "cost model fitted here"}}


def _placement_run() -> tuple[dict, dict]:
    run = recorded_run("emulated_placement.json", "round-robin")
    plain = [r for r in run["records"] if not (r.get("options") or {}).get("inter")]  # binomial between nodes
    samples = rec.samples_by(plain, lambda r: r["algorithm"])
    return run, placement_value(samples, sorted({n for a, n in samples if a == "hierarchical"}))


def placement_recorded() -> dict:
    _, value = _placement_run()
    return {"value": value, "text": _placement_text(value) + " (round-robin)",
            "source": rec.source("emulated_placement.json")}


def placement_model(bench) -> dict:
    run, value = _placement_run()
    model = placement_predicted(run["model"], value["sizes"], run["topology"]["rank_nodes"])
    return {"value": model, "text": f"{model['speedup']:.2f}x",
            "source": "cost model fitted in " + rec.source("emulated_placement.json")}


def placement_judge(v: dict, model: dict | None) -> tuple[str, str]:
    return decide(v["speedup"], 1 + HIER_MARGIN, ">=",
                  what=f"flat / hierarchical time at {format_size(v['sizes'][-1])}")


CLAIMS = [
    Claim("a", "the pipelined chain overtakes binomial above a message size the cost model predicts",
          {"value": "no number: the chain for large messages, trees for small ones, picked by size",
           "source": AWAN + ", design of the pipelined chain and its tuning framework"},
          crossover_live, crossover_recorded, crossover_model, crossover_judge),
    Claim("b", "the cost model's best chunk size matches the measured one",
          {"value": "no number: the chain's chunk size is tuned per message size",
           "source": AWAN + ", chunked chain design"},
          chunk_live, chunk_recorded, chunk_model, chunk_judge),
    Claim("c", "a hierarchical (node-aware) broadcast beats a flat one on dense nodes",
          {"value": "topology-aware chain up to 50% better than the plain chain on 64 GPUs (the kit tests the "
                    "node-aware idea with binomial trees, not the paper's chain)",
           "source": AWAN_JOURNAL}, placement_live, placement_recorded, placement_model, placement_judge),
]
