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
target: a crash (or a full disk) leaves the old checkpoint or the new one,
never half of one. Whatever is wrong with a file on loading (not there, not a
zip, truncated, arrays missing or misshapen, a foreign header) raises one
``CheckpointError`` whose message names the file and the fault.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpulab.backend import to_host
from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.gpt.model import param_shapes

FORMAT, VERSION = "gpulab-engine-checkpoint", 1


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message says which file and why, in one line."""


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
    path = Path(path)
    try:
        z = np.load(path, allow_pickle=False)  # object arrays raise instead of unpickling
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"{path}: not a gpulab checkpoint (unreadable as .npz: {err})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise CheckpointError(f"{path}: not a gpulab checkpoint (a single .npy array, not an .npz archive)")
    try:
        with z:
            return _read(path, z)
    except CheckpointError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, TypeError) as err:
        # a truncated or damaged archive fails only when an array is read
        raise CheckpointError(f"{path}: damaged checkpoint ({type(err).__name__}: {err})") from None


def _read(path: Path, z) -> Checkpoint:
    if "header.json" not in z.files:
        raise CheckpointError(f"{path}: not a gpulab checkpoint (no header.json)")
    header = json.loads(z["header.json"].tobytes().decode("utf-8"))
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("version") != VERSION:
        found = header if not isinstance(header, dict) else (header.get("format"), header.get("version"))
        raise CheckpointError(f"{path}: unsupported checkpoint format {found!r}, expected {(FORMAT, VERSION)!r}")
    missing_keys = {"config", "step", "adam_t", "extra"} - set(header)
    if missing_keys:
        raise CheckpointError(f"{path}: header.json lacks {sorted(missing_keys)}")
    config = GPTConfig.from_dict(header["config"])
    shapes = param_shapes(config)
    groups = ["params"] + (["adam_m", "adam_v"] if header["adam_t"] is not None else [])
    missing = [f"{g}/{name}" for g in groups for name in shapes if f"{g}/{name}" not in z.files]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise CheckpointError(f"{path}: missing arrays {', '.join(missing[:3])}{more}")
    arrays = {g: {name: _shape_checked(path, z[f"{g}/{name}"], f"{g}/{name}", shape)
                  for name, shape in shapes.items()} for g in groups}
    opt_state = None
    if header["adam_t"] is not None:
        opt_state = {"t": header["adam_t"], "m": arrays["adam_m"], "v": arrays["adam_v"]}
    return Checkpoint(arrays["params"], config, header["step"], opt_state, header["extra"])


def _shape_checked(path: Path, array: np.ndarray, key: str, shape: tuple) -> np.ndarray:
    if tuple(array.shape) != tuple(shape):
        raise CheckpointError(f"{path}: {key} has shape {tuple(array.shape)}, the config needs {tuple(shape)}")
    return np.ascontiguousarray(array)
