"""Which rank holds which piece of every parameter: pure geometry, no MPI.

A grid ``shape`` is (R, C, D, P) = (row, col, depth, data) and a rank's
``coord`` (r, c, d, p) in the same order (``GridShape``, ``GridCoord`` of
``gpulab.engine.parallel.mesh``); pieces of a replica are keyed (r, c, d).

- Linear weights W [n_out, k_in] (and the tied ``wte`` [V, C], which is the LM
  head's weight) follow AxoNN: rank (r, c) owns the block
  W[n/R slice r, k/C slice c] (plain) or W[n/C slice c, k/R slice r]
  (transposed); the block is flattened, zero-padded to a multiple of D and
  split over depth, so rank (r, c, d) stores a 1-D shard (``shard_numel``
  values). ``c_attn``'s rows are first permuted so that row block r holds
  [q | k | v] of heads r*nh/R .. (r+1)*nh/R - 1: attention then runs on local
  heads with no communication.
- Biases are split like their layer's output features and copied across the
  other tensor axes; LayerNorm parameters and ``wpe`` are split over columns
  (features of the residual stream) and copied across row and depth.
- Every tensor-parallel piece is copied across data-parallel replicas.

``owner_map`` draws it (the rank that stores each element of a weight) and
``weight_blocks`` lists it (each rank's block and depth-shard range).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulab.backend import array_module
from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.gpt.model import WPE, param_shapes
from gpulab.engine.parallel.mesh import rank_of


@dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: str  # "weight" | "bias" | "colvec" (LayerNorm, split over col) | "wpe"
    shape: tuple  # full shape
    transposed: bool = False  # weights and biases: is the layer a transposed one?
    permute: bool = False  # c_attn: heads grouped per row block


def param_specs(config: GPTConfig) -> dict[str, ParamSpec]:
    specs = {}
    for name, shape in param_shapes(config).items():
        transposed = name.endswith("c_proj.weight") or name.endswith("c_proj.bias")
        permute = ".c_attn." in name
        if name == WPE:
            kind = "wpe"
        elif ".ln_" in name or ".ln_f." in name:
            kind = "colvec"
        elif name.endswith(".bias"):
            kind = "bias"
        else:
            kind = "weight"
        specs[name] = ParamSpec(name, kind, tuple(shape), transposed, permute)
    return specs


def qkv_permutation(n_embd: int, row: int) -> np.ndarray:
    """Row order of c_attn that puts [q_r | k_r | v_r] (row block r's heads) side by side."""
    w = n_embd // row
    return np.concatenate([np.arange(r * w, (r + 1) * w) + j * n_embd
                           for r in range(row) for j in range(3)])


def split_counts(transposed: bool, shape) -> tuple[int, int]:
    """How many parts the out-features and the in-features are split into."""
    R, C, _, _ = shape
    return (C, R) if transposed else (R, C)


def block_slices(n: int, k: int, shape, r: int, c: int, transposed: bool = False):
    """(rows, cols) slices of the full [n, k] weight owned by grid position (r, c)."""
    n_parts, k_parts = split_counts(transposed, shape)
    if n % n_parts or k % k_parts:
        raise ValueError(f"a [{n}, {k}] weight does not split into {n_parts} x {k_parts} blocks "
                         f"(out features over {'col' if transposed else 'row'}, in features over "
                         f"{'row' if transposed else 'col'})")
    i, j = (c, r) if transposed else (r, c)  # out index, in index
    bn, bk = n // n_parts, k // k_parts
    return slice(i * bn, (i + 1) * bn), slice(j * bk, (j + 1) * bk)


def shard_numel(n: int, k: int, shape, transposed: bool = False) -> int:
    n_parts, k_parts = split_counts(transposed, shape)
    block = (n // n_parts) * (k // k_parts)
    _, _, D, _ = shape
    return -(-block // D)  # ceil(block / D): the last shard is zero-padded


def piece_numel(spec: ParamSpec, shape) -> int:
    """Values one rank stores of the parameter (a weight's 1-D shard includes its padding)."""
    R, C, _, _ = shape
    if spec.kind == "weight":
        return shard_numel(*spec.shape, shape, spec.transposed)
    if spec.kind == "bias":
        return spec.shape[0] // (C if spec.transposed else R)
    return int(np.prod(spec.shape)) // C  # LayerNorm vectors and wpe: split over col


def _permuted(spec: ParamSpec, full, shape):
    R, _, _, _ = shape
    if spec.permute and R > 1:
        perm = qkv_permutation(spec.shape[0] // 3, R)
        return full[array_module(full).asarray(perm)]
    return full


def local_piece(spec: ParamSpec, full, shape, coord):
    """The part of the full parameter that the rank at ``coord`` (row, col, depth, data) stores
    (a new contiguous array)."""
    xp = array_module(full)
    r, c, d, _ = coord
    R, C, D, _ = shape
    full = _permuted(spec, full, shape)
    if spec.kind == "weight":
        n, k = spec.shape
        rows, cols = block_slices(n, k, shape, r, c, spec.transposed)
        size = shard_numel(n, k, shape, spec.transposed)
        flat = xp.zeros(size * D, dtype=full.dtype)  # zero padding at the end
        block = full[rows, cols].reshape(-1)
        flat[:block.size] = block
        return flat[d * size:(d + 1) * size].copy()
    if spec.kind == "bias":
        parts, i = (C, c) if spec.transposed else (R, r)
        w = spec.shape[0] // parts
        return full[i * w:(i + 1) * w].copy()
    w = spec.shape[-1] // C  # colvec and wpe: features split over col
    return full[..., c * w:(c + 1) * w].copy()  # a copy even at col=1: training must not write to `full`


def owns(spec: ParamSpec, coord) -> bool:
    """Is this rank's copy the one to count (in norms) or to collect, within its replica?"""
    r, c, d, _ = coord
    if spec.kind == "weight":
        return True  # every (r, c, d) holds a distinct shard
    if spec.kind == "bias" and not spec.transposed:
        return d == 0 and c == 0  # copied over col and depth
    return d == 0 and r == 0  # copied over row and depth


def grad_group(spec: ParamSpec) -> str:
    """The group a gradient is summed over after backward ("data", or "batch" = depth x data).

    Weight shards were already reduce-scattered over depth; every other
    parameter is copied over depth, and each copy saw different sequences.
    """
    return "data" if spec.kind == "weight" else "batch"


def assemble(spec: ParamSpec, pieces: dict, shape):
    """Rebuild the full parameter from the owners' pieces: {(r, c, d): piece}."""
    R, C, D, _ = shape
    any_piece = next(iter(pieces.values()))
    xp = array_module(any_piece)
    full = xp.zeros(spec.shape, dtype=any_piece.dtype)
    if spec.kind == "weight":
        n, k = spec.shape
        for r in range(R):
            for c in range(C):
                rows, cols = block_slices(n, k, shape, r, c, spec.transposed)
                flat = xp.concatenate([pieces[(r, c, d)] for d in range(D)])
                bn, bk = rows.stop - rows.start, cols.stop - cols.start
                full[rows, cols] = flat[:bn * bk].reshape(bn, bk)  # drop the padding
    else:
        for (r, c, _), piece in pieces.items():
            if spec.kind == "bias":
                parts, i = (C, c) if spec.transposed else (R, r)
            else:
                parts, i = C, c
            w = spec.shape[-1] // parts
            full[..., i * w:(i + 1) * w] = piece
    if spec.permute and R > 1:
        inverse = np.argsort(qkv_permutation(spec.shape[0] // 3, R))
        full = full[xp.asarray(inverse)]
    return full


def weight_blocks(n: int, k: int, shape, transposed: bool = False) -> list[dict]:
    """One dict per rank of data replica 0: the block of an [n, k] weight it owns and the part
    of the flattened block (``flat``: start, stop, padding excluded) its depth shard holds."""
    R, C, D, _ = shape
    size = shard_numel(n, k, shape, transposed)
    out = []
    for d in range(D):
        for r in range(R):
            for c in range(C):
                rows, cols = block_slices(n, k, shape, r, c, transposed)
                numel = (rows.stop - rows.start) * (cols.stop - cols.start)
                out.append({"rank": rank_of((r, c, d, 0), shape), "r": r, "c": c, "d": d,
                            "rows": (rows.start, rows.stop), "cols": (cols.start, cols.stop),
                            "flat": (min(d * size, numel), min((d + 1) * size, numel))})
    return sorted(out, key=lambda b: b["rank"])


def owner_map(n: int, k: int, shape, transposed: bool = False) -> np.ndarray:
    """[n, k] array: the rank (of data replica 0) that stores each element of an [n, k] weight."""
    R, C, D, _ = shape
    owners = np.empty((n, k), dtype=np.int64)
    for r in range(R):
        for c in range(C):
            rows, cols = block_slices(n, k, shape, r, c, transposed)
            bn, bk = rows.stop - rows.start, cols.stop - cols.start
            size = shard_numel(n, k, shape, transposed)
            d_of = np.arange(bn * bk) // size  # depth shard of each flattened element
            ranks = np.array([rank_of((r, c, d, 0), shape) for d in range(D)])
            owners[rows, cols] = ranks[d_of].reshape(bn, bk)
    return owners
