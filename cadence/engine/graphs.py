"""CUDA graph capture, shared by the walks that run as graphs (talker decode and prefill, codec)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

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


def capture(
    fn: Callable[[], T], device: torch.device, pool: tuple[int, int], warmup: int = 2
) -> tuple[torch.cuda.CUDAGraph, T]:
    """Run `fn` `warmup` times (kernels compiled, the allocator settled), then capture one call into a
    graph drawing memory from `pool`; returns the graph and the captured call's outputs.

    Capture runs on a stream of `device`: torch.cuda.graph's default capture stream is created once
    per process, on the device current at first use (with two GPUs, the wrong one)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with gc_paused(), torch.cuda.graph(graph, pool=pool, stream=side):
        out = fn()
    return graph, out
