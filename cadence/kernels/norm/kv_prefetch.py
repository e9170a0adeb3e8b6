"""Cached keys and values pulled into L2 ahead of a decode layer's attention.

At 64 rows the talker's decode attention reads ~131 MB a layer from HBM, while the GEMMs and norms
between two attentions leave HBM mostly idle: they are bound by what each SM takes in from L2, not
by HBM. So the norm kernel before a layer's qkv GEMM can issue, before its PDL wait, bulk L2
prefetches of every row's first cached tokens of that layer, one page of keys or values a thread,
and the attention finds them in L2. Only a hint: no value the walk computes changes, whether a
prefetch lands, is evicted again or is dropped.

How much is a budget of bytes a layer, shared by the batch's rows (L2 holds ~50 MB on an H200, and
the GEMMs' weights pass through it too): 32 MB is 128 tokens a row at 64 rows, 32 at 256. The code
predictor's stack prefetches (its one-page contexts at 64 rows fit 16 MB a layer); the talker's
does not, since there the prefetch's reads compete with the GEMMs' weights in HBM and L2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CODE_PREDICTOR_MEGABYTES = 16.0


@dataclass(frozen=True)
class KvPrefetchPlan:
    """How much a decode stack prefetches: megabytes of keys and values a layer, over the batch's
    rows; 0: off."""

    megabytes: float = 0.0

    def tokens(self, rows: int, k_cache: torch.Tensor) -> int:
        """Cached tokens a row that the budget buys at `rows` rows, keys and values of a layer
        [pages, page size, kv heads, head dim] (0: none)."""
        token_bytes = 2 * k_cache[0, 0].numel() * k_cache.element_size()
        return int(self.megabytes * 2**20) // (max(rows, 1) * token_bytes)


@dataclass(frozen=True)
class KvPrefetch:
    """What one norm kernel prefetches: for each of its rows (each a decode row, its own sequence),
    the first min(context, tokens) tokens of that row's pages in one layer's caches."""

    k_cache: torch.Tensor  # [pages, page size, kv heads, head dim], one layer's
    v_cache: torch.Tensor
    block_table: torch.Tensor  # [rows, pages a row]
    context_lens: torch.Tensor  # [rows]
    tokens: int
