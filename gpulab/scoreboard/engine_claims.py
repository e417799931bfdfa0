"""Claim (e) of the AxoNN paper, and what claims (e)-(h) share: the 4D engine's sweep of 4-rank grids, its model."""

from __future__ import annotations

import statistics

from gpulab.scoreboard import recorded as rec
from gpulab.scoreboard.claim import DOES_NOT_HOLD, HOLDS, SINGH, Claim
from gpulab.scoreboard.evidence import all_of, decide, ratio, text

RANKS = 4
SHAPE_3D, SHAPE_1D = (2, 1, 2, 1), (4, 1, 1, 1)  # AxoNN's own 4-rank grid (row x depth) vs tensor parallelism
# over all 4 ranks (Megatron-LM's TP4): the same tensor-parallel degree, in groups of 2 against one group of 4
OVERLAP_SHAPE = (1, 1, 2, 2)  # depth and data: both kinds of collective that overlap can hide
TENSOR_GROUPS = ("row", "col", "depth")
PAPER_RUN = {"model": "gpt-80b", "world": 1024, "machine": "perlmutter"}

# A margin separates a win from a tie; how much the runs move is the intervals' business (``evidence``).
GROUP_MARGIN = 0.10  # a rank of the 3D grid must send at least 10% fewer bytes
HIDE_MIN = 0.20  # overlap must take at least a fifth of the exposed communication off the critical path...
SLOWER_BY = 0.05  # ...without making the iteration more than 5% slower (hidden but paid for elsewhere)
STRATEGY_MARGIN = 0.05  # AxoNN's pick must beat each baseline's best grid by at least 5% (the paper: 26%)


def engine_fit(bench):
    """The performance model's machine: fitted now (full), or this machine's recorded fit (quick: a fit
    is MPI probes on every rank, slow on busy cores)."""
    if bench.quick:
        from gpulab.engine.perf.machines import machine

        try:
            name = f"engine_machine_p{RANKS}.json"
            return machine(rec.path(name)), rec.source(name)
        except rec.NotMeasured:
            pass
    return bench.engine_fit(RANKS), "fitted here"


def with_predictions(rows: list[dict], fit) -> list[dict]:
    from gpulab.engine import GPTConfig
    from gpulab.engine.parallel.overlap import Overlap
    from gpulab.engine.perf.predict import predict

    return [{**r, "prediction": predict(GPTConfig.from_dict(r["config"]), r["shape"], r["batch_size"], fit,
                                        Overlap.from_dict(r["overlap"]) if "overlap" in r else Overlap())}
            for r in rows]


def sweep(bench) -> tuple[list[dict], str]:
    """Every grid of 4 ranks, overlap off, measured in rounds and predicted (claims e, g, h share it)."""
    def run():
        fit, fit_source = engine_fit(bench)
        return with_predictions(bench.engine_rounds(RANKS, "all", ["none"]), fit), fit_source
    return bench.cached("engine sweep", run)


def samples(row: dict, key: str) -> list[float]:
    """A measured row's ``key`` (``iter_s`` or a timeline time) in each round; a row of one run: its one value."""
    if row.get("rounds"):
        return [r[key] for r in row["rounds"]]
    if key == "iter_s":
        return list(row.get("iter_s_rounds") or [row["iter_s"]])
    return [row["summary"][key]]


def median_of(row: dict, key: str = "iter_s") -> float:
    return statistics.median(samples(row, key))


def shape_key(row: dict) -> str:
    return ",".join(map(str, row["shape"]))


def _by_shape(rows):
    return {tuple(r["shape"]): r for r in rows}


def paper_scale(bench) -> list[dict]:
    """``gpulab model compare`` at the paper's run: each strategy's best predicted configuration."""
    def run():
        from gpulab.engine.parallel.overlap import Overlap
        from gpulab.engine.perf.compare import DEFAULT_GLOBAL_BATCH, compare
        from gpulab.engine.perf.machines import machine
        from gpulab.engine.perf.predict import DEFAULT_BUCKET_MB, DEFAULT_OVERLAP, model_config

        return compare(model_config(PAPER_RUN["model"]), PAPER_RUN["world"], DEFAULT_GLOBAL_BATCH,
                       machine(PAPER_RUN["machine"]),
                       Overlap.parse(DEFAULT_OVERLAP, bucket_bytes=int(DEFAULT_BUCKET_MB * 2**20)))
    return bench.cached("paper scale", run)


# (e) ---------------------------------------------------------------------------------------------------------
def largest_group(row: dict) -> int:
    """The largest of the row, col and depth groups in which the row's iteration moved bytes."""
    sizes = dict(zip(("row", "col", "depth"), row["shape"][:3]))
    return max((sizes[g] for g, s in row["summary"]["groups"].items() if g in TENSOR_GROUPS and s["bytes"]), default=1)


