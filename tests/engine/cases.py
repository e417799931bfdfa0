"""Rank functions for the engine's MPI tests (run by tests.mpi_harness.run_mpi)."""

from __future__ import annotations

import copy

import numpy as np

from gpulab.backend import is_device_array, to_device
from gpulab.engine import Mesh, ParallelGPT, loss_and_grads
from gpulab.engine.gpt import model as serial
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel.mesh import rank_of
from gpulab.engine.perf.volume import collective_calls
from gpulab.engine.training.optim import AdamW, LossScaler, clip_grads, global_norm, train_step
from tests.engine.util import random_batch, random_params, rel_err, tiny_config
from tests.mpi_steps import step

B = 24  # divisible by depth*data for every grid of up to 12 ranks
LR, MAX_NORM = 1e-2, 0.5  # a clip norm below the gradients' norm, so clipping acts
# Relative tolerances. float64: everything to 1e-10 (measured: loss and gradients ~2e-15,
# parameters after 2 or 3 AdamW steps <= 7e-12). float32: loss, gradients, norms and the losses of
# the training steps to 1e-5 (measured <= 1.2e-7, 1e-6, 1.5e-7); parameters after training are
# not compared in float32: Adam's first steps move each value by about lr * sign(g), so a
# gradient entry that is rounding noise in both runs can flip its update (seen: 2e-3 of max).
TOL = {"float64": dict(loss=1e-10, grad=1e-10, train=1e-10, param=1e-10),
       "float32": dict(loss=1e-5, grad=1e-5, train=1e-5, param=None),
}


def _numel(tree, seen=None) -> int:
    """Values in all arrays (host or device) inside nested tuples/lists (each array once)."""
    seen = set() if seen is None else seen
    if hasattr(tree, "shape") and hasattr(tree, "size"):
        if id(tree) in seen:
            return 0
        seen.add(id(tree))
        return tree.size
    if isinstance(tree, (tuple, list)):
        return sum(_numel(t, seen) for t in tree)
    return 0


def _check_groups(mesh) -> None:
    R, C, D, P = mesh.shape
    r, c, d, p = mesh.coord
    want = {"row": [rank_of((i, c, d, p), mesh.shape) for i in range(R)],
            "col": [rank_of((r, i, d, p), mesh.shape) for i in range(C)],
            "depth": [rank_of((r, c, i, p), mesh.shape) for i in range(D)],
            "data": [rank_of((r, c, d, i), mesh.shape) for i in range(P)]}
    for axis, members in want.items():
        comm = mesh.group(axis)
        assert comm.allgather(mesh.rank) == members, (axis, members)
        assert comm.Get_rank() == {"row": r, "col": c, "depth": d, "data": p}[axis]


# AdamW steps per case: the second is the first from trained parameters and nonzero moments, the
# parallel optimizer's whole state; a third takes the same path again (and costs a quarter of a case)
STEPS = 2


