"""``gpulab train``: train a character-level GPT on the shipped corpus, on a 4D mesh.

    gpulab train --mesh 1,2,2,1 -n 4              # row,col,depth,data; 4 ranks
    gpulab train --mesh 2,1,1,1 --resume results/gpt.npz --steps 100   # other grid, go on
    gpulab train --mesh 1,1,2,2 --overlap all     # overlap communication (gpulab.engine.parallel.overlap)
    gpulab train --mesh 1,2,1,1 --device cupy --dtype float16   # on GPUs, mixed precision

Outside an MPI job the command re-launches itself under ``mpiexec -n N``
(``gpulab.launch.relaunch``); the loop itself is ``gpulab.engine.training.loop``.
"""

from __future__ import annotations

import math

from gpulab.backend import DEVICES
from gpulab.engine.parallel.overlap import PROGRESS
from gpulab.engine.training.loop import train
from gpulab.launch import inside_mpi_job, relaunch

# (flags, argparse keywords): one list drives the parser and the re-launch argv
_OPTIONS = [
    (("--mesh",), dict(default="1,1,1,1", help="grid row,col,depth,data (default 1,1,1,1)")),
    (("-n", "--nprocs"), dict(type=int, default=None, help="MPI ranks (default: product of --mesh)")),
    (("--steps",), dict(type=int, default=500, help="optimizer steps to run (default 500)")),
    (("--batch-size",), dict(type=int, default=32, help="global batch, sequences (default 32)")),
    (("--block-size",), dict(type=int, default=64, help="sequence length T (default 64)")),
    (("--n-layer",), dict(type=int, default=2)),
    (("--n-head",), dict(type=int, default=4)),
    (("--n-embd",), dict(type=int, default=64)),
    (("--dtype",), dict(default="float32", choices=["float16", "float32", "float64"])),
    (("--device",), dict(default="host", choices=tuple(DEVICES),
                         help="where arrays live: " + ", ".join(f"{k} = {v}" for k, v in DEVICES.items()))),
    (("--lr",), dict(type=float, default=5e-3, help="peak learning rate (default 5e-3)")),
    (("--warmup",), dict(type=int, default=20, help="linear warm-up steps (default 20)")),
    (("--weight-decay",), dict(type=float, default=0.1)),
    (("--grad-clip",), dict(type=float, default=1.0, help="max global gradient norm (default 1)")),
    (("--seed",), dict(type=int, default=0)),
    (("--corpus",), dict(default=None, help="text file (default: the shipped KJV Genesis+Exodus)")),
    (("--out",), dict(default="results/gpt.npz", help="checkpoint path (default results/gpt.npz)")),
    (("--log",), dict(default=None, help="loss log, JSON lines (default: <out>.loss.jsonl)")),
    (("--resume",), dict(default=None, help="checkpoint to continue from (any grid shape)")),
    (("--eval-batches",), dict(type=int, default=4, help="validation batches at the end")),
    (("--sample",), dict(type=int, default=200, help="characters to sample at the end (0: none)")),
    (("--log-every",), dict(type=int, default=50, help="print the loss every N steps")),
    (("--no-progress",), dict(action="store_true", help="no tqdm bar")),
    (("--overlap",), dict(default="none", help="none, all, or a list of async_grads,prefetch,cache,buckets")),
    (("--progress-mode",), dict(default="poll", choices=PROGRESS,
                                help="who moves collectives in flight (default poll; mpich: MPICH's "
                                     "progress thread, the job started with MPIR_CVAR_ASYNC_PROGRESS=1)")),
    (("--bucket-kb",), dict(type=int, default=256, help="gradient bucket size with --overlap buckets")),
]


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train a small GPT on a 4D (row,col,depth,data) mesh",
                                   description=__doc__.splitlines()[0])
    for flags, kwargs in _OPTIONS:
        parser.add_argument(*flags, **kwargs)
    parser.set_defaults(func=main)


def parse_mesh(text: str) -> tuple[int, int, int, int]:
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        raise SystemExit(f"--mesh must be four positive ints row,col,depth,data; got {text!r}")
    return shape


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
    shape = parse_mesh(args.mesh)
    n = math.prod(shape)
    if args.nprocs is not None and args.nprocs != n:
        raise SystemExit(f"-n {args.nprocs} does not match --mesh {args.mesh} "
                         f"(row*col*depth*data = {n})")
    if not inside_mpi_job():
        env = {"MPIR_CVAR_ASYNC_PROGRESS": "1"} if args.progress_mode == "mpich" else {}
        return relaunch(n, ["train", *_argv(args)], env=env)
    return train(args, shape)
