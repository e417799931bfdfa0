"""Host staging: broadcast a device buffer through pinned host memory when MPI cannot read the GPU.

An MPI library that is not CUDA-aware only reads host memory, so a device
buffer must be copied out (device -> host, "D2H") before it is sent and copied
in (host -> device, "H2D") after it arrives. Done naively (copy everything,
send everything, copy everything back) the copies add to the network time.
Pipelining them hides most of that: while chunk i crosses the network, chunk
i+1 crosses PCIe. This is the fallback, not the design Awan et al. (EuroMPI
2018) measure: their MPI moves GPU buffers directly (GPUDirect RDMA between
nodes, CUDA IPC inside one) precisely to avoid host copies. A CUDA-aware MPI
takes the "cuda-aware" path (``gpulab.bcast.runtime.gpu``) and never stages.

Design. Each rank keeps a pinned *host mirror* of the whole buffer, and the
broadcast algorithm runs unchanged on the mirror: the MPI messages are exactly
those of a host broadcast. ``Group`` calls three hooks around each message:

- root, ``start()``: the D2H copy of the whole buffer is queued at once, in
  chunks of ``staging_chunk_bytes``, on a copy stream, with an event after
  each chunk. ``before_send``/``before_recv`` wait only for the events that
  cover the bytes about to be used, so chunk i+1 is still being copied while
  chunk i is sent (pipelined algorithms like the chain send chunk by chunk).
- other ranks, ``after_recv``: as soon as a message has arrived its bytes are
  queued for H2D on the copy stream and the rank moves on, so that copy
  overlaps the next receive and the forwarding sends. A rank forwards from
  its host mirror: data crosses PCIe once per rank, never once per hop.
- ``finish()``: waits for the copy stream, so the device buffer holds the
  message when the broadcast returns.

Why a whole-buffer mirror instead of two chunk-sized buffers: in a broadcast
almost every rank forwards what it received (trees, chains, allgathers), and
with only two chunk buffers it would have to copy those bytes back out of the
GPU to send them again. The mirror costs n bytes of pinned memory per rank,
taken from CuPy's pinned memory pool (so repeated broadcasts do not pin again).
"""

from __future__ import annotations

import numpy as np

DEFAULT_STAGING_CHUNK = 1 << 20  # D2H pipeline granularity on the root


class Stager:
    """One broadcast's host mirror and the copies between it and the device buffer ``dev``."""

    def __init__(self, device, dev, is_root: bool, chunk_bytes: int = DEFAULT_STAGING_CHUNK):
        self.device, self.dev, self.is_root, self.chunk = device, dev, is_root, chunk_bytes
        self.host = device.host_buffer(dev.nbytes)  # uint8, pinned on a real GPU
        self.stream = device.stream()  # one copy stream: copies complete in the order queued
        self._base = self.host.ctypes.data
        self._copied_out: list[tuple[int, object]] = []  # root: (end byte, event after that chunk)
        self._ready = 0  # root: host bytes [0, _ready) are known to hold the device's data
        self.stats = {"d2h_chunks": 0, "h2d_copies": 0, "h2d_bytes": 0}

    def start(self) -> None:
        """Root: queue the whole D2H copy, chunk by chunk, each followed by an event."""
        if not self.is_root:
            return
        n = self.host.nbytes
        for begin in range(0, n, self.chunk):
            end = min(begin + self.chunk, n)
            self.device.d2h(self.host[begin:end], self.dev[begin:end], self.stream)
            self._copied_out.append((end, self.device.event(self.stream)))
            self.stats["d2h_chunks"] += 1

    def _span(self, view: np.ndarray) -> tuple[int, int]:
        """Where a slice of the mirror lies in it (algorithms pass slices, not offsets)."""
        begin = view.ctypes.data - self._base if isinstance(view, np.ndarray) else -1
        end = begin + view.nbytes
        if not 0 <= begin <= end <= self.host.nbytes:
            raise ValueError("staged broadcast: a message buffer is not a slice of the host mirror")
        return begin, end

    def _wait_copied_out(self, end: int) -> None:
        # events complete in stream order: waiting on the one covering `end` covers all before it
        while self._ready < end:
            chunk_end, event = self._copied_out.pop(0)
            event.synchronize()
            self._ready = chunk_end

    def before_send(self, view: np.ndarray) -> None:
        """The root may send these host bytes only once their D2H copy has landed."""
        if self.is_root and view.nbytes:
            self._wait_copied_out(self._span(view)[1])

    def before_recv(self, view: np.ndarray) -> None:
        """The root receives only in allgathers (its own bytes back): not while a D2H still writes them."""
        self.before_send(view)

    def after_recv(self, view: np.ndarray) -> None:
        """A non-root rank got these bytes: queue their H2D copy and move on."""
        if self.is_root or not view.nbytes:
            return
        begin, end = self._span(view)
        self.device.h2d(self.dev[begin:end], view, self.stream)
        self.stats["h2d_copies"] += 1
        self.stats["h2d_bytes"] += end - begin

    def finish(self) -> None:
        """Wait for every queued copy: the device buffer is complete and the mirror may be reused."""
        self.stream.synchronize()
