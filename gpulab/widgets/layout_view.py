"""Pictures of the 3D tensor-parallel layout: which rank stores which piece of a weight.

    fig = owner_figure(n=8, k=8, shape=(2, 2, 2, 1))   # one panel per depth shard
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from gpulab.engine.parallel.shards import owner_map, weight_blocks


def owner_figure(n: int, k: int, shape, transposed: bool = False) -> Figure:
    """The [n, k] weight coloured by owner rank; every rank's (r, c, d) written in its block.

    Panels: the R x C block grid of the layer, then the same grid with each
    block's depth shard marked, because depth splits the flattened block, not
    its rows or columns.
    """
    _, C, _, _ = shape
    owners = owner_map(n, k, shape, transposed)
    blocks = weight_blocks(n, k, shape, transposed)
    ranks = int(owners.max()) + 1
    fig = Figure(figsize=(9, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    cmap = "tab20" if ranks > 10 else "tab10"
    by_block = np.zeros_like(owners)
    for b in blocks:  # colour by the (r, c) block only
        by_block[slice(*b["rows"]), slice(*b["cols"])] = b["r"] * C + b["c"]
    left.imshow(by_block, cmap=cmap, vmin=0, vmax=19 if ranks > 10 else 9)
    right.imshow(owners, cmap=cmap, vmin=0, vmax=19 if ranks > 10 else 9)
    for b in blocks:
        (r0, r1), (c0, c1) = b["rows"], b["cols"]
        if b["d"] == 0:
            left.text((c0 + c1 - 1) / 2, (r0 + r1 - 1) / 2, f"r={b['r']} c={b['c']}", ha="center", va="center")
        start, stop = b["flat"]
        if stop > start:  # the depth shard's first element, in row-major order inside the block
            width = c1 - c0
            y, x = r0 + start // width, c0 + start % width
            right.text(x, y, f"rank {b['rank']}\nd={b['d']}", ha="left", va="top", fontsize=7)
    R, C, D, _ = shape
    left.set_title(f"blocks: out features / {C if transposed else R}, in features / {R if transposed else C}")
    right.set_title(f"stored: each block cut into {D} depth shard(s)")
    for ax in (left, right):
        ax.set_xlabel("in feature (k)")
        ax.set_ylabel("out feature (n)")
    fig.suptitle(f"{'transposed' if transposed else 'plain'} layer W [{n}, {k}] on row={R}, col={C}, depth={D}")
    return fig
