"""One pipeline stage of ``ParallelGPT`` on one micro-batch: the forward of a model chunk, the loss, the backward.

    x, cache = forward(gpt, idx, fetch, x, chunk=v)         # token ids or the previous chunk's output in
    loss_sum, c_ce = loss(gpt, logits, targets)             # the last stage's
    dx, dwte = backward(gpt, T, dloss, cache, c_ce, fetch, sync, dy, chunk=v)

``ParallelGPT`` offers them as ``stage_forward``, ``stage_loss`` and
``stage_backward``; ``pipeline_step`` runs them in a schedule's order and sends
what they return between stages. Each transformer block inside a chunk is
``block``'s (through ``gpt._block_forward`` / ``gpt._block_backward``). The
first chunk of the model holds the embeddings, the last ln_f and the LM head
(the tied wte): a stage holds the fields of the ``ModelCache`` for the parts
it has, None for the others.
"""

from __future__ import annotations

from gpulab.backend import array_module
from gpulab.engine.gpt.model import WPE, WTE, ModelCache
from gpulab.engine.parallel import tp_layers as TP
from gpulab.engine.parallel.memory import block_sizes
from gpulab.engine.parallel.sequence import all_gather_seq, local_positions
from gpulab.engine.parallel.timeline import phase


def forward(gpt, idx, fetch=None, x=None, chunk: int = 0):
    """This stage's forward of one micro-batch through its model chunk ``chunk`` (one unless
    interleaved): token ids (the model's first chunk) or the previous chunk's output ``x`` in;
    logits (the last chunk) or the residual stream out, and the ``ModelCache`` for the backward.
    ``fetch``: the ``WeightFetcher`` of the step (default: one for this forward alone)."""
    fetch = fetch or gpt._fetcher(gpt._uses([("F", 0, chunk)]))
    params, m, lin = gpt.params, gpt.mesh, gpt.linears
    C, T = gpt.config.n_embd, idx.shape[1]
    c_tok = c_lnf = c_head = None
    if gpt._starts(chunk):
        x, c_tok = TP.embedding_forward(idx, fetch.get(WTE), gpt.vocab_lo, m.row_comm,
                                        gpt.sequence_parallel)  # (b, T, C/c); SP: (b, T/R, C/c)
        x = x + params[WPE][positions(gpt, T)]  # wpe is split over col like x
    blocks = []
    for i in gpt.chunks[chunk]:
        x_in = x
        x, block = gpt._block_forward(i, x, fetch.get)
        if gpt.recompute == "full":  # keep the input; backward rebuilds the cache (its working set)
            gpt.rebuilt_block = block_sizes(gpt, block)
        blocks.append(x_in if gpt.recompute == "full" else block)
    if gpt._ends(chunk):
        xf, c_lnf = TP.layernorm_forward(
            x, params["transformer.ln_f.weight"], params["transformer.ln_f.bias"], m.col_comm, C)
        x, c_head = lin[WTE].forward(xf, params[WTE], W=fetch.get(WTE))  # logits (b, T, V/R)
    return x, ModelCache(c_tok, blocks, c_lnf, c_head)


def positions(gpt, T: int) -> slice:
    """The positions of the residual stream this rank holds: all, or its T/row with SP."""
    return local_positions(T, gpt.mesh.row_comm) if gpt.sequence_parallel else slice(0, T)


def loss(gpt, logits, targets):
    """The last stage's cross-entropy of one micro-batch, summed over its tokens, and its cache."""
    return TP.cross_entropy_forward(logits, targets, gpt.vocab_lo, gpt.mesh.row_comm)


def backward(gpt, T, dloss, cache: ModelCache, c_ce, fetch, sync, dy=None, chunk: int = 0):
    """This stage's backward of one micro-batch, in exact reverse order of ``forward``;
    gradients go to ``sync`` as they appear. ``dy``: the next stage's gradient of this
    stage's output (None on the last stage, which starts from the loss). Returns the
    gradient of the input (to send back; None on the first stage) and of the tied wte
    block held here (None where the stage holds no wte), not yet reduce-scattered."""
    lin, ov = gpt.linears, gpt.overlap

    def linear(name, dy, cache):
        dx, d = lin[name + ".weight"].backward(dy, cache, W=fetch.get(name + ".weight"),
                                               oar=ov.oar, ors=ov.ors)
        put(name, d)
        return dx

    def put(prefix, dparams):
        for key, value in dparams.items():
            sync.add(f"{prefix}.{key}", value)

    dwte = None
    dx = dy
    if gpt._ends(chunk):
        dlogits, _ = TP.cross_entropy_backward(dloss, c_ce)
        dxf, d = lin[WTE].backward(dlogits, cache.logits, scatter=False, W=fetch.get(WTE),
                                   oar=ov.oar)  # keep the block: wte is tied
        dwte = d["weight"]
        dx, d = TP.layernorm_backward(dxf, cache.lnf)
        put("transformer.ln_f", d)
    for i, block in zip(reversed(gpt.chunks[chunk]), reversed(cache.blocks)):
        if gpt.recompute == "full":  # the block's forward again, from its saved input
            with phase("recompute", block=i):
                _, block = gpt._block_forward(i, block, fetch.get)
        dx = gpt._block_backward(i, dx, block, linear, put)
    if not gpt._starts(chunk):
        return dx, dwte
    xp = array_module(dx)
    dwpe = xp.zeros_like(gpt.params[WPE])
    dwpe[positions(gpt, T)] = dx.sum(axis=0)  # (T, C/c); SP: this rank's positions, summed over row later
    sync.add(WPE, dwpe)
    if gpt.sequence_parallel:
        dx = all_gather_seq(dx, gpt.mesh.row_comm)  # the vocabulary slice's rows take every position's gradient
    _, d = TP.embedding_backward(dx, cache.encoded)
    dwte = d["weight"] if dwte is None else dwte + d["weight"]  # one reduce-scatter for both uses
    return None, dwte
