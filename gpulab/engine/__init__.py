"""gpulab.engine: a GPT in numpy with hand-written gradients, and the same GPT on a 4D grid.

Serial reference::

    from gpulab.engine import GPTConfig, init_params, loss_and_grads
    cfg = GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16)
    loss, grads = loss_and_grads(init_params(cfg), idx, targets, cfg)

Parallel (inside an MPI job; see ``parallel`` and ``mesh``)::

    from gpulab.engine import Mesh, ParallelGPT
    gpt = ParallelGPT(cfg, Mesh(row=2, col=2, depth=1, data=1))

Training from the shell: ``gpulab train --mesh 1,2,2,1 -n 4``. Importing this
package does not initialise MPI or CUDA.
"""

from gpulab.engine.config import GPTConfig
from gpulab.engine.mesh import Mesh, grid_shapes
from gpulab.engine.model import init_params, logits, loss_and_grads, param_shapes
from gpulab.engine.parallel import ParallelGPT, check_divisibility

__all__ = ["GPTConfig", "Mesh", "ParallelGPT", "check_divisibility", "grid_shapes",
           "init_params", "logits", "loss_and_grads", "param_shapes"]