def equivalence(comm, shapes, dtype="float64", steps=STEPS, seed=0, device="host", expect_path="host"):
    """For each grid shape: loss, every gradient and a few AdamW steps against the serial model.

    ``device``: where the engine's arrays live ("host", "fake" or "cupy"; the
    serial reference is numpy); every collective must take ``expect_path``.
    """
    out = []
    for shape in map(tuple, shapes):
        step(f"{shape} {dtype}: mesh")
        mesh = Mesh(*shape, comm=comm)
        _check_groups(mesh)
        cfg = tiny_config(shape, dtype)
        params = random_params(cfg, seed=seed)
        idx, targets = random_batch(cfg, B, seed=seed)
        gpt = ParallelGPT(cfg, mesh)
        gpt.load_params(params, device=device)  # cut on the host, pieces moved (float16_accuracy: cut on the device)
        back = gpt.full_params()
        assert all(np.array_equal(back[n], params[n]) for n in params), "load/full_params"
        held = sum(v.size for v in gpt.params.values())
        total = sum(v.size for v in params.values())
        if np.prod(shape[:3]) > 1:
            assert held < total, f"rank {comm.rank} holds {held} of {total} values"

        step(f"{shape} {dtype}: forward_backward")
        with coll.trace() as calls:
            loss = gpt.forward_backward(idx, targets)
        predicted = collective_calls(cfg, shape, B, idx.shape[1])
        got = [(c["op"], c["group"], c["nbytes"]) for c in calls]
        assert got == [(r["op"], r["group"], r["nbytes"]) for r in predicted], (got, predicted)
        assert {c["path"] for c in calls} <= {expect_path}, {c["path"] for c in calls}
        ref_loss, ref_grads = loss_and_grads(params, idx, targets, cfg)
        grads = gpt.full_grads()
        grad_err = max(rel_err(grads[n], ref_grads[n]) for n in ref_grads)
        worst = max(ref_grads, key=lambda n: rel_err(grads[n], ref_grads[n]))

        acts_par = _numel(gpt.stage_forward(gpt._local_batch(idx, targets)[0])[1])
        acts_ser = _numel(serial._forward(params, idx, cfg)[1])

        step(f"{shape} {dtype}: training")
        ser_params = copy.deepcopy(params)
        ser_opt = AdamW(ser_params, lr=LR)
        par_opt = AdamW(gpt.params, lr=LR)
        train_loss_err = norm_err = 0.0
        for k in range(steps):
            x, y = random_batch(cfg, B, seed=seed + 10 + k)
            ls, gs = loss_and_grads(ser_params, x, y, cfg)
            ns = global_norm(gs)
            clip_grads(gs, MAX_NORM, ns)
            ser_opt.step(gs)
            lp = gpt.forward_backward(x, y)
            norm = gpt.grad_norm()  # across the grid, each value counted once
            clip_grads(gpt.grads, MAX_NORM, norm)
            par_opt.step(gpt.grads)
            train_loss_err = max(train_loss_err, abs(lp - ls) / abs(ls))
            norm_err = max(norm_err, abs(norm - ns) / ns)
        assert all(is_device_array(v) == (device != "host") for v in gpt.params.values()), "params left the device"
        trained = gpt.full_params()
        param_err = max(rel_err(trained[n], ser_params[n]) for n in params)
        moved = max(rel_err(ser_params[n], params[n]) for n in params)
        mesh.free()
        tol = TOL[dtype]
        assert abs(loss - ref_loss) / ref_loss < tol["loss"], (shape, loss, ref_loss)
        assert grad_err < tol["grad"], (shape, worst, grad_err)
        assert train_loss_err < tol["train"] and norm_err < tol["train"], (shape, train_loss_err, norm_err)
        assert tol["param"] is None or param_err < tol["param"], (shape, param_err)
        if comm.Get_size() > 1:
            assert acts_par < acts_ser, (shape, acts_par, acts_ser)  # activations are split
        out.append({"shape": list(shape), "dtype": dtype, "loss_err": abs(loss - ref_loss) / ref_loss,
                    "grad_err": grad_err, "worst_grad": worst, "train_loss_err": train_loss_err,
                    "norm_err": norm_err,
                    "param_err": param_err, "moved": moved, "held": held, "total": total,
                    "acts": acts_par, "acts_serial": acts_ser, "n_calls": len(got)})
    return out


