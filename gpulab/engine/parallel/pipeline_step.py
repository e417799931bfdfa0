"""One training step's micro-batches on a pipeline stage: the schedule run, the sends, gradient accumulation.

    acc = GradAccumulator(sync)                      # sums each gradient over the micro-batches, in place
    run = run_micro_batches(gpt, ops, idx, targets, fetch, acc, dloss=1 / n_tokens)
    run.loss_sum, run.wte_block, run.sends, run.activation_bytes, run.working_set_bytes

``ops`` is the stage's schedule (``pipeline.schedule``: ("F" | "B",
micro-batch) in order). A forward receives the previous stage's residual
stream (none on the first stage), runs the stage's blocks
(``ParallelGPT.stage_forward``), adds the micro-batch's summed
cross-entropy on the last stage, and sends its output on; a backward
receives the next stage's gradient (none on the last stage, which starts
from the loss), runs ``ParallelGPT.stage_backward`` and sends the gradient
of its input back. Sends are non-blocking, tagged with the micro-batch, and
tested after every op so that delivered buffers are dropped; the caller
waits for the rest. With one stage and one micro-batch this is the plain 4D
step, call for call, its phases unlabelled.
"""

from __future__ import annotations

from typing import NamedTuple

from gpulab.engine.parallel import collectives as coll
from gpulab.engine.parallel import p2p
from gpulab.engine.parallel.memory import tree_nbytes, working_set_of
from gpulab.engine.parallel.timeline import phase


class MicroBatchRun(NamedTuple):
    loss_sum: object  # this stage's summed cross-entropy over its micro-batches (0.0 off the last stage)
    wte_block: object  # this stage's gradient of the tied wte block, summed; None where it holds no wte
    sends: list  # p2p handles still in flight
    activation_bytes: int  # the most that the micro-batches in flight kept for backward at once
    working_set_bytes: int  # what a backward holds beside the most of them (memory.backward_working_set)


class GradAccumulator:
    """Sums each gradient over the micro-batches as they arrive, in one buffer per parameter (its
    slot in the ``GradSync``'s bucket where it has one), then hands the sums to the sync in backward
    order. Micro-batch i's gradient is added before i+1's: the sum is the left fold
    g0 + g1 + ... that summing a list gives, bit for bit."""

    def __init__(self, sync):
        self.sync = sync
        self.sums: dict = {}
        self.waiting: dict = {}  # name -> a micro-batch's gradient still in its reduce-scatter (a Handle)

    def add(self, name: str, grad) -> None:
        self._settle(name)
        if isinstance(grad, coll.Handle):
            self.waiting[name] = grad  # in flight until the next micro-batch's gradient (or flush)
        else:
            self._sum(name, grad)

    def _settle(self, name: str) -> None:
        if name in self.waiting:
            self._sum(name, self.waiting.pop(name).wait())

    def _sum(self, name: str, grad) -> None:
        if name in self.sums:
            self.sums[name] += grad
            return
        total = self.sync.storage(name, grad)
        if total is None:
            total = grad.copy()  # backward's array may be referenced elsewhere: sum into our own
        else:
            total[...] = grad
        self.sums[name] = total

    def flush(self, order) -> None:
        for name in order:
            self._settle(name)
            if name in self.sums:
                self.sync.add(name, self.sums.pop(name))


def run_micro_batches(gpt, ops, idx, targets, fetch, grads, dloss: float) -> MicroBatchRun:
    """Run ``ops`` of ``gpt`` (a ``ParallelGPT``) on this rank's batch ``idx``/``targets``, cut into
    ``gpt.micro_batches`` equal micro-batches; gradients of ``dloss`` times each token's loss go to
    ``grads`` (a ``GradSync``, or a ``GradAccumulator`` in front of one)."""
    m, n_micro = gpt.mesh, gpt.micro_batches
    b, T = idx.shape[0] // n_micro, idx.shape[1]
    saved, sends, loss_sum, peak, working, backwards = {}, [], 0.0, 0, (0, 0), 0
    pipelined = m.pipe > 1 or n_micro > 1  # else the phases are the plain step's, unlabelled
    wte_block = None
    for op, i in ops:
        mb = slice(i * b, (i + 1) * b)
        label = {"micro": i} if pipelined else {}
        if op == "F":
            x = None if m.first_stage else gpt.recv_stream(b, T, m.stage - 1, i)
            with phase("forward", **label):
                out, cache = gpt.stage_forward(idx[mb], fetch, x)
                c_ce = None
                if m.last_stage:
                    part, c_ce = gpt.stage_loss(out, targets[mb])
                    loss_sum = loss_sum + part
            if not m.last_stage:
                sends.append(p2p.isend(out, m.pipe_comm, dest=m.stage + 1, tag=i))
            saved[i] = (cache, c_ce)
            peak = max(peak, tree_nbytes(list(saved.values()), skip=gpt.params.values()))
            del x, out, cache, c_ce  # a name left bound would keep this micro-batch's arrays through the next op
        else:
            dy = None if m.last_stage else gpt.recv_stream(b, T, m.stage + 1, i)
            # (caches held, working set) of this backward: the working set counts beside the most caches
            working = max(working, (len(saved), working_set_of(gpt, *saved[i], after_backward=backwards > 0)))
            backwards += 1
            with phase("backward", **label):
                dx, dwte = gpt.stage_backward(T, dloss, *saved.pop(i), fetch, grads, dy)
            wte_block = dwte if wte_block is None else wte_block + dwte
            if not m.first_stage:
                sends.append(p2p.isend(dx, m.pipe_comm, dest=m.stage - 1, tag=i))
            del dy, dx, dwte  # as above: the caches went with stage_backward's return
        sends = [h for h in sends if not h.test()]  # progress; drop the buffers delivered
    return MicroBatchRun(loss_sum, wte_block, sends, peak, working[1])
