"""Cached keys and values pulled into L2 ahead of a decode layer's attention (perf-notes #135).

At 64 rows the talker's decode attention reads ~131 MB a layer from HBM (~42 µs at ~3.3 TB/s),
while the GEMMs and norms between two attentions (~25 µs a layer) leave HBM mostly idle: they are
bound by what each SM takes in from L2 (#124), not by HBM. So the norm kernel before a layer's qkv
GEMM (or, with `after_o`, the one before the previous layer's MLP, for a longer lead) issues bulk
L2 prefetches of every row's first cached tokens of that layer, one page of keys or values a
thread, and the attention finds them in L2. Only a hint: no value the walk computes changes,
whether a prefetch lands, is evicted again or is dropped.

How much is a budget of bytes a layer, shared by the batch's rows (L2 holds ~50 MB on an H200,
and the GEMMs' weights pass through it too): 32 MB is 128 tokens a row at 64 rows, 32 at 256.

Timed in session 42 (#139-#140, b64 decode walks): the talker's prefetch lost (32 MB +0.06 ms, 32 MB
after the wait +0.16: its reads compete with the GEMMs' weights in HBM and L2), the code predictor's
alone paid (8, 16 or 32 MB: -0.03 to -0.04 ms). So the default is DEFAULT_SPEC, 16 MB a layer for the
code predictor only, whose one-page contexts it then covers at 64 rows. Override or turn it off with
CADENCE_KV_PREFETCH=MB[:o][:last][:waited][:talker|:cp] (KvPrefetchPlan.parse; `0` is off; colons, not
commas, so that h200.sh walkab's TREES can carry it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

ENV = "CADENCE_KV_PREFETCH"
DEFAULT_SPEC = "16:cp"  # perf-notes #140


@dataclass(frozen=True)
class KvPrefetchPlan:
    """Which decode stacks prefetch their layers' caches, how much, and from which norm."""

    megabytes: float = 0.0  # of keys and values a layer, over the batch's rows; 0: off
    after_o: bool = False  # from the norm after the layer before's o projection, not the one before qkv
    evict_last: bool = False  # the prefetched lines at L2's evict-last priority
    # Issued after the norm's wait for the GEMM before it, not before: launched early, the norm's
    # programs sit beside that GEMM, so a prefetch before the wait queues ahead of the next GEMM's own
    # weight prefetch in HBM; after it, behind.
    after_wait: bool = False
    talker: bool = True
    code_predictor: bool = True

    @classmethod
    def parse(cls, spec: str) -> KvPrefetchPlan:
        """'32', '32:o', '16:last:talker', ...: megabytes a layer, then any of o (from the norm after
        o), last (evict-last priority), waited (after the norm's wait), talker or cp (only that
        stack); '' or '0': off."""
        fields = [f.strip() for f in spec.split(":") if f.strip()]
        if not fields:
            return cls()
        try:
            megabytes = float(fields[0])
        except ValueError:
            raise ValueError(f"{ENV}: the first field is megabytes a layer, got {fields[0]!r} in {spec!r}") from None
        flags = set(fields[1:])
        unknown = flags - {"o", "last", "waited", "talker", "cp"}
        if not megabytes >= 0 or unknown or {"talker", "cp"} <= flags:
            raise ValueError(
                f"{ENV}={spec!r}: expected MB (>= 0) then any of o, last, waited, and talker or cp (not both)"
            )
        only = flags & {"talker", "cp"}
        return cls(megabytes, "o" in flags, "last" in flags, "waited" in flags, not only or "talker" in flags,
                   not only or "cp" in flags)  # fmt: skip

    @classmethod
    def from_env(cls) -> KvPrefetchPlan:
        """The plan CADENCE_KV_PREFETCH names, DEFAULT_SPEC where it is unset."""
        return cls.parse(os.environ.get(ENV, DEFAULT_SPEC))

    def for_stack(self, talker: bool) -> KvPrefetchPlan:
        """The plan as one stack runs it (the talker's or the code predictor's): off where excluded."""
        return self if (self.talker if talker else self.code_predictor) else KvPrefetchPlan()

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
    evict_last: bool = False
    after_wait: bool = False
