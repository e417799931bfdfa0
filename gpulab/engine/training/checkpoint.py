"""Checkpoints: full-shaped parameters (and AdamW moments) in one .npz, written atomically.

    save("run/gpt.npz", params, config=cfg, step=200, opt_state=opt_full, extra={...})
    ck = load("run/gpt.npz")          # ck.params, ck.config, ck.step, ck.opt_state, ck.extra

Full shapes with the serial names make a checkpoint independent of the grid
it was written from: ``ParallelGPT.load_params`` cuts it for any other grid.
Format: a plain .npz (arrays ``params/<name>``, ``adam_m/<name>``,
``adam_v/<name>``) plus ``header.json``, a uint8 array holding a JSON header
(format, version, config, step, AdamW step count, extra). Loading uses
``allow_pickle=False``, so a file can never execute code. Writing goes to a
temporary file in the same folder, fsync'ed, then ``os.replace``'d over the
target: a crash leaves the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpulab.backend import to_host
from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.gpt.model import param_shapes

FORMAT, VERSION = "gpulab-engine-checkpoint", 1


@dataclass
class Checkpoint:
    params: dict
    config: GPTConfig
    step: int = 0
    opt_state: dict | None = None  # {"t": int, "m": {name: array}, "v": {name: array}}
    extra: dict = field(default_factory=dict)


def save(path, params: dict, *, config: GPTConfig, step: int = 0, opt_state: dict | None = None,
         extra: dict | None = None) -> Path:
    path = Path(path)
    shapes = param_shapes(config)
    arrays = {}
    for name, shape in shapes.items():
        arrays[f"params/{name}"] = _checked(to_host(params[name]), name, shape)
        if opt_state is not None:
            arrays[f"adam_m/{name}"] = _checked(to_host(opt_state["m"][name]), name, shape)
            arrays[f"adam_v/{name}"] = _checked(to_host(opt_state["v"][name]), name, shape)
    header = {"format": FORMAT, "version": VERSION, "config": config.to_dict(), "step": int(step),
              "adam_t": None if opt_state is None else int(opt_state["t"]), "extra": extra or {}}
    arrays["header.json"] = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a checkpoint is an ordinary file
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)  # a file object: numpy adds no ".npz" to the name
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _checked(array: np.ndarray, name: str, shape: tuple) -> np.ndarray:
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {tuple(array.shape)} != expected {tuple(shape)}")
    return np.ascontiguousarray(array)


def load(path) -> Checkpoint:
    with np.load(Path(path), allow_pickle=False) as z:  # object arrays raise instead of unpickling
        if "header.json" not in z.files:
            raise ValueError(f"{path}: not a gpulab checkpoint (no header.json)")
        header = json.loads(z["header.json"].tobytes().decode("utf-8"))
        if header.get("format") != FORMAT or header.get("version") != VERSION:
            raise ValueError(f"{path}: unsupported checkpoint format {header.get('format')!r} "
                             f"version {header.get('version')!r}")
        config = GPTConfig.from_dict(header["config"])
        shapes = param_shapes(config)
        params = {name: _checked(z[f"params/{name}"], name, shape) for name, shape in shapes.items()}
        opt_state = None
        if header["adam_t"] is not None:
            opt_state = {"t": header["adam_t"],
                         "m": {name: z[f"adam_m/{name}"] for name in shapes},
                         "v": {name: z[f"adam_v/{name}"] for name in shapes}}
    return Checkpoint(params, config, header["step"], opt_state, header["extra"])
