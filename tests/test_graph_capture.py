"""CUDA graph capture (cadence.engine.graphs) on a GPU: graphs that share a pool share memory."""

from __future__ import annotations

import gc

import pytest
import torch

from cadence.engine.graphs import capture

pytestmark = pytest.mark.gpu


def test_graphs_sharing_a_pool_reuse_each_others_freed_memory():
    # Each capture's intermediates (64 MB each) are freed by its end. Captured on one stream, the
    # next graph draws the same blocks again; on a stream per capture (the allocator reuses a block
    # only on its own stream) every graph would add its peak: 92 GB for the codec's 44 on an H200.
    dev = torch.device("cuda", torch.cuda.current_device())
    x = torch.randn(4096, 4096, device=dev)

    def work() -> torch.Tensor:
        h = x
        for i in range(8):
            h = h * 1.5 + i
        return h.sum()

    pool = torch.cuda.graph_pool_handle()
    # Capture empties the allocator's cache (torch.cuda.graph does): blocks earlier tests left cached
    # would leave the count below `before` unless they are released first.
    gc.collect()
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved(dev)
    graphs = [capture(work, dev, pool)]
    torch.cuda.synchronize(dev)
    first = torch.cuda.memory_reserved(dev) - before
    graphs += [capture(work, dev, pool) for _ in range(5)]
    torch.cuda.synchronize(dev)
    total = torch.cuda.memory_reserved(dev) - before
    assert first > 0
    assert total < 1.5 * first, f"six graphs reserved {total / 2**20:.0f} MiB, the first {first / 2**20:.0f} MiB"
    for graph, out in graphs:  # and each still computes its result from the shared memory
        graph.replay()
        torch.testing.assert_close(out, work(), rtol=1e-4, atol=1e-2 * out.abs().item())
