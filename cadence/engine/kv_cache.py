"""Paged KV cache for the talker: fixed-size pages, a free list, per-request page lists.

Pages are reserved whole at admission for the most tokens a request can reach (prompt plus its
frame budget), so a running stream never needs memory it might not get and is never evicted.
"""

from __future__ import annotations

import logging
from collections import deque

import torch

log = logging.getLogger(__name__)


class PagedKVCache:
    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        page_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        if num_pages < 2:
            raise ValueError("the KV cache budget is too small for two pages")
        num_pages -= 1
        # The last page is scratch space for batch padding (see fast_step.py); it is never handed out.
        self.scratch_page = num_pages
        shape = (num_layers, num_pages + 1, page_size, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.page_size = page_size
        self.num_pages = num_pages
        self._free: deque[int] = deque(range(num_pages))

    @staticmethod
    def bytes_per_token(num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    @property
    def nbytes(self) -> int:
        """Device memory of the keys and values (the scratch page included): what the budget bought."""
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def used_pages(self) -> int:
        return self.num_pages - len(self._free)

    def allocate(self, n: int) -> list[int] | None:
        """n pages, or None (nothing taken) when fewer are free."""
        if n > len(self._free):
            return None
        return [self._free.popleft() for _ in range(n)]

    def release(self, pages: list[int]) -> None:
        self._free.extend(pages)
