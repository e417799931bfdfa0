"""gpulab.engine: a GPT in numpy with hand-written gradients, and the same GPT on a 4D grid.

Serial reference::

    from gpulab.engine import GPTConfig, init_params, loss_and_grads
    cfg = GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16)
    loss, grads = loss_and_grads(init_params(cfg), idx, targets, cfg)

Parallel (inside an MPI job)::

    from gpulab.engine import Mesh, ParallelGPT
    gpt = ParallelGPT(cfg, Mesh(row=2, col=2, depth=1, data=1))
    gpt.load_params(init_params(cfg)); loss = gpt.forward_backward(idx, targets)

With pipeline stages around the 4D grid: ``Mesh(1, 2, 1, 1, pipe=2)``, and
``ParallelGPT(cfg, mesh, micro_batches=4, schedule="1f1b")``.

Training from the shell: ``gpulab train --mesh 1,2,2,1 -n 4 --overlap all``
(``--pipe 2 --micro-batches 4`` for stages);
the model: ``gpulab model rank --world 1024 --model gpt-20b --machine perlmutter``.

Sub-packages: ``gpt`` (the serial reference), ``parallel`` (the 4D
engine), ``perf`` (the performance model and the timing of real
iterations), ``training`` (optimizer, checkpoints, the training loop);
module ``strategies``: Megatron-LM, ZeRO-3, hybrid sharding and DDP named as grid shapes
(one table that the comparisons and ``gpulab train --strategy`` loop over).
Importing this package initialises neither MPI nor CUDA.
"""

from gpulab.engine.gpt.config import GPTConfig
from gpulab.engine.gpt.model import init_params, logits, loss_and_grads, param_shapes
from gpulab.engine.parallel.gpt import ParallelGPT, check_divisibility
from gpulab.engine.parallel.mesh import Mesh, grid_shapes
from gpulab.engine.parallel.shards import owner_map, weight_blocks
from gpulab.engine.perf.volume import collective_calls, totals

__all__ = ["GPTConfig", "Mesh", "ParallelGPT", "check_divisibility", "collective_calls",
           "grid_shapes", "init_params", "logits", "loss_and_grads", "owner_map", "param_shapes",
           "totals", "weight_blocks"]
