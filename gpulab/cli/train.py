"""``gpulab train``: train a character-level GPT on the shipped corpus, on a 4D mesh.

    gpulab train --mesh 1,2,2,1 -n 4              # row,col,depth,data; 4 ranks
    gpulab train --mesh 2,1,1,1 --resume results/gpt.npz --steps 100   # other grid, go on
    gpulab train --mesh 1,1,2,2 --overlap all     # overlap communication (gpulab.engine.parallel.overlap)
    gpulab train --mesh 1,2,1,1 --device cupy --dtype float16   # on GPUs, mixed precision
    gpulab train --strategy megatron -n 4         # a named strategy picks the grid (gpulab.engine.strategies)
    gpulab train -n 4 --steps 30                  # only -n: the axonn strategy's grid (one printed line says which)
    gpulab train --mesh 1,1,1,1 --pipe 4 --micro-batches 8 --n-layer 4   # 4 pipeline stages, 1F1B
    gpulab train --mesh 2,1,1,2 --recompute selective --distributed-optimizer --sequence-parallel
    gpulab train --mesh 1,1,1,1 --pipe 2 --schedule interleaved --virtual-stages 2 --n-layer 4

The flags become a ``TrainConfig`` (``gpulab.engine.training.config``), checked whole before
anything launches; outside an MPI job the command then re-launches itself under ``mpiexec -n N``
(``gpulab.launch.relaunch``), and every rank runs ``gpulab.engine.training.loop.train`` on it.
"""

from __future__ import annotations

import math
from dataclasses import fields

from gpulab.backend import DEVICES
from gpulab.cli.checks import nonnegative_float, nonnegative_int, output_path, positive_float, positive_int, usage_error
from gpulab.emulated.topology import add_topology_args, topology_context
from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.parallel.overlap import PROGRESS, Overlap
from gpulab.engine.parallel.pipeline import SCHEDULES
from gpulab.engine.strategies import STRATEGIES, describe, pick_shape
from gpulab.engine.training import checkpoint
from gpulab.engine.training.config import NEW_MODEL, TrainConfig, TrainConfigError
from gpulab.engine.training.loop import train
from gpulab.launch import inside_mpi_job, relaunch, run_on_ranks

