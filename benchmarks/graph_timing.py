"""Timing of GPU work as the engine runs it: captured once in a CUDA graph, then replayed.

Shared by the kernel sweeps (skinny_linear.py, paged_attention.py); import it as a sibling module (`python
benchmarks/NAME.py` puts this folder on the path).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def replay_ms(capture: Callable[[], None], reps: int = 20) -> float:
    """Median ms of one replay of a CUDA graph holding what `capture()` launches. It runs once on a
    side stream first (Triton compiles, cuBLAS picks its kernels) so the capture holds only kernels."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        capture()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capture()
    return graph_replay_ms(graph, reps)


def graph_replay_ms(graph: torch.cuda.CUDAGraph, reps: int = 20, warmup: int = 0) -> float:
    """Median ms of one replay of `graph` (CUDA events around each), after `warmup` untimed replays."""
    for _ in range(warmup):
        graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]
