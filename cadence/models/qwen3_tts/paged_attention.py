"""Attention over the engine's paged KV cache, for one forward of a batch of requests: the eager
walk's attention (the `sdpa` backend), Qwen3's attention over pages gathered per step.

Each forward writes its new keys/values into the requests' pages, then every query attends over
its own request's context gathered through the page table. Rows are independent: a request's
result does not depend on what else is in the batch.
"""

from __future__ import annotations

import torch

from ...engine.kv_cache import PagedKVCache
from .layers import attention


class PagedAttention:
    """`Attend` for a batch: block_table [B,P] page ids, positions [B,L], valid [B,L] (False = padding)."""

    def __init__(self, cache: PagedKVCache, block_table: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor):
        ps = cache.page_size
        self.cache = cache
        self.block_table = block_table
        self.valid = valid
        positions = torch.where(valid, positions, torch.zeros_like(positions))  # pads look at key 0
        pages = block_table.gather(1, positions // ps)
        self.write_index = (pages * ps + positions % ps)[valid]
        key_pos = torch.arange(block_table.shape[1] * ps, device=positions.device)
        self.mask = key_pos[None, None, :] <= positions[:, :, None]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        kc, vc = self.cache.k[layer], self.cache.v[layer]
        kc.view(-1, *kc.shape[2:])[self.write_index] = k[self.valid]
        vc.view(-1, *vc.shape[2:])[self.write_index] = v[self.valid]
        keys = kc[self.block_table].flatten(1, 2)
        values = vc[self.block_table].flatten(1, 2)
        return attention(q, keys, values, self.mask)