# (flags, argparse keywords): one list drives the parser and the re-launch argv
_OPTIONS = [
    (("--mesh",), dict(default=None, help="grid row,col,depth,data (default: with -n, the axonn strategy's "
                                          "grid for -n ranks; else 1,1,1,1)")),
    (("--strategy",), dict(default=None, choices=tuple(STRATEGIES),
                           help="instead of --mesh: a grid for -n ranks (divided by --pipe), " + "; ".join(
                               f"{k} = {v}" for k, v in STRATEGIES.items()))),
    (("--pipe",), dict(type=positive_int, default=1, help="pipeline stages around the mesh (default 1); "
                                                       "ranks = product of --mesh x pipe")),
    (("--micro-batches",), dict(type=positive_int, default=None,
                                help="micro-batches per step with --pipe (default: the number of stages)")),
    (("--schedule",), dict(default="1f1b", choices=SCHEDULES, help="pipeline schedule (default 1f1b)")),
    (("--recompute",), dict(default=None, choices=("selective", "full"),
                            help="activation recomputation: selective (attention probabilities rebuilt in "
                                 "backward) or full (each block's forward rerun); default none")),
    (("--distributed-optimizer",), dict(action="store_true",
                                        help="Megatron-LM's distributed optimizer (ZeRO-1): gradients "
                                             "reduce-scattered, AdamW's state split over the data group, "
                                             "parameters all-gathered after the step")),
    (("--sequence-parallel",), dict(action="store_true",
                                    help="Megatron-LM's sequence parallelism over row: LayerNorm and the residual "
                                         "on T/row positions, the row all-reduces as reduce-scatter + all-gather")),
    (("--virtual-stages",), dict(type=positive_int, default=1,
                                 help="model chunks per pipeline stage with --schedule interleaved (default 1)")),
    (("-n", "--nprocs"), dict(type=positive_int, default=None,
                              help="MPI ranks (default: product of --mesh times --pipe)")),
    (("--steps",), dict(type=positive_int, default=500, help="optimizer steps to run (default 500)")),
    (("--batch-size",), dict(type=positive_int, default=32, help="global batch, sequences (default 32)")),
    # the model: unset, they come from the checkpoint with --resume (a different value is an error),
    # else from NEW_MODEL
    (("--block-size",), dict(type=positive_int, default=None, help="sequence length T (default 64)")),
    (("--n-layer",), dict(type=positive_int, default=None, help="transformer blocks (default 2)")),
    (("--n-head",), dict(type=positive_int, default=None, help="attention heads (default 4)")),
    (("--n-embd",), dict(type=positive_int, default=None, help="embedding width (default 64)")),
    (("--dtype",), dict(default=None, choices=["float16", "float32", "float64"], help="default float32")),
    (("--device",), dict(default="host", choices=tuple(DEVICES),
                         help="where arrays live: " + ", ".join(f"{k} = {v}" for k, v in DEVICES.items()))),
    (("--lr",), dict(type=positive_float, default=5e-3, help="peak learning rate (default 5e-3)")),
    (("--warmup",), dict(type=nonnegative_int, default=20, help="linear warm-up steps (default 20)")),
    (("--weight-decay",), dict(type=nonnegative_float, default=0.1)),
    (("--grad-clip",), dict(type=positive_float, default=1.0, help="max global gradient norm (default 1)")),
    (("--seed",), dict(type=int, default=0)),
    (("--corpus",), dict(default=None, help="text file (default: the shipped KJV Genesis+Exodus)")),
    (("--out",), dict(type=output_path, default="results/gpt.npz", help="checkpoint path (default results/gpt.npz)")),
    (("--checkpoint-every",), dict(type=nonnegative_int, default=0,
                                   help="also write the checkpoint every N steps (default 0: at the end, and on "
                                        "Ctrl-C)")),
    (("--log",), dict(type=output_path, default=None, help="loss log, JSON lines (default: <out>.loss.jsonl)")),
    (("--resume",), dict(default=None, help="checkpoint to continue from (any grid shape)")),
    (("--eval-batches",), dict(type=nonnegative_int, default=4, help="validation batches at the end")),
    (("--sample",), dict(type=nonnegative_int, default=200, help="characters to sample at the end (0: none)")),
    (("--log-every",), dict(type=positive_int, default=50, help="print the loss every N steps")),
    (("--no-progress",), dict(action="store_true", help="no tqdm bar")),
    (("--overlap",), dict(default="none", help="none, all, or a list of oar,ors,oag,cache,buckets")),
    (("--progress-mode",), dict(default="poll", choices=PROGRESS,
                                help="who moves collectives in flight (default poll; mpich: MPICH's "
                                     "progress thread, the job started with MPIR_CVAR_ASYNC_PROGRESS=1)")),
    (("--bucket-kb",), dict(type=positive_int, default=256, help="gradient bucket size with --overlap buckets")),
]


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a small GPT on a 4D (row,col,depth,data) mesh",
                                   description=__doc__.splitlines()[0])
    for flags, kwargs in _OPTIONS:
        parser.add_argument(*flags, **kwargs)
    add_topology_args(parser)  # --nodes/--link/--placement: an emulated cluster for the launch
    parser.set_defaults(func=main)


def parse_mesh(text: str) -> tuple[int, int, int, int]:
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        raise SystemExit(f"--mesh must be four positive ints row,col,depth,data; got {text!r}")
    return shape


def strategy_shape(args, strategy: str | None = None) -> tuple[int, int, int, int]:
    """The grid ``--strategy`` (or ``strategy``, for -n alone) picks for ``-n`` ranks, this model and batch;
    one line if none."""
    given = strategy is None
    strategy = args.strategy if given else strategy
    flag = f"--strategy {strategy}" if given else f"-n {args.nprocs} without --mesh (the {strategy} strategy's grid)"
    if args.mesh is not None:
        usage_error("gpulab train: give --mesh or --strategy, not both")
    if args.nprocs is None:
        usage_error(f"gpulab train: --strategy {strategy} needs -n (the number of ranks)")
    if args.nprocs % args.pipe:
        usage_error(f"gpulab train: -n {args.nprocs} is not divisible by --pipe {args.pipe}")
    ranks = args.nprocs // args.pipe  # the strategy's grid is one stage's
    # the vocabulary is padded to a multiple of lcm(8, row) when the corpus is read: never the obstacle
    config = GPTConfig(vocab_size=math.lcm(8, ranks), block_size=args.block_size, n_layer=args.n_layer,
                       n_head=args.n_head, n_embd=args.n_embd)
    try:
        shape = pick_shape(strategy, ranks, config, args.batch_size)
    except ValueError as err:
        usage_error(f"gpulab train: {flag}: {err}")
    if not inside_mpi_job():
        stages = f" x {args.pipe} pipeline stages" if args.pipe > 1 else ""
        mesh = f"mesh {','.join(map(str, shape))} ({describe(shape)}){stages}"
        if given:
            print(f"--strategy {strategy} on {args.nprocs} ranks: {mesh}")
        else:
            print(f"-n {args.nprocs} without --mesh: {mesh}, the {strategy} strategy's pick ({WHY_DEFAULT}); "
                  f"--mesh or --strategy chooses another")
    return shape


