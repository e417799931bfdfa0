"""WeightFetcher: every Linear3D's gathered weight block, prefetched one use ahead and/or cached.

    fetch = WeightFetcher(gpt.linears, gpt.params, prefetch=True, cache=False, depth=D)
    fetch.start(forward_uses(cfg) + backward_uses(cfg))   # the order the pass needs them
    W = fetch.get(name)                                    # [n/R, k/C], ready to multiply
    fetch.end()                                            # drop the cache

A weight lives as 1-D shards over the depth group; each use needs the whole
block, an all-gather over depth (AxoNN's FSDP-like step). ``prefetch`` (``Overlap.oag``) issues
the next use's all-gather (non-blocking) as soon as the current block is
handed out, so it travels while this layer computes. ``cache`` keeps the
blocks gathered in forward for backward (and for the tied LM head), so
backward gathers nothing: ``peak_bytes`` says what that memory costs. With
depth 1 there is nothing to gather: blocks are views of the parameters.
"""

from __future__ import annotations

from gpulab.engine.gpt.model import WTE

_PARTS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # forward order in a block


def forward_uses(config) -> list[tuple[str, str]]:
    """(weight name, pass) in the order ParallelGPT's forward multiplies by them."""
    blocks = [(f"transformer.h.{i}.{part}.weight", "forward")
              for i in range(config.n_layer) for part in _PARTS]
    return [(WTE, "forward"), *blocks, (WTE, "forward")]  # embedding ... LM head (tied)


def backward_uses(config, recompute: bool = False) -> list[tuple[str, str]]:
    """(weight name, pass) in backward order; ``recompute``: each block's forward runs again
    first (full activation recomputation), its weights used in forward order."""
    blocks = []
    for i in reversed(range(config.n_layer)):
        names = [f"transformer.h.{i}.{part}.weight" for part in _PARTS]
        blocks += [(n, "recompute") for n in names] * recompute + [(n, "backward") for n in reversed(names)]
    return [(WTE, "backward"), *blocks]  # LM head first; the embedding's backward needs no W


class WeightFetcher:
    def __init__(self, linears: dict, params: dict, *, prefetch: bool, cache: bool, depth: int):
        self.linears, self.params = linears, params
        self.prefetch, self.cache, self.depth = prefetch, cache, depth
        self.cached: dict = {}  # name -> block, kept from forward
        self.pending: dict = {}  # name -> Handle of a prefetched all-gather
        self.uses: list = []
        self.pos = 0
        self.peak_bytes = 0  # gathered blocks held at once beyond the one in use (cache + prefetch)

    def start(self, uses) -> None:
        self.uses, self.pos = list(uses), 0
        if self.prefetch:
            self._issue(0)

    def _issue(self, i: int) -> None:
        if i < len(self.uses):
            name = self.uses[i][0]
            if name not in self.cached and name not in self.pending:
                self.pending[name] = self.linears[name].start_gather(self.params[name])

    def get(self, name: str):
        expected, pass_ = self.uses[self.pos] if self.pos < len(self.uses) else (None, None)
        if name != expected:
            raise RuntimeError(f"weight {name!r} used out of the declared order (expected {expected!r})")
        self.pos += 1
        lin = self.linears[name]
        if name in self.cached:
            W = self.cached[name]
        elif name in self.pending:
            W = lin.block(self.pending.pop(name).wait())
        else:
            W = lin.gather(self.params[name])
        if self.cache and pass_ == "forward":
            self.cached[name] = W
        if self.prefetch:
            self._issue(self.pos)  # one use ahead
        self._account()
        return W

    def _account(self) -> None:
        if self.depth > 1:  # with depth 1 the blocks are views of the parameters: no memory
            held = sum(W.nbytes for W in self.cached.values())
            held += sum(h.nbytes for h in self.pending.values())
            self.peak_bytes = max(self.peak_bytes, held)

    def end(self) -> None:
        for handle in self.pending.values():  # a pass cut short: finish what was issued
            handle.wait()
        self.cached, self.pending, self.uses, self.pos = {}, {}, [], 0
