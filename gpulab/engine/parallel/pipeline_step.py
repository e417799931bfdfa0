"""One training step's micro-batches on a pipeline stage: the schedule run, the sends, gradient accumulation.

    acc = GradAccumulator(sync)                      # sums each gradient over the micro-batches, in place
    run = run_micro_batches(gpt, ops, idx, targets, fetch, acc, dloss=1 / n_tokens)
    run.loss_sum, run.wte_block, run.sends, run.activation_bytes, run.working_set_bytes

``ops`` is the stage's schedule (``pipeline.schedule``: ("F" | "B",
micro-batch) in order, or ("F" | "B", micro-batch, chunk) interleaved, where
the last stage's chunk v feeds the first stage's chunk v + 1: ``neighbours``). A forward receives
the previous stage's residual
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


def neighbours(stage: int, chunk: int, pipe: int, virtual: int):
    """(stage, chunk) whose output a chunk's forward takes, and the one that takes its output; None at
    the model's ends. The last stage's chunk v feeds the first stage's chunk v + 1 (interleaved)."""
    before = None if (stage, chunk) == (0, 0) else ((stage - 1, chunk) if stage else (pipe - 1, chunk - 1))
    after = None if (stage, chunk) == (pipe - 1, virtual - 1) else \
        ((stage + 1, chunk) if stage < pipe - 1 else (0, chunk + 1))
    return before, after


def _tag(micro: int, chunk: int, virtual: int, backward: bool) -> int:
    """A message's tag: its micro-batch, the receiving chunk and the direction (stages may exchange
    both ways with interleaving)."""
    return 2 * (micro * virtual + chunk) + backward


def run_micro_batches(gpt, ops, idx, targets, fetch, grads, dloss: float) -> MicroBatchRun:
    """Run ``ops`` of ``gpt`` (a ``ParallelGPT``) on this rank's batch ``idx``/``targets``, cut into
    ``gpt.micro_batches`` equal micro-batches; gradients of ``dloss`` times each token's loss go to
    ``grads`` (a ``GradSync``, or a ``GradAccumulator`` in front of one). An op is ("F" | "B",
    micro-batch) or, interleaved, ("F" | "B", micro-batch, chunk)."""
    m, n_micro, V = gpt.mesh, gpt.micro_batches, gpt.virtual_stages
    b, T = idx.shape[0] // n_micro, idx.shape[1]
    saved, sends, loss_sum, peak, working, backwards = {}, [], 0.0, 0, (0, 0), 0
    pipelined = m.pipe > 1 or n_micro > 1  # else the phases are the plain step's, unlabelled
    wte_block = None
    for op, i, *rest in ops:
        v = rest[0] if rest else 0
        before, after = neighbours(m.stage, v, m.pipe, V)
        mb = slice(i * b, (i + 1) * b)
        label = ({"micro": i, "chunk": v} if V > 1 else {"micro": i}) if pipelined else {}
        if op == "F":
            x = None if before is None else gpt.recv_stream(b, T, before[0], _tag(i, v, V, False))
            with phase("forward", **label):
                out, cache = gpt.stage_forward(idx[mb], fetch, x, chunk=v)
                c_ce = None
                if after is None:
                    part, c_ce = gpt.stage_loss(out, targets[mb])
                    loss_sum = loss_sum + part
            if after is not None:
                sends.append(p2p.isend(out, m.pipe_comm, dest=after[0], tag=_tag(i, after[1], V, False)))
            saved[i, v] = (cache, c_ce)
            peak = max(peak, tree_nbytes(list(saved.values()), skip=gpt.params.values()))
            del x, out, cache, c_ce  # a name left bound would keep this micro-batch's arrays through the next op
        else:
            dy = None if after is None else gpt.recv_stream(b, T, after[0], _tag(i, v, V, True))
            # (caches held, working set) of this backward: the working set counts beside the most caches
            working = max(working, (len(saved), working_set_of(gpt, *saved[i, v], after_backward=backwards > 0)))
            backwards += 1
            with phase("backward", **label):
                dx, dwte = gpt.stage_backward(T, dloss, *saved.pop((i, v)), fetch, grads, dy, chunk=v)
            if dwte is not None:
                wte_block = dwte if wte_block is None else wte_block + dwte
            if before is not None:
                sends.append(p2p.isend(dx, m.pipe_comm, dest=before[0], tag=_tag(i, before[1], V, True)))
            del dy, dx, dwte  # as above: the caches went with stage_backward's return
        sends = [h for h in sends if not h.test()]  # progress; drop the buffers delivered
    return MicroBatchRun(loss_sum, wte_block, sends, peak, working[1])
