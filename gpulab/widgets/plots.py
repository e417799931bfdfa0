"""Showing figures in the notebook: ``display(as_image(sweep_figure(rows)))``.

The drawings themselves live in ``gpulab.bcast.plots.drawings`` (the command line uses them
too); ``gpulab.widgets`` exports the ones the notebooks call.
"""

from __future__ import annotations

import io
from functools import partial

from matplotlib.figure import Figure

from gpulab.bcast.sizes import format_size

# '1K', '3M', '100': slider labels, no byte suffix
size_label = partial(format_size, byte_suffix="")


def as_image(fig: Figure, dpi: int = 80):
    """The figure as a PNG image for display(): shown the same whatever matplotlib backend is active."""
    from IPython.display import Image  # a notebook extra: only showing a figure needs it

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return Image(buf.getvalue())
