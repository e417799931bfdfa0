"""Memory per rank: what one ``ParallelGPT`` holds, in bytes, by kind.

    report = memory_report(gpt)      # after a forward_backward
    # {"parameters": ..., "gradients": ..., "optimizer": ..., "activations": ...,
    #  "weight_cache": ..., "total": ...}

Parameters and gradients are this rank's pieces; the optimizer state is
AdamW's two moments, shaped like the parameters, plus float32 master weights
for float16 models, all in float32 then (``optim.AdamW``);
activations are the arrays the last forward kept for backward (the caches,
counted once each, parameters excluded; with pipeline stages, the most that the
micro-batches in flight held at once: up to ``pipe - stage`` of them in 1F1B,
all ``m`` in GPipe); weight_cache is the most gathered
weight blocks held at once by prefetching and caching (``overlap_weights``):
the memory that those two options trade for communication.
"""

from __future__ import annotations

import numpy as np

from gpulab.engine.gpt.config import accum_dtype

ADAM_MOMENTS = 2  # m and v


def _is_array(x) -> bool:
    return hasattr(x, "nbytes") and hasattr(x, "shape")


def tree_nbytes(tree, skip=()) -> int:
    """Bytes of every distinct array inside nested tuples/lists/dicts, except those in ``skip``
    (views count as their base, once)."""
    seen = {id(_base(a)) for a in skip}
    total = 0
    stack = [tree]
    while stack:
        item = stack.pop()
        if _is_array(item):
            base = _base(item)
            if id(base) not in seen:
                seen.add(id(base))
                total += int(base.nbytes)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
    return total


def _base(a):
    while getattr(a, "base", None) is not None and _is_array(a.base):
        a = a.base
    return a


def optimizer_nbytes(params: dict) -> int:
    """AdamW's state for ``params``: two moments, and a master copy for float16 values, in float32."""
    total = 0
    for p in params.values():
        kept = ADAM_MOMENTS + (1 if p.dtype.itemsize < 4 else 0)
        total += kept * p.size * np.dtype(accum_dtype(p.dtype)).itemsize
    return int(total)


def memory_report(gpt, opt=None) -> dict:
    """``opt``: an optimizer that says its own state's bytes (``state_nbytes``: the distributed
    optimizer keeps 1/data of it); default AdamW on every piece."""
    params = sum(int(p.nbytes) for p in gpt.params.values())
    grads = sum(int(g.nbytes) for g in gpt.grads.values()) if gpt.grads else params
    state = opt.state_nbytes() if hasattr(opt, "state_nbytes") else optimizer_nbytes(gpt.params)
    report = {"parameters": params, "gradients": grads, "optimizer": state,
              "activations": int(gpt.memory.get("activations", 0)),
              "weight_cache": int(gpt.memory.get("weight_cache", 0))}
    report["total"] = sum(report.values())
    return report