def sent_bytes(row: dict) -> float | None:
    """The bytes a rank sent in the tensor-parallel groups' calls of one iteration (``wire_by_group``: counted
    from the calls, the same every round); None for a row that did not count them."""
    wire = row.get("wire_by_group")
    return None if wire is None else float(sum(b for g, b in wire.items() if g in TENSOR_GROUPS))


def groups_value(rows: list[dict]) -> dict:
    """The 3D and the 1D grid's largest groups, the bytes a rank sends in them, and their exposed communication
    (3D over 1D, paired by round)."""
    by = _by_shape(rows)
    three, one = by[SHAPE_3D], by[SHAPE_1D]
    sent = {"sent_mb_3d": sent_bytes(three), "sent_mb_1d": sent_bytes(one)}
    sent = {k: None if v is None else v / 1e6 for k, v in sent.items()}
    return {"shape_3d": SHAPE_3D, "shape_1d": SHAPE_1D, "comm_ms_3d": median_of(three, "exposed_comm_s") * 1e3,
            "comm_ms_1d": median_of(one, "exposed_comm_s") * 1e3,
            "ratio": ratio(samples(three, "exposed_comm_s"), samples(one, "exposed_comm_s")),
            "largest_group_3d": largest_group(three), "largest_group_1d": largest_group(one), **sent}


def _groups_text(v: dict) -> str:
    sent = (f"{v['sent_mb_3d']:.1f} against {v['sent_mb_1d']:.1f} MB sent per rank; "
            if v.get("sent_mb_3d") is not None else "")
    return (f"{v['shape_3d']}: groups <= {v['largest_group_3d']}; {v['shape_1d']}: groups of {v['largest_group_1d']}; "
            f"{sent}exposed comm {v['comm_ms_3d']:.0f} against {v['comm_ms_1d']:.0f} ms ({text(v['ratio'])})")


def groups_model(bench, rows=None, source=None) -> dict:
    if rows is None:
        rows, source = recorded_grid()
    by = _by_shape(rows)
    predicted = by[SHAPE_3D]["prediction"]["exposed_comm_s"] / by[SHAPE_1D]["prediction"]["exposed_comm_s"]
    axonn = next(r for r in paper_scale(bench) if r["strategy"] == "axonn")
    shape = (axonn.get("best_with_tensor_parallelism") or axonn)["shape"]
    return {"value": {"ratio": predicted, "paper_scale_shape": shape, "paper_scale_largest_group": max(shape[:3])},
            "text": f"comm 3D/1D {predicted:.2f}x; at {PAPER_RUN['world']} GPUs AxoNN's grid with TP {tuple(shape)}: "
                    f"largest of its row, col and depth groups {max(shape[:3])}",
            "source": f"performance model, machine {source}"}


def recorded_grid() -> tuple[list[dict], str]:
    data = rec.read(f"engine_grid_p{RANKS}.json")
    rows = [r for r in data["rows"] if r["overlap_label"] == "none"]
    return rows, "fitted in " + rec.source(f"engine_grid_p{RANKS}.json")


def groups_live(bench) -> dict:
    rows, source = sweep(bench)
    value = groups_value(rows)
    return {"value": value, "text": _groups_text(value), "where": f"this machine, {RANKS} ranks",
            "model": groups_model(bench, rows, source)}


def groups_recorded() -> dict:
    value = groups_value(recorded_grid()[0])
    return {"value": value, "text": _groups_text(value), "source": rec.source(f"engine_grid_p{RANKS}.json")}


def groups_judge(v: dict, model: dict | None) -> tuple[str, str]:
    """Judged on what the claim says: smaller groups, fewer bytes sent (counted, so the same in every run). The
    time spent communicating is shown, not judged: on shared cores it moves with which ranks share a core, a
    placement fixed for one run, so run to run it moves more than one run's interval shows."""
    small = v["largest_group_3d"] < v["largest_group_1d"]
    parts = [(HOLDS if small else DOES_NOT_HOLD,
              f"the 3D grid's largest group is {v['largest_group_3d']} against {v['largest_group_1d']}")]
    if v.get("sent_mb_3d") is None:
        parts.append(decide(v["ratio"], 1 - GROUP_MARGIN, "<=", what="exposed communication 3D / 1D"))
    else:
        less = v["sent_mb_3d"] / v["sent_mb_1d"]
        parts.append((HOLDS if less <= 1 - GROUP_MARGIN else DOES_NOT_HOLD,
                      f"a rank sends {less:.2f}x the bytes on the 3D grid (counted; needed <= "
                      f"{1 - GROUP_MARGIN:.2f}x); "
                      f"its exposed communication 3D / 1D, {text(v['ratio'])}, is shown, not judged: on shared cores "
                      "it moves with which ranks share a core"))
    return all_of(*parts)


CLAIMS = [
    Claim("e", "3D tensor parallelism keeps communication in small groups, so it communicates less",
          {"value": "no number: row x column x depth groups instead of one group over all tensor-parallel GPUs",
           "source": SINGH + ", its 3D tensor parallelism (after Agarwal's 3D matrix multiply)"},
          groups_live, groups_recorded, groups_model, groups_judge),
]
