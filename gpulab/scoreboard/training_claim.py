"""Claim (i) of the broadcast paper: a faster broadcast shortens data-parallel training (CNTK in miniature)."""

from __future__ import annotations

import statistics

from gpulab.scoreboard import recorded as rec
from gpulab.scoreboard.bcast_claims import machine_of
from gpulab.scoreboard.claim import AWAN, DOES_NOT_HOLD, Claim
from gpulab.scoreboard.evidence import decide, ratio, share_text, unpaired

LINK = "100mbit"  # as docs/emulated_training.md: the 3.2 MB gradient takes a few link transfers' worth
STEPS = {True: (1, 1), False: (2, 1)}  # steps timed per round; untimed steps once per broadcast before the rounds
PAPER_SCALE = {"profile": "kesch", "network": "vgg16", "p": 128}  # the paper's CNTK run: VGG, 128 K80 GPUs
TRAIN_MARGIN = 0.03  # the iteration must be 3% shorter: under half the paper's whole gain (7%), more than a tie


def training_value(mpi: list[float], auto: list[float], identical: bool, paired: bool = True) -> dict:
    """Step times with each broadcast: the tuned one's over MPI_Bcast's, paired by round (``paired``), or
    as a ratio of medians (a record's two runs, one after the other)."""
    return {"mpi_step_ms": statistics.median(mpi) * 1e3, "auto_step_ms": statistics.median(auto) * 1e3,
            "auto_over_mpi": ratio(auto, mpi) if paired else unpaired(auto, mpi), "identical_parameters": identical}


def _text(v: dict) -> str:
    return (f"iteration {v['mpi_step_ms']:.0f} ms with MPI_Bcast, {v['auto_step_ms']:.0f} ms tuned "
            f"({share_text(v['auto_over_mpi'], -1)} shorter)" + ("" if v["identical_parameters"] else
                                                                 "; parameters DIFFER"))


def at_paper_scale() -> dict:
    """The cost model's reduce + broadcast of VGG-16's gradient on the paper's machine profile."""
    from gpulab.bcast.cost.profiles import profile
    from gpulab.workloads import parameter_count
    from gpulab.workloads.gradient_sync import predicted_sync

    nbytes = parameter_count(PAPER_SCALE["network"]) * 4  # float32 gradients
    return predicted_sync(nbytes, PAPER_SCALE["p"], profile(PAPER_SCALE["profile"]))


def model_value(fit: dict, nbytes: int, p: int) -> dict:
    from gpulab.workloads.gradient_sync import predicted_sync

    here, scale = predicted_sync(nbytes, p, machine_of(fit)), at_paper_scale()
    return {"value": {"sync_saving_here": here["sync_saving"], "sync_saving_paper_scale": scale["sync_saving"]},
            "text": f"reduce + broadcast {here['sync_saving']:.0%} shorter here, {scale['sync_saving']:.0%} for "
                    f"VGG-16 on {PAPER_SCALE['p']} GPUs ({PAPER_SCALE['profile']})"}


def training_live(bench) -> dict:
    steps, prime = STEPS[bench.quick]
    with bench.cluster(4, 1, LINK) as where:
        fit = bench.bcast_fit(where, 4)
        out = bench.on_ranks(4, "train", {"steps": steps, "prime": prime, "rounds": bench.rounds,
                                          "algorithms": ["mpi", "auto"]}, table=fit)
    value = training_value(out["mpi"]["step_s_rounds"], out["auto"]["step_s_rounds"],
                           out["mpi"]["digest"] == out["auto"]["digest"])
    return {"value": value, "text": _text(value), "where": where.describe(4),
            "model": {**model_value(fit, out["mpi"]["gradient_bytes"], 4), "source": "cost model fitted here"}}


def _recorded_runs() -> tuple[dict, dict, dict]:
    data = rec.read("emulated_training_4x1.json")
    runs = {r["algorithm"]: r for r in data["runs"]}
    return data, runs["mpi"], runs["auto"]


def recorded_steps(data: dict, run: dict) -> list[float]:
    """A recorded run's step times after its warm-up: the slowest rank's compute + reduce + broadcast."""
    return [max(r[s]["compute_s"] + r[s]["reduce_s"] + r[s]["bcast_s"] for r in run["ranks"])
            for s in range(data["warmup"], data["steps"])]


def training_recorded() -> dict:
    data, mpi, auto = _recorded_runs()
    value = training_value(recorded_steps(data, mpi), recorded_steps(data, auto), data["identical_parameters"],
                           paired=False)
    return {"value": value, "text": _text(value), "source": rec.source("emulated_training_4x1.json")}


def training_model(bench) -> dict:
    data, mpi, _ = _recorded_runs()
    return {**model_value(data["model"], mpi["gradient_bytes"], len(data["topology"]["rank_nodes"])),
            "source": "cost model fitted in " + rec.source("emulated_training_4x1.json")}


def training_judge(v: dict, model: dict | None) -> tuple[str, str]:
    if not v["identical_parameters"]:
        return DOES_NOT_HOLD, "the two broadcasts trained different parameters: the synchronisation is wrong"
    verdict, why = decide(v["auto_over_mpi"], 1 - TRAIN_MARGIN, "<=", what="the iteration tuned / with MPI_Bcast")
    return verdict, why + "; same parameters bit for bit"


CLAIMS = [
    Claim("i", "a tuned broadcast shortens data-parallel training whose gradients are reduced then broadcast",
          {"value": "up to 7% faster VGG training with CNTK on 128 GPUs", "source": AWAN},
          training_live, training_recorded, training_model, training_judge),
]
