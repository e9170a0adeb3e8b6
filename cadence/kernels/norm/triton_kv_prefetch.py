"""The Triton side of kv_prefetch.py: a decode row's first cached tokens of one layer pulled into L2
by the norm kernel before that layer's qkv, one page of keys and one of values a thread."""

from __future__ import annotations

import triton
import triton.language as tl

from ..launch.triton_pdl import bulk_prefetch_l2
from .kv_prefetch import KvPrefetch


@triton.jit
def kv_prefetch_pages(bt_ptr, ctx_ptr, row, bt_stride, num_pages, TOKENS: tl.constexpr, SLOTS: tl.constexpr,
                      PS: tl.constexpr):  # fmt: skip
    """Slot i < SLOTS: page i of decode row `row` (its pool index, clamped inside the pool) and how
    many of its tokens fall in the row's first min(context, TOKENS) (0: none, nothing to fetch).
    The table and context may still be changing when read before the wait (a later page, a token
    more): a guess that only costs bandwidth, never a wrong value."""
    i = tl.arange(0, SLOTS)
    ctx = tl.minimum(tl.load(ctx_ptr + row).to(tl.int32), TOKENS)
    tokens = tl.minimum(tl.maximum(ctx - i * PS, 0), PS)
    tokens = tl.where(i < bt_stride, tokens, 0)
    page = tl.load(bt_ptr + row * bt_stride + i, mask=tokens > 0, other=0)
    return tl.minimum(tl.maximum(page.to(tl.int64), 0), num_pages - 1), tokens


@triton.jit
def prefetch_kv_pages(kc_ptr, vc_ptr, bt_ptr, ctx_ptr, row, bt_stride, num_pages, TOKENS: tl.constexpr,
                      SLOTS: tl.constexpr, PS: tl.constexpr, TOKEN_ELEMS: tl.constexpr):  # fmt: skip
    page, tokens = kv_prefetch_pages(bt_ptr, ctx_ptr, row, bt_stride, num_pages, TOKENS, SLOTS, PS)
    offset = page * (PS * TOKEN_ELEMS)
    nbytes = tokens * (TOKEN_ELEMS * kc_ptr.dtype.element_ty.primitive_bitwidth // 8)
    bulk_prefetch_l2(kc_ptr + offset, nbytes, tokens > 0)
    bulk_prefetch_l2(vc_ptr + offset, nbytes, tokens > 0)


def prefetch_args(prefetch: KvPrefetch | None, rows: int, warps: int) -> dict:
    """The norm kernel's KV prefetch arguments: none on the CPU
    (the interpreter runs no PTX) or without a prefetch; else one thread a page of keys and one of
    values (kv_prefetch.py), so at most a page a thread of each row's tokens, `warps` warps a row."""
    if prefetch is None or prefetch.tokens <= 0 or not prefetch.k_cache.is_cuda:
        return {}
    k, table = prefetch.k_cache, prefetch.block_table
    # The kernel takes the table's row stride for its width, as the attention kernel does.
    if table.shape[0] < rows or table.stride(0) != table.shape[1]:
        raise ValueError(f"KV prefetch: a table {tuple(table.shape)} (strides {table.stride()}) for {rows} rows")
    if k.stride(0) != k[0].numel() or not k[0].is_contiguous():
        raise ValueError(f"KV prefetch: a cache not contiguous [pages, page size, heads, dim]: {tuple(k.shape)}")
    slots, ps = 32 * warps, k.shape[1]
    return dict(
        kc_ptr=k, vc_ptr=prefetch.v_cache, bt_ptr=table, ctx_ptr=prefetch.context_lens, bt_stride=table.stride(0),
        num_pages=k.shape[0], KV_TOKENS=min(prefetch.tokens, slots * ps), KV_SLOTS=slots, PS=ps,
        TOKEN_ELEMS=k.shape[2] * k.shape[3],
    )  # fmt: skip
