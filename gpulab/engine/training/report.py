"""What rank 0 of a training run reports at its end: the summary (one JSON line) and the timeline in words.

    summary = run_summary(config, model, losses, vals, wall_s)      # the fields every run has
    add_timing(summary, config, model, per_rank, memories, peak)    # the timeline, throughput, MFU, memory
    print(timeline_report(summary["timeline"], summary["memory"], ...))

The timeline is averaged over ranks and over the steps after ``WARMUP_STEPS``; MFU is
measured against the best matmul of the run's dtype on its device (``perf.timing.peak_matmul``).
"""

from __future__ import annotations

import numpy as np

from gpulab.engine.parallel import timeline
from gpulab.engine.perf.flops import model_flops
from gpulab.jobsite import topology_metadata

WARMUP_STEPS = 3  # steps left out of the timeline summary (caches, thread pools, first allocations)
PEAK_WHERE = {"host": "all cores", "cupy": "this GPU", "fake": "all cores (fake device)"}


def steady(summaries: list[dict]) -> dict | None:
    """This rank's mean timeline over the steps after the warm-up (None for a run of no steps)."""
    kept = summaries[min(WARMUP_STEPS, len(summaries) - 1):] if summaries else []
    return timeline.mean_summary(kept) if kept else None


def run_summary(config, model, losses: list[float], vals: list[float], wall_s: float) -> dict:
    """The losses, the run's settings and where it ran."""
    head = float(np.mean(losses[:10])) if losses else float("nan")
    tail = float(np.mean(losses[-10:])) if losses else float("nan")
    return {"first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
            "first10_mean": head, "last10_mean": tail,
            "val_loss": float(np.mean(vals)) if vals else None, "steps": config.steps,
            "wall_s": round(wall_s, 2), "mesh": list(config.shape), "pipe": config.pipe,
            "micro_batches": config.micro_batches, "schedule": config.schedule, "checkpoint": str(config.out),
            "recompute": config.recompute, "distributed_optimizer": config.distributed_optimizer,
            "sequence_parallel": config.sequence_parallel, "virtual_stages": config.virtual_stages,
            "overlap": config.overlap.label(), "device": config.device, "dtype": model.dtype,
            "topology": topology_metadata()}


def add_timing(summary: dict, config, model, per_rank: list[dict], memories: list[dict], peak: float) -> None:
    """The timeline (mean over ranks), tokens/s, model FLOP/s, MFU and memory (max over ranks)."""
    tl = timeline.mean_summary(per_rank)
    summary["timeline"] = {k: round(v, 6) for k, v in tl.items() if k != "groups"}
    summary["timeline"]["groups"] = tl["groups"]
    summary["tokens_per_s"] = round(config.batch_size * model.block_size / tl["wall_s"], 1)
    flops_per_s = model_flops(model, config.batch_size, model.block_size) / tl["wall_s"]
    summary["model_flops_per_s"], summary["peak_flops"] = flops_per_s, peak
    summary["mfu"] = flops_per_s / peak
    summary["memory"] = {k: max(m[k] for m in memories) for k in memories[0]}


def timeline_report(s: dict, memory: dict, tokens_per_s: float, flops_per_s: float, peak: float,
                    peak_what: str = "best float32 matmul on all cores") -> str:
    """The per-iteration timeline summary, as ``gpulab train`` prints it."""
    ms = 1e3
    lines = [f"timeline per iteration (mean over ranks): {s['wall_s'] * ms:.1f} ms = compute "
             f"{s['compute_s'] * ms:.1f} ms + exposed communication {s['exposed_comm_s'] * ms:.1f} ms; "
             f"hidden (overlapped) communication {s['hidden_comm_s'] * ms:.1f} ms",
             f"throughput {tokens_per_s:.0f} tokens/s, {flops_per_s / 1e9:.2f} model GFLOP/s, MFU "
             f"{flops_per_s / peak:.1%} of this machine's measured peak ({peak / 1e9:.1f} GFLOP/s, "
             f"{peak_what})"]
    for group, g in sorted(s["groups"].items()):
        lines.append(f"  {group:>6}: {g['calls']:.0f} calls, {g['bytes'] / 1e6:.2f} MB, in flight "
                     f"{g['flight_s'] * ms:.1f} ms, exposed {g['exposed_s'] * ms:.1f} ms")
    lines.append("memory per rank (max over ranks): " + ", ".join(
        f"{k} {v / 1e6:.2f} MB" for k, v in memory.items()))
    return "\n".join(lines)


def print_timing(summary: dict, config) -> None:
    """``timeline_report`` of a summary that ``add_timing`` filled."""
    print(timeline_report(summary["timeline"], summary["memory"], summary["tokens_per_s"],
                          summary["model_flops_per_s"], summary["peak_flops"],
                          f"best {summary['dtype']} matmul on {PEAK_WHERE[config.device]}"), flush=True)
