"""Decode attention for many rows as a CUDA kernel (attention/cuda/decode_attention.cu): what the
fused Triton decode attention does (QK-norm, RoPE, the new key and value to the cache, attention over
the row's pages; attention/reference.py has the definition), with the cached keys and values
streamed into shared memory by the copy engine, the first pages before the kernel's PDL wait.

One CTA takes a row and `heads_per_cta` of its kv heads, a warp each, with no split of the context,
and one more warp whose only job is the copies: at 64 rows and 8 kv heads, 4 heads a CTA is 128
CTAs, one an SM. It runs the code predictor's decode steps at 64 rows (contexts of one or two pages,
whose copies start before the wait); over the talker's long contexts it is a little slower than the
Triton kernel, so those stay there. It also takes several new tokens a sequence as consecutive rows
(`new_tokens`: the code predictor's first pass, two a stream).
Hopper and newer (bulk copies, mbarriers, griddepcontrol), bf16 caches of 16-token pages and heads
of 128; the Triton kernel runs everything else. Which decode calls take it (rows, short contexts),
its pages in flight and its CTAs are the tile table's decode_attention section (tile_table.py).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from ..launch.nvrtc import compile_source, launch, runs_on
from ..launch.pdl import pdl_on, trigger_first_now
from ..tile_table import current_table

SOURCE = Path(__file__).with_name("cuda") / "decode_attention.cu"
MAX_PAGES = 1024  # the longest page table (16 K tokens of 16), held in shared memory as int32


@dataclass(frozen=True)
class AttentionPlan:
    """One compiled instance and its launch: the heads, page size, kv heads a CTA (a warp each),
    pages in flight a CTA, and new tokens a sequence (that many consecutive rows; the code
    predictor's first pass: 2)."""

    heads: int
    kv_heads: int
    head_dim: int
    page_size: int
    heads_per_cta: int
    stages: int
    trigger_first: bool = False
    new_tokens: int = 1

    def grid(self, rows: int) -> int:
        return rows // self.new_tokens * (self.kv_heads // self.heads_per_cta)

    @property
    def threads(self) -> int:
        return 32 * (self.heads_per_cta + 1)  # the heads' warps and the copying warp

    @property
    def smem(self) -> int:
        """decode_attention.cu's stages (a page's keys and values, token rows padded 16 bytes) and
        its `struct Tail` (the mbarriers, the page table, each head warp's queries, sums, maxima and
        totals)."""
        hc, d = self.heads_per_cta, self.head_dim
        g = self.new_tokens * self.heads // self.kv_heads  # a warp's query columns
        stage = 2 * self.page_size * (hc * d + 8) * 2
        return self.stages * stage + 16 * self.stages + 4 * MAX_PAGES + hc * g * d * (2 + 4) + 2 * hc * g * 4

    @property
    def defines(self) -> tuple[tuple[str, int], ...]:
        return (("HQ", self.heads), ("HKV", self.kv_heads), ("HD", self.head_dim), ("PS", self.page_size),
                ("HC", self.heads_per_cta), ("STAGES", self.stages), ("TRIGGER_FIRST", int(self.trigger_first)),
                ("MAX_PAGES", MAX_PAGES), ("SMEM_BYTES", self.smem), ("NEW", self.new_tokens))  # fmt: skip


def attention_plan(rows: int, heads: int, kv_heads: int, head_dim: int, page_size: int, dtype: torch.dtype,
                   min_rows: int | None = None, new_tokens: int = 1) -> AttentionPlan | None:  # fmt: skip
    """The kernel's plan for a decode call of `rows` sequences (each `new_tokens` rows), with the tile
    table's decode_attention stages and as many kv heads a CTA as keep its `ctas` CTAs busy, or None
    where it does not apply: fewer than `min_rows` sequences (None: the table's min_rows), another
    cache dtype, page size or head dim than the kernel's fragments take, or more than 8 queries a kv
    head (query heads a kv head times new tokens)."""
    table = current_table().decode_attention
    if rows < (table.min_rows if min_rows is None else min_rows):
        return None
    if dtype != torch.bfloat16 or head_dim != 128 or page_size != 16:
        return None
    if heads % kv_heads or new_tokens < 1 or new_tokens * heads // kv_heads > 8:
        return None
    per_cta = 1  # as many kv heads a CTA as keep table.ctas CTAs busy, at most 4 (4 heads' warps)
    while per_cta < 4 and kv_heads % (2 * per_cta) == 0 and rows * kv_heads // (2 * per_cta) >= table.ctas:
        per_cta *= 2
    return AttentionPlan(heads, kv_heads, head_dim, page_size, per_cta, table.stages, new_tokens=new_tokens)


def decode_plan(qkv: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor, heads: int, kv_heads: int,
                max_context: int | None, new_tokens: int = 1) -> AttentionPlan | None:  # fmt: skip
    """The plan for a decode call where the kernel takes it: the tile table's decode_attention
    min_rows to max_rows sequences (of `new_tokens` rows each) whose contexts are known to be at most
    its short_context tokens, page tables of up to MAX_PAGES, on a GPU where it runs; else None."""
    rows, sequences = qkv.shape[0], qkv.shape[0] // new_tokens
    table = current_table().decode_attention
    short = max_context is not None and max_context <= table.short_context
    if not short or sequences > table.max_rows or block_table.shape[1] > MAX_PAGES:
        return None
    if new_tokens > 1 and rows % new_tokens:
        return None
    plan = attention_plan(sequences, heads, kv_heads, k_cache.shape[3], k_cache.shape[1], k_cache.dtype,
                          new_tokens=new_tokens)  # fmt: skip
    if plan is None or not qkv.is_cuda or not attention_supported(qkv.device):
        return None
    return plan


@functools.cache
def attention_supported(device: torch.device) -> bool:
    """Whether the kernel runs on `device` (nvrtc.runs_on)."""
    return runs_on(device, "the CUDA decode attention", lambda: _kernel(AttentionPlan(16, 8, 128, 16, 4, 4)))


def _kernel(plan: AttentionPlan):
    return compile_source(SOURCE, "decode_attention_kernel", plan.defines, plan.smem)


def cuda_qk_norm_rope_attention(
    qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, block_table, context_lens, scale,
    num_heads: int, num_kv_heads: int, plan: AttentionPlan | None = None, new_tokens: int = 1,
) -> torch.Tensor:  # fmt: skip
    """The fused decode attention by the CUDA kernel: row n of qkv [N, (Hq+2Hkv)*D] is
    its stream's new token at positions[n] = context_lens[n] - 1, written to cache slot
    slot_index[n]; with new_tokens (or plan.new_tokens) > 1, every that many consecutive rows are one
    stream's new tokens at consecutive positions, each attending to the ones before it. Returns
    [N, Hq*D]. The index tensors are int64, read before the kernel's PDL wait (as are the cached
    tokens before the new ones), so the kernel it waits for must not write them."""
    n, d = qkv.shape[0], k_cache.shape[3]
    new_tokens = plan.new_tokens if plan is not None else new_tokens
    plan = plan or attention_plan(n // max(new_tokens, 1), num_heads, num_kv_heads, d, k_cache.shape[1],
                                  k_cache.dtype, min_rows=1, new_tokens=new_tokens)  # fmt: skip
    if plan is None or k_cache.shape[2] != num_kv_heads or qkv.shape[1] != (num_heads + 2 * num_kv_heads) * d:
        raise ValueError(f"the CUDA attention does not take qkv {tuple(qkv.shape)} over a cache {tuple(k_cache.shape)}")
    if n % plan.new_tokens:
        raise ValueError(f"{n} rows are not whole sequences of {plan.new_tokens} new tokens")
    indices = (positions, slot_index, context_lens, block_table)
    if block_table.shape[1] > MAX_PAGES:
        raise ValueError(f"the CUDA attention takes page tables of up to {MAX_PAGES} pages")
    if any(t.dtype != torch.int64 for t in indices) or block_table.stride(1) != 1:
        raise ValueError("positions, slot_index, context_lens, block_table must be int64 (rows contiguous)")
    tensors = (qkv, q_norm, k_norm, cos, sin, k_cache, v_cache)
    if not all(t.is_contiguous() and t.dtype == torch.bfloat16 for t in tensors):
        raise ValueError("qkv, the norms, the RoPE tables and the caches must be contiguous bfloat16")
    out = torch.empty(n, num_heads * d, dtype=qkv.dtype, device=qkv.device)
    if n == 0:
        return out
    plan = dataclasses.replace(plan, trigger_first=trigger_first_now(qkv))
    args = [qkv, q_norm, k_norm, cos, sin, positions, slot_index, context_lens, block_table,
            ctypes.c_int(block_table.stride(0)), k_cache, v_cache, out, ctypes.c_float(scale),
            ctypes.c_float(eps)]  # fmt: skip
    launch(_kernel(plan), plan.grid(n), plan.threads, plan.smem, args, pdl_on(qkv))
    return out
