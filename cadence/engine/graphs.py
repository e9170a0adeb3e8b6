"""CUDA graph capture, shared by the walks that run as graphs (talker decode and prefill, codec)."""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch
from tqdm import tqdm

T = TypeVar("T")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a graph is captured. A collection during capture
    may free objects of an earlier engine in the same process (pinned host buffers), and the CUDA
    calls such a free makes (an event recorded on the stream that used the buffer) invalidate the
    capture: "operation failed due to a previous error during capture"."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@functools.cache
def _capture_stream(device: torch.device) -> torch.cuda.Stream:
    return torch.cuda.Stream(device)


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """The one stream every graph of `device` is captured on. PyTorch's caching allocator reuses a
    freed block only for allocations on the stream it was made on, so graphs captured on streams of
    their own cannot reuse each other's freed intermediates even when they share a pool: the pool
    grows by every graph's peak (the codec's 44 graphs would take 92 GB of an H200). With one stream
    the pool grows to the largest graph's."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capture_stream(torch.device("cuda", index))


_capture_lock = threading.Lock()  # captures on one stream must not overlap (engines built in threads)


def capture(
    fn: Callable[[], T], device: torch.device, pool: tuple[int, int], warmup: int = 2
) -> tuple[torch.cuda.CUDAGraph, T]:
    """Run `fn` `warmup` times (kernels compiled, the allocator settled), then capture one call into a
    graph drawing memory from `pool`; returns the graph and the captured call's outputs.

    Graphs that share a pool share their intermediates' memory, so they must never run at once:
    each partition replays its graphs on one stream. Capture runs on `capture_stream(device)`:
    torch.cuda.graph's default capture stream is created once per process, on the device current at
    first use (with two GPUs, the wrong one)."""
    with _capture_lock:
        side = capture_stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with gc_paused(), torch.cuda.graph(graph, pool=pool, stream=side):
            out = fn()
        torch.cuda.current_stream(device).wait_stream(side)
        return graph, out


def capture_progress(total: int, what: str) -> tqdm:
    """A progress bar over a partition's graph captures: an H200 engine's build takes one to two
    minutes, most of it the codec's cuDNN autotuning (~2 s a graph). Drawn on a terminal only
    (tqdm's disable=None), so logs and pipes get just the summary line each partition logs."""
    return tqdm(total=total, desc=f"capturing {what}", unit="graph", disable=None, leave=False)
