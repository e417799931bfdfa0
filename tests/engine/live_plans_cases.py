"""Rank-side cases of tests/engine/test_live_plans.py: each strategy's plan trained on the ranks."""

from gpulab.engine import GPTConfig
from gpulab.engine.perf.live_plans import measure_plan, predicted_bytes

CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, dtype="float32")
BATCH = 8


def measure_plans(comm, plans):
    """Measure every plan on this job's ranks; rank 0 returns (strategy, bytes measured, predicted, row)."""
    out = []
    for plan in plans:
        plan = {**plan, "shape": tuple(plan["shape"]), "predicted": {"config": plan["strategy"]},
                "predicted_bytes": predicted_bytes(CFG, plan["shape"], plan["pipe"], BATCH)}
        row = measure_plan(comm, CFG, plan, BATCH, iters=2, warmup=1)
        if comm.rank == 0:
            out.append({"strategy": plan["strategy"], "measured": row["bytes_by_group"],
                        "predicted": row["predicted_bytes"], "iter_s": row["iter_s"], "pipe": row["pipe"],
                        "micro_batches": row["micro_batches"]})
    return out
