"""Check for exercise 4: a learner's 3D tensor-parallel Linear, forward and backward, against the serial layer.

    check_tp3d((tp_forward, tp_backward), comm)      # on every rank (4: meshes 2x2x1, 1x2x2, 2x1x2, 4x1x1, 1x4x1)

The learner's functions, on a ``Mesh`` (AxoNN's layout, ``gpulab.engine.parallel.tp3d``):
``tp_forward(x, W, mesh) -> y`` with x [M, k/C] (this rank's tokens: depth slice d;
input features: column block c) and W the block [n/R, k/C] (rows r, columns c),
y [M, n/R]; ``tp_backward(dy, x, W, mesh) -> (dx, dW)`` with dx [M, k/C] and dW
[n/R, k/C] summed over all tokens (all depth slices). The reference is
``gpulab.engine.gpt.layers.linear_forward/backward`` on the full X and W in
float64; the tolerance is 1e-9 relative to the largest value.
"""

from __future__ import annotations

import numpy as np

from gpulab.exercises.report import CheckFailed, first_lines, raised, seconds_per_call
from gpulab.lazy_mpi import lazy_mpi

MPI = lazy_mpi(globals())

TOLERANCE = 1e-9  # float64 sums in another order differ by ~1e-15; any fault by ~1e-1
TOKENS, N_OUT, K_IN = 3, 12, 8  # per depth slice; divisible by every R, C of up to 4 ranks


def meshes(p: int) -> list[tuple[int, int, int]]:
    """Every (row, col, depth) with row*col*depth = p and at most 4 along an axis: the check's grids."""
    return [(r, c, p // (r * c)) for r in range(1, 5) for c in range(1, 5)
            if p % (r * c) == 0 and p // (r * c) <= 4 and N_OUT % max(r, c) == 0 and K_IN % max(r, c) == 0]


def _full(seed: int, depth: int):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((depth * TOKENS, K_IN))
    W = rng.standard_normal((N_OUT, K_IN))
    dY = rng.standard_normal((depth * TOKENS, N_OUT))
    return X, W, dY


def _compare(what: str, got, expected, guesses: dict) -> str | None:
    """None when got matches; else how far off it is and which known mistake it equals, if one."""
    got = np.asarray(got)
    if got.shape != expected.shape:
        return f"{what} has shape {got.shape}, expected {expected.shape}"
    scale = float(np.abs(expected).max()) or 1.0
    err = float(np.abs(got - expected).max()) / scale
    if err <= TOLERANCE:
        return None
    where = np.unravel_index(int(np.argmax(np.abs(got - expected))), expected.shape)
    line = (f"{what} differs by up to {err:.3g} of its largest value (at index {tuple(map(int, where))}: "
            f"{got[where]:.6g}, the serial layer gives {expected[where]:.6g})")
    for mistake, value in guesses.items():
        if value.shape == got.shape and np.allclose(got, value, rtol=0, atol=TOLERANCE * scale):
            return f"{line}; it equals {mistake}"
    return line


def _one_mesh(fwd, bwd, comm, shape, seed: int) -> list[str]:
    from gpulab.engine import Mesh
    from gpulab.engine.gpt.layers import linear_backward, linear_forward

    R, C, D = shape
    mesh = Mesh(R, C, D, 1, comm=comm)
    try:
        r, c, d = mesh.coord.row, mesh.coord.col, mesh.coord.depth
        X, W, dY = _full(seed, D)
        Y, cache = linear_forward(X, W)
        dX, grads = linear_backward(dY, cache)
        tok = slice(d * TOKENS, (d + 1) * TOKENS)
        rows, cols = slice(r * N_OUT // R, (r + 1) * N_OUT // R), slice(c * K_IN // C, (c + 1) * K_IN // C)
        x, w, dy = X[tok, cols].copy(), W[rows, cols].copy(), dY[tok, rows].copy()
        me = f"rank {comm.Get_rank()} (row {r}, col {c}, depth {d})"
        lines = []
        try:
            y = fwd(x.copy(), w.copy(), mesh)
            lines.append(_compare(f"{me}: y", y, Y[tok, rows], {
                "x @ W.T before the sum over mesh.col_comm (missing the all-reduce over col)": x @ w.T,
                "twice the right y (summed twice?)": 2 * Y[tok, rows]}))
        except Exception as error:  # noqa: BLE001 - the learner's error is the finding
            lines.append(f"{me}: tp_forward raised {raised(error, fwd)}")
        try:
            dx, dW = bwd(dy.copy(), x.copy(), w.copy(), mesh)
            lines.append(_compare(f"{me}: dx", dx, dX[tok, cols], {
                "dy @ W before the sum over mesh.row_comm (missing the all-reduce over row)": dy @ w}))
            lines.append(_compare(f"{me}: dW", dW, grads["weight"][rows, cols], {
                "this depth slice's dy.T @ x only (missing the sum over mesh.depth_comm)": dy.T @ x,
                "dW transposed": grads["weight"][rows, cols].T}))
        except Exception as error:  # noqa: BLE001
            lines.append(f"{me}: tp_backward raised {raised(error, bwd)}")
        return [line for line in lines if line]
    finally:
        mesh.free()


def check_tp3d(functions, comm=None, *, seed: int = 3) -> str:
    """``functions`` = (tp_forward, tp_backward). Run the learner's forward and backward on every grid shape
    that fits the ranks; raise CheckFailed
    naming the rank, its grid coordinate, which output or gradient differs and by how much."""
    if comm is None:

        comm = MPI.COMM_WORLD
    fwd, bwd = functions
    shapes = meshes(comm.Get_size())
    for shape in shapes:
        problems = [line for lines in comm.allgather(_one_mesh(fwd, bwd, comm, shape, seed)) for line in lines]
        if problems:
            R, C, D = shape
            raise CheckFailed(f"the 3D layer is wrong on the mesh row={R}, col={C}, depth={D} "
                              f"(W [{N_OUT}, {K_IN}], {TOKENS} tokens per depth slice):\n{first_lines(problems)}")
    grids = ", ".join("x".join(map(str, s)) for s in shapes)
    return (f"tp_forward and tp_backward match the serial layer (float64, within {TOLERANCE:g}) "
            f"on the meshes {grids} (row x col x depth)")


def timing_tp3d(functions, comm=None, *, row: int = 2, col: int = 2, depth: int = 1, tokens: int = 512,
                n_out: int = 1024, k_in: int = 1024, iters: int = 10) -> dict:
    """Milliseconds per forward + backward: the learner's and the library's ``Linear3D`` on one mesh."""
    from gpulab.engine import Mesh
    from gpulab.engine.parallel.tp3d import Linear3D

    fwd, bwd = functions
    comm = comm or MPI.COMM_WORLD
    mesh = Mesh(row, col, depth, 1, comm=comm)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, k_in // col))
    w = rng.standard_normal((n_out // row, k_in // col))
    dy = rng.standard_normal((tokens, n_out // row))
    layer = Linear3D(n_out, k_in, mesh)

    def yours():
        fwd(x, w, mesh)
        bwd(dy, x, w, mesh)

    def library():
        _, cache = layer.forward(x, None, W=w)
        layer.backward(dy, cache, W=w)  # dW reduce-scattered over depth: each rank keeps its shard

    out = {}
    try:
        for name, run in (("yours_ms", yours), ("library_ms", library)):
            out[name] = seconds_per_call(run, comm, iters) * 1e3
    finally:
        mesh.free()
    return {"mesh": (row, col, depth), "tokens": tokens, "W": (n_out, k_in), **out}
