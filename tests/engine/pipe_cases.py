"""Rank functions for the pipeline tests (run by tests.mpi_harness.run_mpi; see test_pipeline.py)."""

from __future__ import annotations

import copy

import numpy as np

from gpulab.backend import is_device_array
from gpulab.engine import Mesh, ParallelGPT, loss_and_grads
from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel import timeline
from gpulab.engine.parallel.mesh import rank_of
from gpulab.engine.parallel.overlap import Overlap
from gpulab.engine.parallel.pipeline import schedule
from gpulab.engine.training.optim import AdamW, clip_grads, global_norm
from gpulab.engine.training.zero1 import DistributedAdamW
from tests.engine.cases import LR, MAX_NORM, STEPS
from tests.engine.util import random_batch, random_params, rel_err, tiny_config
from tests.mpi_steps import step

B = 24  # divisible by depth*data*micro-batches for every case below
N_LAYER = 5  # uneven splits: 3 + 2 blocks on 2 stages, 2 + 1 + 1 + 1 on 4


def _check_groups(mesh) -> None:
    """Every 4D group lies inside this rank's stage; pipe_comm links the same coordinate."""
    n = int(np.prod(mesh.shape))
    first = mesh.stage * n
    R, C, D, P = mesh.shape
    r, c, d, p = mesh.coord
    assert mesh.rank == first + rank_of(mesh.coord, mesh.shape)
    want = {"row": [first + rank_of((i, c, d, p), mesh.shape) for i in range(R)],
            "col": [first + rank_of((r, i, d, p), mesh.shape) for i in range(C)],
            "depth": [first + rank_of((r, c, i, p), mesh.shape) for i in range(D)],
            "data": [first + rank_of((r, c, d, i), mesh.shape) for i in range(P)],
            "stage": list(range(first, first + n)),
            "pipe": [s * n + mesh.rank - first for s in range(mesh.pipe)]}
    if mesh.pipe > 1 and mesh.stage in (0, mesh.pipe - 1):
        want["embed"] = [mesh.rank - first, (mesh.pipe - 1) * n + mesh.rank - first]
    for name, members in want.items():
        assert mesh.group(name).allgather(mesh.rank) == members, (name, members)
    assert mesh.pipe_comm.Get_rank() == mesh.stage


def _train(gpt, opt, batches):
    losses = []
    for x, y in batches:
        losses.append(gpt.forward_backward(x, y))
        clip_grads(gpt.grads, MAX_NORM, gpt.grad_norm())
        opt.step(gpt.grads)
    return losses


def _serial_train(params, cfg, batches):
    ser_opt = AdamW(params, lr=LR)
    losses = []
    for x, y in batches:
        loss, g = loss_and_grads(params, x, y, cfg)
        clip_grads(g, MAX_NORM, global_norm(g))
        ser_opt.step(g)
        losses.append(loss)
    return losses


def equivalence(comm, cases, steps=STEPS, seed=0, device="host", expect_path="host"):
    """For each (shape, pipe, micro, schedule[, options]): loss, every gradient, the norm and a few
    AdamW steps against the serial model in float64. ``options``: ParallelGPT's keywords,
    ``distributed_optimizer`` (ZeRO-1's optimizer instead of AdamW) and ``n_layer`` (default 5).
    ``device``: where the engine's
    arrays live ("host" or "fake"); every send, receive and collective must take ``expect_path``."""
    out = []
    for shape, pipe, micro, kind, *rest in cases:
        options = dict(rest[0]) if rest else {}
        zero1 = options.pop("distributed_optimizer", False)
        n_layer = options.pop("n_layer", N_LAYER)
        shape = tuple(shape)
        step(f"{shape} pipe={pipe} m={micro} {kind}: mesh")
        mesh = Mesh(*shape, comm=comm, pipe=pipe)
        _check_groups(mesh)
        cfg = tiny_config(shape, "float64", n_layer=n_layer)
        params = random_params(cfg, seed=seed)
        idx, targets = random_batch(cfg, B, seed=seed)
        gpt = ParallelGPT(cfg, mesh, micro_batches=micro, schedule=kind, distributed_optimizer=zero1, **options)
        gpt.load_params(params, device=device)
        back = gpt.full_params()
        assert all(np.array_equal(back[n], params[n]) for n in params), "load/full_params"

        step(f"{shape} pipe={pipe} m={micro} {kind}: forward_backward")
        with coll.trace() as calls:
            loss = gpt.forward_backward(idx, targets)
        assert {c["path"] for c in calls} <= {expect_path}, {c["path"] for c in calls}
        if pipe > 1:
            assert {"send", "recv"} <= {c["op"] for c in calls if c["group"] == "pipe"}
        ref_loss, ref_grads = loss_and_grads(params, idx, targets, cfg)
        grads = gpt.full_grads()
        grad_err = max(rel_err(grads[n], ref_grads[n]) for n in ref_grads)
        worst = max(ref_grads, key=lambda n: rel_err(grads[n], ref_grads[n]))
        norm_err = abs(gpt.grad_norm() - global_norm(ref_grads)) / global_norm(ref_grads)
        fwd_loss = gpt.loss(idx, targets)

        step(f"{shape} pipe={pipe} m={micro} {kind}: training")
        batches = [random_batch(cfg, B, seed=seed + 10 + k) for k in range(steps)]
        ser_params = copy.deepcopy(params)
        ser_losses = _serial_train(ser_params, cfg, batches)
        opt = DistributedAdamW(gpt, lr=LR) if zero1 else AdamW(gpt.params, lr=LR)
        par_losses = _train(gpt, opt, batches)
        train_err = max(abs(a - b) / abs(b) for a, b in zip(par_losses, ser_losses))
        assert all(is_device_array(v) == (device != "host") for v in gpt.params.values()), "params left the device"
        trained = gpt.full_params()
        param_err = max(rel_err(trained[n], ser_params[n]) for n in params)
        mesh.free()
        row = {"shape": list(shape), "pipe": pipe, "micro": micro, "schedule": kind,
               **({"options": rest[0]} if rest else {}),
               "loss_err": abs(loss - ref_loss) / ref_loss, "fwd_loss_err": abs(fwd_loss - ref_loss) / ref_loss,
               "grad_err": grad_err, "worst_grad": worst, "norm_err": norm_err,
               "train_err": train_err, "param_err": param_err}
        assert max(v for k, v in row.items() if k.endswith("_err")) < 1e-10, row
        out.append(row)
    return out