def float16_accuracy(comm, shapes, device="host", expect_path="host", steps=4, seed=0):
    """float16 (mixed precision) on each grid against float64: as accurate as the serial model in float16.

    Rounding in float16 (unit roundoff 4.9e-4) makes parallel and serial
    float16 differ from each other by as much as from the truth, so both are
    measured against the serial float64 model, and the parallel error must
    stay within 3x the serial float16 error (or 1e-3 where that is tiny).
    Then a few loss-scaled steps (``train_step`` + ``LossScaler``) follow the
    float64 run's losses.
    """
    out = []
    for shape in map(tuple, shapes):
        step(f"{shape} float16: mesh")
        mesh = Mesh(*shape, comm=comm)
        cfg64, cfg16 = tiny_config(shape, "float64"), tiny_config(shape, "float16")
        params = random_params(cfg64, seed=seed)
        idx, targets = random_batch(cfg64, B, seed=seed)
        ref_loss, ref_grads = loss_and_grads(params, idx, targets, cfg64)
        ser_loss, ser_grads = loss_and_grads({n: v.astype("float16") for n, v in params.items()}, idx, targets, cfg16)
        gpt = ParallelGPT(cfg16, mesh)
        gpt.load_params({n: to_device(v, device) for n, v in params.items()})
        scale = 1024.0
        with coll.trace() as calls:
            loss = gpt.forward_backward(idx, targets, loss_scale=scale)
        assert {c["path"] for c in calls} <= {expect_path}, {c["path"] for c in calls}
        grads = {n: g.astype("float64") / scale for n, g in gpt.full_grads().items()}
        err = {"loss": abs(loss - ref_loss) / ref_loss,
               "grad": max(rel_err(grads[n], ref_grads[n]) for n in ref_grads)}
        ser_err = {"loss": abs(ser_loss - ref_loss) / ref_loss,
                   "grad": max(rel_err(ser_grads[n], ref_grads[n]) for n in ref_grads)}
        for k in err:
            assert err[k] <= max(3 * ser_err[k], 1e-3), (shape, k, err[k], ser_err[k])

        step(f"{shape} float16: loss-scaled training")
        ser64 = copy.deepcopy(params)
        ser_opt, par_opt = AdamW(ser64, lr=LR), AdamW(gpt.params, lr=LR)
        scaler, train_err = LossScaler(init_scale=scale), 0.0
        for k in range(steps):
            x, y = random_batch(cfg64, B, seed=seed + 10 + k)
            ls, gs = loss_and_grads(ser64, x, y, cfg64)
            clip_grads(gs, MAX_NORM, global_norm(gs))
            ser_opt.step(gs)
            result = train_step(gpt, par_opt, (x, y), max_norm=MAX_NORM, scaler=scaler)
            assert not result["skipped"], (shape, k, scaler.scale)
            train_err = max(train_err, abs(result["loss"] - ls) / ls)
        assert train_err < 2e-3, (shape, train_err)  # measured <= 1.7e-4
        assert all(is_device_array(v) == (device != "host") and v.dtype == "float16" for v in gpt.params.values())
        mesh.free()
        out.append({"shape": list(shape), "loss_err": err["loss"], "grad_err": err["grad"],
                    "serial_loss_err": ser_err["loss"], "serial_grad_err": ser_err["grad"], "train_err": train_err})
    return out


def checkpoint_across_grids(comm, path, first, second, steps=2, seed=1, n_layer=2):
    """Train on grid ``first``, checkpoint, resume on grid ``second``: same as serial training.
    A grid is [row, col, depth, data] or [row, col, depth, data, pipe] (pipeline stages)."""
    from gpulab.engine.training import checkpoint

    cfg = tiny_config((2, 2, 1, 1), n_layer=n_layer)  # V=26, C=18, nh=2: fits both grids below
    params = random_params(cfg, seed=seed)
    ser = copy.deepcopy(params)
    ser_opt = AdamW(ser, lr=LR)
    batches = [random_batch(cfg, B, seed=seed + k) for k in range(2 * steps)]
    for x, y in batches:
        _, g = loss_and_grads(ser, x, y, cfg)
        clip_grads(g, MAX_NORM, global_norm(g))
        ser_opt.step(g)

    def train(gpt, opt, todo):
        for x, y in todo:
            gpt.forward_backward(x, y)
            clip_grads(gpt.grads, MAX_NORM, gpt.grad_norm())
            opt.step(gpt.grads)

    step(f"train on {first}")
    mesh = Mesh(*first[:4], comm=comm, pipe=(first + [1])[4])
    gpt = ParallelGPT(cfg, mesh)
    gpt.load_params(params)
    opt = AdamW(gpt.params, lr=LR)
    train(gpt, opt, batches[:steps])
    full = gpt.full_params(root=0)
    moments = {"m": gpt.gather_full(opt.m, root=0), "v": gpt.gather_full(opt.v, root=0)}
    if comm.rank == 0:
        checkpoint.save(path, full, config=cfg, step=steps, opt_state={"t": opt.t, **moments},
                        extra={"mesh": list(first)})
    comm.Barrier()
    mesh.free()

    step(f"resume on {second}")
    ck = checkpoint.load(path)
    assert ck.step == steps and ck.extra["mesh"] == list(first) and ck.config == cfg
    mesh = Mesh(*second[:4], comm=comm, pipe=(second + [1])[4])
    gpt = ParallelGPT(ck.config, mesh)
    gpt.load_params(ck.params)
    opt = AdamW(gpt.params, lr=LR)
    opt.load_state_dict({"t": ck.opt_state["t"], "m": gpt.local_pieces(ck.opt_state["m"]),
                         "v": gpt.local_pieces(ck.opt_state["v"])})
    train(gpt, opt, batches[steps:])
    resumed = gpt.full_params()
    mesh.free()
    err = max(rel_err(resumed[n], ser[n]) for n in ser)
    assert err < 1e-10, err
    return err