# Why -n alone gets the axonn strategy's grid rather than the performance model's best: the model needs a
# profile of this computer (``gpulab model fit``, a minute of MPI probes) and its ranking for a model this
# small on shared CPU cores is within its own error; the axonn pick is instant, the same on every machine,
# and exercises every grid dimension the lessons are about.
DEFAULT_STRATEGY = "axonn"
WHY_DEFAULT = "every grid dimension that splits this model and batch, then the most 3D tensor parallelism"


def _argv(args) -> list[str]:
    """The command-line arguments that reproduce ``args`` (for the re-launch)."""
    out = []
    for flags, kwargs in _OPTIONS:
        dest = flags[-1].lstrip("-").replace("-", "_")
        value = getattr(args, dest)
        if kwargs.get("action") == "store_true":
            out += [flags[-1]] if value else []
        elif value is not None:
            out += [flags[-1], str(value)]
    return out


def main(args) -> int:
    resolve_model(args)
    if args.strategy:
        shape = strategy_shape(args)
    elif args.mesh is None and args.nprocs is not None:
        shape = strategy_shape(args, DEFAULT_STRATEGY)
        args.mesh = ",".join(map(str, shape))  # the re-launched ranks take the grid as given, silently
    else:
        shape = parse_mesh(args.mesh or "1,1,1,1")
    n = math.prod(shape) * args.pipe
    if args.nprocs is not None and args.nprocs != n:
        raise SystemExit(f"gpulab train: -n {args.nprocs} does not match --mesh {','.join(map(str, shape))} "
                         f"--pipe {args.pipe} (row*col*depth*data*pipe = {n})")
    config = train_config(args, shape)
    if not inside_mpi_job():
        env = {"MPIR_CVAR_ASYNC_PROGRESS": "1"} if args.progress_mode == "mpich" else {}
        with topology_context(args):
            return relaunch(n, ["train", *_argv(args)], env=env)
    return run_on_ranks(train, config)


# TrainConfig's fields that are flags of the same name (the others: --mesh, --overlap, --no-progress)
_SAME_NAME = [f.name for f in fields(TrainConfig) if f.name not in ("shape", "overlap", "progress_bar")]


def train_config(args, shape) -> TrainConfig:
    """The run the flags describe; values that cannot train together (stages the model or the batch
    cannot feed, a grid that cannot split the model) end the command before launching: exit 2, one
    line naming the flags."""
    try:
        overlap = Overlap.parse(args.overlap, progress=args.progress_mode, bucket_bytes=args.bucket_kb << 10)
    except ValueError as err:
        usage_error(f"gpulab train: --overlap {args.overlap}: {err}")
    try:
        return TrainConfig(shape=shape, overlap=overlap, progress_bar=not args.no_progress,
                           **{name: getattr(args, name) for name in _SAME_NAME})
    except TrainConfigError as err:
        usage_error(f"gpulab train: {' '.join(_flag(k, v) for k, v in err.values.items())}: {err.reason}")


def _flag(field: str, value) -> str:
    """A TrainConfig field and its value as the flag that sets it."""
    if field == "shape":
        return "--mesh " + ",".join(map(str, value))
    if field == "progress_bar":
        return "--no-progress"
    flag = "--" + field.replace("_", "-")
    return flag if isinstance(value, bool) else f"{flag} {value}"


def resolve_model(args) -> None:
    """Fill the model flags left unset, from the --resume checkpoint or NEW_MODEL.

    The checkpoint is read and checked whole here, before any rank starts: a
    damaged file, one without tokenizer data, or flags that contradict the
    model it holds end the command with one line naming the file and the fault.
    """
    if not args.resume:
        for flag, value in NEW_MODEL.items():
            if getattr(args, flag) is None:
                setattr(args, flag, value)
        return
    try:
        ck = checkpoint.load(args.resume)
    except checkpoint.CheckpointError as err:
        raise SystemExit(f"gpulab train: --resume {err}") from None
    if not isinstance(ck.extra.get("chars"), str) or not ck.extra["chars"]:
        raise SystemExit(f"gpulab train: --resume {args.resume}: no tokenizer data in the checkpoint (extra.chars)")
    held = ck.config.to_dict()
    differ = [f"--{flag.replace('_', '-')} {getattr(args, flag)} (the checkpoint's is {held[flag]})"
              for flag in NEW_MODEL if getattr(args, flag) is not None and getattr(args, flag) != held[flag]]
    if differ:
        raise SystemExit(f"gpulab train: --resume {args.resume} holds another model: {'; '.join(differ)}")
    for flag in NEW_MODEL:
        setattr(args, flag, held[flag])