def overlap_switches(comm, shape, pipe, micro):
    """Every overlap switch on: the same numbers as the serial model (gradients and one step)."""
    mesh = Mesh(*shape, comm=comm, pipe=pipe)
    cfg = tiny_config(tuple(shape), "float64", n_layer=N_LAYER)
    params = random_params(cfg)
    idx, targets = random_batch(cfg, B)
    gpt = ParallelGPT(cfg, mesh, overlap=Overlap.everything(bucket_bytes=256), micro_batches=micro)
    gpt.load_params(params)
    loss = gpt.forward_backward(idx, targets)
    ref_loss, ref_grads = loss_and_grads(params, idx, targets, cfg)
    grads = gpt.full_grads()
    gpt.free()
    mesh.free()
    err = max([abs(loss - ref_loss) / ref_loss] + [rel_err(grads[n], ref_grads[n]) for n in ref_grads])
    assert err < 1e-10, err
    return err


def phase_order(comm, pipe, micro, kind):
    """The recorded timeline: each stage's micro-batch phases in the schedule's order, gathered."""
    mesh = Mesh(1, comm.size // pipe, 1, 1, comm=comm, pipe=pipe)
    cfg = tiny_config((1, comm.size // pipe, 1, 1), n_layer=pipe)
    gpt = ParallelGPT(cfg, mesh, micro_batches=micro, schedule=kind)
    gpt.load_params(random_params(cfg))
    idx, targets = random_batch(cfg, 4 * micro)
    with timeline.record() as tl:
        gpt.forward_backward(idx, targets)
    got = [("F" if e["name"] == "forward" else "B", e["micro"]) for e in tl.events
           if e["kind"] == "phase" and "micro" in e]
    assert got == schedule(kind, pipe, mesh.stage, micro), (mesh.stage, got)
    pipe_waits = [e for e in tl.events if e["kind"] == "comm" and e["group"] == "pipe"]
    everyone = timeline.gather(tl, comm)
    mesh.free()
    return {"stage": mesh.stage, "order": got, "recvs": sum(e["op"] == "recv" for e in pipe_waits),
            "events": everyone if comm.rank == 0 else None}


def _message(make) -> str:
    """The ValueError that ``make()`` must raise, as text."""
    try:
        make()
    except ValueError as err:
        return str(err)
    raise AssertionError(f"{make} raised no ValueError")


def validation_errors(comm):
    """Too few layers, uneven micro-batches, bad sizes: the same ValueError on every rank, no hang."""
    from gpulab.engine import GPTConfig

    msgs = {"mesh": _message(lambda: Mesh(1, 1, 1, 1, comm=comm, pipe=3))}
    mesh = Mesh(1, comm.size // 2, 1, 1, comm=comm, pipe=2)
    cfg = tiny_config(n_layer=2)
    msgs["layers"] = _message(lambda: ParallelGPT(GPTConfig(26, 8, 1, 2, 18), mesh))
    msgs["micro"] = _message(lambda: ParallelGPT(cfg, mesh, micro_batches=0))
    msgs["schedule"] = _message(lambda: ParallelGPT(cfg, mesh, schedule="zigzag"))
    gpt = ParallelGPT(cfg, mesh, micro_batches=4)
    gpt.load_params(random_params(cfg))
    msgs["batch"] = _message(lambda: gpt.forward_backward(*random_batch(cfg, 6)))
    comm.Barrier()  # every rank got here: no rank is stuck in a send or a collective
    mesh.free()
    return msgs
