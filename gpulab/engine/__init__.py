"""gpulab.engine: a GPT in numpy with hand-written gradients, and the same GPT on a 4D grid.

Serial reference::

    from gpulab.engine import GPTConfig, init_params, loss_and_grads
    cfg = GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16)
    loss, grads = loss_and_grads(init_params(cfg), idx, targets, cfg)

Parallel (inside an MPI job)::

    from gpulab.engine import Mesh, ParallelGPT
    gpt = ParallelGPT(cfg, Mesh(row=2, col=2, depth=1, data=1))
    gpt.load_params(init_params(cfg)); loss = gpt.forward_backward(idx, targets)

Training from the shell: ``gpulab train --mesh 1,2,2,1 -n 4 --overlap all``;
the model: ``gpulab model rank --world 1024 --model gpt-20b --machine perlmutter``.

Modules, in dependency order: config (GPTConfig), layers (serial forward/
backward pairs), model (serial GPT), mesh (4D rank grid), timeline (per-rank
events, summaries), collectives (the only MPI calls; non-blocking handles,
progress polling and thread), layout (which rank holds which piece;
``owner_map`` and ``weight_blocks`` for pictures), tp3d (AxoNN's 3D Linear),
tp_layers (sharded LayerNorm, embedding, cross-entropy), overlap (the
switches), overlap_weights (prefetch, cache), overlap_grads (bucketed
gradient sync), memory, parallel (ParallelGPT), volume (bytes per collective
per layer), optim, checkpoint, corpus, sample, train (the CLI).

Measuring and modelling: flops (work per iteration and per rank), bench
(timed iterations, MFU), timeline_plot (Gantt, breakdown), machines (GPU
profiles with sources), perfmodel_terms + perfmodel (predict, rank),
perfmodel_fit (this computer, fitted), model_cli (``gpulab model``).
Importing this package initialises neither MPI nor CUDA.
"""

from gpulab.engine.config import GPTConfig
from gpulab.engine.layout import owner_map, weight_blocks
from gpulab.engine.mesh import Mesh, grid_shapes
from gpulab.engine.model import init_params, logits, loss_and_grads, param_shapes
from gpulab.engine.parallel import ParallelGPT, check_divisibility
from gpulab.engine.volume import collective_calls, totals

__all__ = ["GPTConfig", "Mesh", "ParallelGPT", "check_divisibility", "collective_calls",
           "grid_shapes", "init_params", "logits", "loss_and_grads", "owner_map", "param_shapes",
           "totals", "weight_blocks"]
