"""Cached keys and values pulled into L2 ahead of a decode layer's attention (perf-notes #135).

At 64 rows the talker's decode attention reads ~131 MB a layer from HBM (~42 µs at ~3.3 TB/s),
while the GEMMs and norms between two attentions (~25 µs a layer) leave HBM mostly idle: they are
bound by what each SM takes in from L2 (#124), not by HBM. So the norm kernel before a layer's qkv
GEMM issues, before its PDL wait, bulk L2 prefetches of every row's first cached tokens of that
layer, one page of keys or values a thread, and the attention finds them in L2. Only a hint: no
value the walk computes changes, whether a prefetch lands, is evicted again or is dropped.

How much is a budget of bytes a layer, shared by the batch's rows (L2 holds ~50 MB on an H200,
and the GEMMs' weights pass through it too): 32 MB is 128 tokens a row at 64 rows, 32 at 256.

Timed on b64 decode walks (#139-#140): the talker's prefetch lost (32 MB +0.06 ms: its reads compete
with the GEMMs' weights in HBM and L2), the code predictor's alone paid (8, 16 or 32 MB: -0.03 to
-0.04 ms). So the code predictor's stack prefetches CODE_PREDICTOR_MEGABYTES a layer, which covers
its one-page contexts at 64 rows, and the talker's none.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CODE_PREDICTOR_MEGABYTES = 16.0  # perf-notes #140


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
