"""``gpulab model memory``: memory per GPU, broken down, against the device, without a cluster.

    gpulab model memory --model gpt-80b --mesh 4,8,2,16 --machine perlmutter
    gpulab model memory --model gpt-80b --mesh 8,1,4,8 --pipe 4 --micro-batches 16 --schedule 1f1b \\
        --recompute full --zero 1 --global-batch 1024 --machine perlmutter
    gpulab model memory --model gpt-80b --mesh 8,1,4,8 --recompute selective --no-flash --sequence-parallel

Weights, gradients, optimizer state, activations (per layer x layers x micro-batches in flight),
the overlap's gathered-weight buffers and communication buffers of the busiest pipeline stage
(``gpulab.engine.perf.memory_model``), their total against the device, and what to change when
it does not fit. docs/memory.md has the formulas and their sources.
"""

from __future__ import annotations

import json

from gpulab.cli.checks import positive_int, usage_error
from gpulab.engine.parallel.gpt import check_divisibility
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.pipeline import SCHEDULES, check_pipeline
from gpulab.engine.perf.machines import MACHINES, machine
from gpulab.engine.perf.memory_model import KINDS, ZERO_STAGES, fit, machine_precision, memory_breakdown
from gpulab.engine.perf.predict import DEFAULT_BUCKET_MB, DEFAULT_OVERLAP, model_config

LABELS = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state",
          "activations": "activations", "weight_cache": "gathered weights (overlap)",
          "working_set": "backward's working set", "comm_buffers": "communication buffers"}


def add_parser(sub) -> None:
    p = sub.add_parser("memory", help="memory per GPU by kind, against the device (no cluster needed)")
    p.add_argument("--model", default="gpt-80b", help="gpt-5b ... gpt-640b, or a GPTConfig JSON file")
    p.add_argument("--mesh", required=True, help="row,col,depth,data")
    p.add_argument("--pipe", type=positive_int, default=1, help="pipeline stages (default 1)")
    p.add_argument("--micro-batches", type=positive_int, default=None, help="default: one per stage")
    p.add_argument("--schedule", choices=SCHEDULES, default="1f1b")
    p.add_argument("--recompute", choices=("none", "selective", "full"), default="none",
                   help="selective: the attention probabilities rebuilt in backward; full: each layer's input kept")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="the LayerNorm and residual region split over row along the sequence (Megatron-LM's SP)")
    p.add_argument("--zero", type=int, choices=ZERO_STAGES, default=0,
                   help="shard over the data replicas: 1 optimizer, 2 + gradients, 3 + weights")
    p.add_argument("--global-batch", type=positive_int, default=1024, help="sequences per iteration")
    p.add_argument("--seq-len", type=positive_int, default=None, help="default: the model's block size")
    p.add_argument("--machine", default="perlmutter", help=f"one of {', '.join(MACHINES)}")
    p.add_argument("--overlap", default=DEFAULT_OVERLAP, help=f"none, all or a list (default {DEFAULT_OVERLAP})")
    p.add_argument("--bucket-mb", type=float, default=DEFAULT_BUCKET_MB)
    p.add_argument("--no-flash", action="store_true", help="keep the T x T attention probabilities")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=main)


def _shape(text: str) -> tuple[int, int, int, int]:
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        raise ValueError(f"--mesh must be four positive ints row,col,depth,data, got {text!r}")
    return shape


def breakdown(args) -> tuple[dict, dict, object]:
    """The breakdown, its fit and the machine for parsed arguments; ValueError/KeyError on bad input."""
    m, config = machine(args.machine), model_config(args.model)
    shape = _shape(args.mesh)
    micro = args.micro_batches or args.pipe
    T = args.seq_len or config.block_size
    if args.global_batch % micro:
        raise ValueError(f"--global-batch ({args.global_batch}) must be divisible by --micro-batches ({micro})")
    check_divisibility(config, shape, args.global_batch // micro)
    check_pipeline(config.n_layer, args.pipe, micro, args.schedule)
    overlap = Overlap.parse(args.overlap, bucket_bytes=int(args.bucket_mb * 2**20))
    b = memory_breakdown(config, shape, global_batch=args.global_batch, precision=machine_precision(m),
                         pipe=args.pipe, micro_batches=micro, schedule_kind=args.schedule,
                         recompute=args.recompute != "none" and args.recompute,
                         sequence_parallel=args.sequence_parallel, zero=args.zero, overlap=overlap, seq_len=T,
                         flash_attention=not args.no_flash)
    return b, fit(b, m), m


def main(args) -> int:
    try:
        b, f, m = breakdown(args)
    except (KeyError, ValueError, OSError) as err:
        usage_error(f"gpulab model memory: {err.args[0] if isinstance(err, KeyError) else err}")
    if args.json:
        print(json.dumps({"breakdown": b, "fit": f}, indent=1))
        return 0
    R, C, D, P = _shape(args.mesh)
    print(f"{args.model} on {R * C * D * P * args.pipe} x {m.name} (row {R} x col {C} x depth {D} x data {P} "
          f"x pipe {args.pipe}), global batch {args.global_batch}: memory per GPU of stage {b['stage']}, the busiest")
    print(table(b, f))
    return 0


RECOMPUTED = {"full": ", recomputed: inputs + one layer", "selective": ", attention recomputed"}


def table(b: dict, f: dict) -> str:
    lines = [f"  {LABELS[k]:<28} {b[k] / 1e9:>9.2f} GB" for k in KINDS]
    lines[3] += (f"  ({b['activations_per_layer'] / 1e9:.3g} GB per layer and micro-batch kept whole; "
                 f"{b['layers']} layers{RECOMPUTED.get(b['recompute'], '')}; "
                 f"x {b['in_flight']} micro-batches in flight)")
    lines.append(f"  {'total':<28} {b['total'] / 1e9:>9.2f} GB of {f['limit'] / 1e9:.1f} GB usable "
                 f"({f['device_bytes'] / 1e9:g} GB device): {'fits' if f['fits'] else 'does NOT fit'}")
    if not f["fits"]:
        lines.append("to fit, try:\n    " + "\n    ".join(f["advice"]))
    return "\n".join(lines)
