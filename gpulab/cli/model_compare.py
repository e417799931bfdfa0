"""``gpulab model compare``: AxoNN against Megatron-LM, ZeRO-3, hybrid sharding and DDP, predicted, beside the paper.

    gpulab model compare --world 1024 --model gpt-80b --machine perlmutter
    gpulab model compare --world 1024 --model gpt-80b --global-batch 512 --json

Each strategy's fastest configuration that fits in memory (``gpulab.engine.perf.compare``; Megatron-LM
as a tuned run uses it: interleaved stages, sequence parallelism, the distributed optimizer), its
iteration time, memory per GPU, share of exposed communication, MFU and HFU; then the predicted gap and
utilisation beside the AxoNN paper's 26% and 57%, and every assumption.
"""

from __future__ import annotations

import json

from gpulab.cli.checks import positive_int, usage_error
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.perf.compare import DEFAULT_GLOBAL_BATCH, against_paper, assumptions, compare, paper_lines
from gpulab.engine.perf.machines import MACHINES, machine
from gpulab.engine.perf.predict import DEFAULT_BUCKET_MB, DEFAULT_OVERLAP, model_config
from gpulab.engine.strategies import TABLE


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="AxoNN vs Megatron-LM, ZeRO-3, HSDP, DDP: best configuration of each")
    p.add_argument("--world", type=positive_int, required=True, help="number of GPUs")
    p.add_argument("--model", default="gpt-80b", help="gpt-5b ... gpt-640b, or a GPTConfig JSON file")
    p.add_argument("--machine", default=None, help=f"one of {', '.join(MACHINES)} (h100 = dgx-h100) "
                   "(default: $GPULAB_MACHINE, else perlmutter)")
    p.add_argument("--global-batch", type=positive_int, default=DEFAULT_GLOBAL_BATCH,
                   help=f"sequences per iteration (default {DEFAULT_GLOBAL_BATCH})")
    p.add_argument("--seq-len", type=positive_int, default=None, help="default: the model's block size")
    p.add_argument("--strategies", default=",".join(TABLE), help=f"subset of {','.join(TABLE)}")
    p.add_argument("--overlap", default=DEFAULT_OVERLAP, help=f"default {DEFAULT_OVERLAP}")
    p.add_argument("--bucket-mb", type=float, default=DEFAULT_BUCKET_MB)
    p.add_argument("--distributed-optimizer", action="store_true",
                   help="shard AdamW's fp32 states over data replicas too (Megatron-LM's, ZeRO-1), every strategy")
    p.add_argument("--json", action="store_true", help="print the rows and assumptions as JSON")
    p.set_defaults(func=main)


def main(args) -> int:
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in TABLE]
    if unknown or not strategies:
        usage_error(f"gpulab model compare: unknown strategies {unknown}; choose from {', '.join(TABLE)}")
    try:
        m, config = machine(args.machine, default="perlmutter"), model_config(args.model)
        overlap = Overlap.parse(args.overlap, bucket_bytes=int(args.bucket_mb * 2**20))
    except (KeyError, ValueError, OSError) as err:
        usage_error(f"gpulab model compare: {str(err).strip(chr(39))}")
    T = args.seq_len or config.block_size
    rows = compare(config, args.world, args.global_batch, m, overlap, seq_len=T, strategies=strategies,
                   distributed_optimizer=args.distributed_optimizer)
    notes = assumptions(m, args.global_batch, T, overlap, args.distributed_optimizer) + m.assumptions()
    paper = against_paper(rows)
    if args.json:
        print(json.dumps({"model": args.model, "world": args.world, "machine": m.name,
                          "global_batch": args.global_batch, "seq_len": T, "rows": rows, "paper": paper,
                          "assumptions": notes}, indent=1))
        return 0
    print(f"{args.model} on {args.world} x {m.name}, global batch {args.global_batch} x {T} tokens")
    print(table(rows))
    if paper is not None:
        print("\n".join(paper_lines(paper)))
    print("assumptions:\n  " + "\n  ".join(notes))
    return 0


def table(rows: list[dict]) -> str:
    head = (f"{'strategy':<9} {'best configuration':<44} {'m':>4} {'recomp':>6} {'iter s':>8} {'mem GB':>7} "
            f"{'comm':>5} {'bubble':>6} {'MFU':>6} {'HFU':>6} {'MFU/matmul':>10}")
    lines = [head]
    for r in rows:
        if not r["fits"]:
            lines.append(f"{r['strategy']:<9} {r['why']}")
            continue
        lines.append(_line(r["strategy"], r))
        tp = r.get("best_with_tensor_parallelism")
        if tp is not None and tp["config"] != r["config"]:
            lines.append(_line("  with TP", tp))
        if r.get("untuned") is not None:  # the same strategy without the features its tuned run uses
            lines.append(_line("  untuned", r["untuned"]))
    return "\n".join(lines)


def _line(label: str, r: dict) -> str:
    return (f"{label:<9} {r['config']:<44} {r['micro_batches']:>4} {'on' if r['recompute'] else 'off':>6} "
            f"{r['iter_s']:>8.3g} {r['memory']['total'] / 1e9:>7.1f} {r['comm_share']:>5.0%} {r['bubble']:>6.0%} "
            f"{r['mfu']:>6.1%} {r['hfu']:>6.1%} {r['mfu_matmul']:>10.1%}")
