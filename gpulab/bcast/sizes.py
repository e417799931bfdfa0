"""Message sizes as people write them: '64K' <-> 65536 (binary units, as OSU and nccl-tests).

Free of MPI on purpose: the notebook kernel uses these too, and must not initialise MPI.
"""

from __future__ import annotations

import re

import numpy as np

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: str | int) -> int:
    """'64K' -> 65536; sizes are binary (K = 1024 bytes), as in OSU and nccl-tests."""
    if isinstance(text, (int, np.integer)):
        return int(text)
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 512, 4K, 1M, 2G)")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def format_size(nbytes: int, byte_suffix: str = "B") -> str:
    """65536 -> '64K', 1536 -> '1.5K', 100 -> '100B' (or '100' with byte_suffix='', as sliders show it)."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}{byte_suffix}" if nbytes < 1024 else f"{nbytes / 1024:.1f}K"


def size_range(spec: str) -> list[int]:
    """'1K:64M' -> powers of two from 1 KiB to 64 MiB; '1K,3000,1M' -> those sizes."""
    if ":" in spec:
        low, high = (parse_size(part) for part in spec.split(":"))
        if low < 1 or high < low:
            raise ValueError(f"size range {spec!r} must go from >= 1 byte up")
        sizes, size = [], low
        while size <= high:
            sizes.append(size)
            size *= 2
        return sizes
    return [parse_size(part) for part in spec.split(",")]