def validation_errors(comm):
    """Bad shapes, configs and batches raise the same ValueError on every rank, and nothing hangs."""
    from gpulab.engine import GPTConfig

    msgs = {}
    try:
        Mesh(3, 1, 1, 1, comm=comm)
    except ValueError as err:
        msgs["mesh"] = str(err)
    mesh = Mesh(1, comm.size, 1, 1, comm=comm)
    try:
        ParallelGPT(GPTConfig(13, 8, 1, 2, 18), mesh)
    except ValueError as err:
        msgs["config"] = str(err)
    mesh.free()
    mesh = Mesh(1, 1, comm.size, 1, comm=comm)
    cfg = tiny_config()
    gpt = ParallelGPT(cfg, mesh)
    gpt.load_params(random_params(cfg))
    idx, targets = random_batch(cfg, 6)
    try:
        gpt.forward_backward(idx, targets)
    except ValueError as err:
        msgs["batch"] = str(err)
    comm.Barrier()  # every rank got here: no rank is stuck in a collective
    mesh.free()
    return msgs


def collectives(comm):
    """Results, duality (all_gather is reduce_scatter's adjoint), handles, tracing, size-1 groups."""
    rank, size = comm.rank, comm.size
    rng = np.random.default_rng(rank)
    with coll.trace() as calls:
        x = np.arange(4.0) + rank
        np.testing.assert_array_equal(coll.all_reduce(x, comm), np.arange(4.0) * size + sum(range(size)))
        assert coll.all_reduce(np.array([float(rank)]), comm, op="max")[0] == size - 1
        np.testing.assert_array_equal(coll.all_gather(np.full(2, float(rank)), comm),
                                      np.repeat(np.arange(float(size)), 2))
        mine = coll.reduce_scatter(np.arange(2.0 * size) * (rank + 1), comm)
        total = np.arange(2.0 * size) * sum(r + 1 for r in range(size))
        np.testing.assert_array_equal(mine, total[2 * rank:2 * rank + 2])
        a, b = rng.normal(size=3), rng.normal(size=3 * size)
        lhs = comm.allreduce(float(coll.all_gather(a, comm) @ b))  # <gather(a), b>
        rhs = comm.allreduce(float(a @ coll.reduce_scatter(b.copy(), comm)))  # <a, scatter(b)>
        assert abs(lhs - rhs) < 1e-12 * max(1.0, abs(lhs))
        h1 = coll.iall_reduce(np.ones(5), comm)
        h2 = coll.iall_gather(np.full(1, float(rank)), comm)
        h3 = coll.ireduce_scatter(np.ones(size), comm)
        np.testing.assert_array_equal(h1.wait(), np.full(5, float(size)))
        np.testing.assert_array_equal(h2.wait(), np.arange(float(size)))
        np.testing.assert_array_equal(h3.wait(), [float(size)])
    ops = [c["op"] for c in calls]
    assert ops == ["all_reduce", "all_reduce", "all_gather", "reduce_scatter", "all_gather",
                   "reduce_scatter", "all_reduce", "all_gather", "reduce_scatter"], ops
    assert calls[2]["nbytes"] == 2 * size * 8 and calls[0]["size"] == size
    try:
        coll.reduce_scatter(np.ones(size + 1), comm)
        raise AssertionError("uneven reduce_scatter accepted")
    except ValueError as err:
        assert "does not split evenly" in str(err)
    alone = comm.Split(rank, 0)
    z = np.arange(3.0)
    with coll.trace() as calls:
        assert coll.all_reduce(z, alone) is z
        assert coll.iall_reduce(z, alone).wait() is z
        assert coll.all_gather(z, alone).base is z and coll.reduce_scatter(z, alone).base is z
    assert calls == []  # a group of one member never reaches MPI
    alone.Free()
    return ops
