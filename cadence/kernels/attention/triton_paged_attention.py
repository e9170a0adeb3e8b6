"""Paged decode attention (Triton): blocks of context tokens gathered through the page table,
tensor-core dots, the context split over programs and merged when a batch is small. In decode, where
each query row is its own sequence's one new token, the kernel also takes the rows' QK-norm, RoPE
and cache write (`fused_qk_norm_rope_attention`): one kernel a layer fewer."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from ..launch.pdl import pdl_launch, trigger_first_for
from ..launch.triton_pdl import pdl_entry, pdl_trigger, pdl_wait, prefetch_l2
from ..tile_table import current_table
from .triton_qk_norm_rope import norm_rope_heads


@triton.jit
def _load_block(kc_ptr, vc_ptr, bt_ptr, n, kvh, tok0, end, bt_stride, t, d, HKV: tl.constexpr, D: tl.constexpr,
                PS: tl.constexpr):  # fmt: skip
    """K and V [BT, D] of context tokens tok0 + t (masked at `end`), gathered through the page table."""
    tok = tok0 + t
    valid = tok < end
    page = tl.load(bt_ptr + n * bt_stride + tok // PS, mask=valid, other=0).to(tl.int64)
    row = (page * PS + tok % PS) * HKV + kvh
    k = tl.load(kc_ptr + row[:, None] * D + d[None, :], mask=valid[:, None], other=0.0)
    v = tl.load(vc_ptr + row[:, None] * D + d[None, :], mask=valid[:, None], other=0.0)
    return k, v, valid


@triton.jit
def _split_range(ctx, split, FUSED: tl.constexpr, PS: tl.constexpr, SPLITS: tl.constexpr):
    """This split's first token and the end of the tokens it reads from the cache (the new token of
    a FUSED row, at ctx - 1, comes from registers), and the end of its share of the context."""
    cached = ctx - 1 if FUSED else ctx
    pages = (ctx + PS - 1) // PS
    per_split = (pages + SPLITS - 1) // SPLITS
    start = split * per_split * PS
    end = tl.minimum((split + 1) * per_split * PS, ctx)
    return start, tl.minimum(end, cached), end


@triton.jit
def _context_len(ctx_ptr, n):
    """Row n's context length as int32 whatever the tensor's dtype (the engine's are int64): 64-bit
    bounds and token indices make the block loop markedly slower."""
    return tl.load(ctx_ptr + n).to(tl.int32)


@triton.jit
def _prefetch_first_block(kc_ptr, vc_ptr, bt_ptr, ctx_ptr, n, kvh, split, bt_stride, num_pages, t,
                          HKV: tl.constexpr, D: tl.constexpr, PS: tl.constexpr, FUSED: tl.constexpr,
                          SPLITS: tl.constexpr):  # fmt: skip
    """Pull the split's first block of cached keys and values into L2 before the wait for the kernel
    before. Those cache cells were written by earlier walks or steps, but the context length and
    page table read here may still be changing, so the lines fetched are only a guess: a hint that
    can cost bandwidth, never a wrong value (every index is kept inside the table and the pool)."""
    ctx = _context_len(ctx_ptr, n)
    start, stop, _ = _split_range(ctx, split, FUSED, PS, SPLITS)
    tok = start + t
    slot = tok // PS
    page = tl.load(bt_ptr + n * bt_stride + slot, mask=(tok < stop) & (slot < bt_stride), other=0)
    page = tl.minimum(tl.maximum(page.to(tl.int64), 0), num_pages - 1)
    row = (page * PS + tok % PS) * HKV + kvh
    line: tl.constexpr = 128 * 8 // kc_ptr.dtype.element_ty.primitive_bitwidth  # values per 128-byte line
    lines = tl.arange(0, (D + line - 1) // line) * line  # one address per line of a row
    prefetch_l2(kc_ptr + row[:, None] * D + lines[None, :])
    prefetch_l2(vc_ptr + row[:, None] * D + lines[None, :])


@triton.jit
def _attend_block(q, k, v, valid, m_i, l_i, acc, scale, IEEE: tl.constexpr):
    """One online-softmax step of the G_PAD query rows over a block of keys and values."""
    if IEEE:  # fp32 caches: exact fp32 products, as the PyTorch definition computes them
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = tl.where(valid[None, :], s * scale, -float("inf"))  # [G_PAD, BT]
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if IEEE:
        pv = tl.dot(p, v, input_precision="ieee")
    else:  # probabilities rounded to the cache's dtype for the tensor cores, as flash kernels do
        pv = tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc * alpha[:, None] + pv


@triton.jit
def _attend_one(q, k, v, m_i, l_i, acc, scale, IEEE: tl.constexpr):
    """The online-softmax step of one key and value ([1, D]) in registers: the row's new token.
    Rounded as _attend_block rounds (fp32 products of the cache dtype's values; the probability in
    the cache's dtype unless IEEE), summed in another order than a tensor-core dot."""
    s = tl.sum(q.to(tl.float32) * k.to(tl.float32), axis=1) * scale  # [G_PAD]
    m_new = tl.maximum(m_i, s)
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new)
    l_i = l_i * alpha + p
    if not IEEE:
        p = p.to(v.dtype).to(tl.float32)
    return m_new, l_i, acc * alpha[:, None] + p[:, None] * v.to(tl.float32)


@triton.jit
def _paged_attention_kernel(
    q_ptr, kc_ptr, vc_ptr, bt_ptr, ctx_ptr, m_ptr, l_ptr, acc_ptr, o_ptr, scale, bt_stride, num_pages,
    qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr, eps,
    HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, PS: tl.constexpr, G: tl.constexpr,
    G_PAD: tl.constexpr, BT: tl.constexpr, SPLITS: tl.constexpr, IEEE: tl.constexpr, FUSED: tl.constexpr,
    STAGES: tl.constexpr, PREFETCH: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    """One program per (query row, kv head, split): the split's share of the row's own context
    (so short and long contexts both spread over all splits), online softmax over blocks of BT
    tokens gathered from several pages at once, so each iteration has a block's loads in flight
    rather than one page's. STAGES > 0 runs the loop as a `tl.range`, whose K and V go to shared
    memory by `cp.async`; Triton 3.6 makes the page-id load one more async copy, so each iteration
    waits for all copies in flight (`async_wait num = 0`) and the loads overlap only other programs'
    work, not the previous block's dots (loading the page ids outside the pipeliner so that 3-4
    stages keep blocks in flight is no faster). PREFETCH pulls the first
    block into L2 before the PDL wait. The G query heads sharing the kv head are padded to the 16
    rows a tensor-core dot needs (free: the kernel is bound by reading K and V). With one split the
    result is final and stored directly; otherwise the partial (max, sum, acc) go to the merge.

    FUSED: q_ptr is the rows' qkv [N, (HQ+2HKV)*D] and each row is its sequence's new token at
    position context_lens - 1. Every program QK-norms and rotates its query heads and the row's key
    itself (norm_rope_heads, the same rounding as qk_norm_rope_store); the blocks stop before the
    new token, whose cache cell is not yet written, and the split that holds it adds it from
    registers as one more softmax step (_attend_one: putting it into its block with a where cost
    thousands of bytes of spills at 128-token blocks); split 0 writes it to the cache slot. No other
    row may read that slot in the same launch (prefill rows of one sequence do: they take the
    unfused pair of kernels)."""
    n = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    t = tl.arange(0, BT)
    pdl_trigger(USE_PDL)
    if PREFETCH and USE_PDL:  # only a kernel launched early has a wait to prefetch ahead of
        _prefetch_first_block(kc_ptr, vc_ptr, bt_ptr, ctx_ptr, n, kvh, split, bt_stride, num_pages, t, HKV, D, PS,
                              FUSED, SPLITS)  # fmt: skip
    pdl_wait(USE_PDL)
    heads = n * HQ + kvh * G + g  # query heads of this kv head (rows >= G are padding)
    ctx = _context_len(ctx_ptr, n)
    if FUSED:
        row = q_ptr + n * (HQ + 2 * HKV) * D
        pos = tl.load(pos_ptr + n).to(tl.int64)
        q = norm_rope_heads(row, kvh * G + g, g < G, qn_ptr, cos_ptr, sin_ptr, pos, eps, D)  # [G_PAD, D]
        one = tl.arange(0, 1)
        k_new = norm_rope_heads(row, HQ + kvh + one, one < 1, kn_ptr, cos_ptr, sin_ptr, pos, eps, D)  # [1, D]
        v_new = tl.load(row + (HQ + HKV + kvh) * D + one[:, None] * D + d[None, :])
        if split == 0:
            cell = (tl.load(slot_ptr + n).to(tl.int64) * HKV + kvh) * D + d[None, :]
            tl.store(kc_ptr + cell, k_new)
            tl.store(vc_ptr + cell, v_new)
    else:
        q = tl.load(q_ptr + heads[:, None] * D + d[None, :], mask=g[:, None] < G, other=0.0)  # [G_PAD, D]
    start, stop, end = _split_range(ctx, split, FUSED, PS, SPLITS)
    m_i = tl.full([G_PAD], -float("inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    if STAGES == 0:
        tok0 = start
        while tok0 < stop:  # a while loop: K and V in registers, one block's loads in flight at a time
            k, v, valid = _load_block(kc_ptr, vc_ptr, bt_ptr, n, kvh, tok0, stop, bt_stride, t, d, HKV, D, PS)
            m_i, l_i, acc = _attend_block(q, k, v, valid, m_i, l_i, acc, scale, IEEE)
            tok0 += BT
    else:  # software-pipelined: the next STAGES - 1 blocks' K and V copied to shared memory meanwhile
        for tok0 in tl.range(start, stop, BT, num_stages=STAGES):
            k, v, valid = _load_block(kc_ptr, vc_ptr, bt_ptr, n, kvh, tok0, stop, bt_stride, t, d, HKV, D, PS)
            m_i, l_i, acc = _attend_block(q, k, v, valid, m_i, l_i, acc, scale, IEEE)
    if FUSED:
        if (start <= ctx - 1) & (ctx - 1 < end):  # this split holds the new token
            m_i, l_i, acc = _attend_one(q, k_new, v_new, m_i, l_i, acc, scale, IEEE)
    if SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(o_ptr + heads[:, None] * D + d[None, :], out.to(o_ptr.dtype.element_ty), mask=g[:, None] < G)
    else:
        part = heads * SPLITS + split
        tl.store(m_ptr + part, m_i, mask=g < G)
        tl.store(l_ptr + part, l_i, mask=g < G)
        tl.store(acc_ptr + part[:, None] * D + d[None, :], acc, mask=g[:, None] < G)


@triton.jit
def _merge_splits_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, D: tl.constexpr, SPLITS: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_entry(USE_PDL)
    row = tl.program_id(0)  # n * HQ + h
    s = tl.arange(0, SPLITS)
    d = tl.arange(0, D)
    m = tl.load(m_ptr + row * SPLITS + s)
    l = tl.load(l_ptr + row * SPLITS + s)
    m_max = tl.max(m, axis=0)
    w = tl.where(m > -float("inf"), tl.exp(m - m_max), 0.0)
    acc = tl.load(acc_ptr + (row * SPLITS + s[:, None]) * D + d[None, :])
    total = tl.sum(acc * w[:, None], axis=0) / tl.sum(l * w, axis=0)
    tl.store(o_ptr + row * D + d, total.to(o_ptr.dtype.element_ty))


def attention_splits(rows: int, kv_heads: int) -> int:
    """Splits per (row, kv head): doubled, up to the tile table's paged_attention.max_splits, while
    rows x kv heads x splits stays below its split_programs, so that a decode batch fills the GPU's
    SMs about twice (the sweep of benchmarks/paged_attention.py: on 132 SMs batch 8 is best at 4
    splits, batch 1 at 16; none from 32 rows on, where two splits at 64 rows are slower)."""
    table = current_table().paged_attention
    splits = 1
    while splits < table.max_splits and rows * kv_heads * splits < table.split_programs:
        splits *= 2
    return splits


@dataclass(frozen=True)
class AttentionTiles:
    """Launch choices of the paged attention kernel: context tokens per iteration (64: 32 KB of K
    and V in flight per program in bf16), warps, the block loop's software-pipelining depth (0: a
    plain loop, K and V in registers; 2-3: the next blocks copied to shared memory while one is
    scored) and whether each program pulls its first block into L2 before the PDL wait."""

    block_tokens: int = 64
    warps: int = 4
    stages: int = 0
    prefetch: bool = False


def attention_tiles(rows: int, max_context: int | None = None) -> AttentionTiles:
    """The tiles for a decode batch of `rows` query rows, from the tile table's paged_attention section
    (the sweep of benchmarks/paged_attention.py and of decode steps): from pipelined_from_rows rows
    up, block_tokens-token blocks in a loop pipelined pipelined_stages deep; below, where the context
    is split 4-16 ways and each split is short, the same blocks in a plain loop. Contexts known to be
    at most short_context tokens (the code predictor's <= 17: `max_context`) take short_block_tokens
    blocks: a longer block only adds masked work and registers. In graphs whose kernels wait first,
    each program pulls its first block into L2 before the PDL wait (under trigger first, kernels
    launched far ahead would prefetch while the running ones stream)."""
    table = current_table().paged_attention
    if max_context is not None and max_context <= table.short_context:
        tiles = AttentionTiles(block_tokens=table.short_block_tokens, warps=table.warps)
    elif rows >= table.pipelined_from_rows:
        tiles = AttentionTiles(block_tokens=table.block_tokens, warps=table.warps, stages=table.pipelined_stages)
    else:
        tiles = AttentionTiles(block_tokens=table.block_tokens, warps=table.warps)
    return tiles if trigger_first_for(rows) else replace(tiles, prefetch=True)


def paged_attention(
    q, k_cache, v_cache, block_table, context_lens, scale, splits: int | None = None,
    tiles: AttentionTiles | None = None, max_context: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """Each query row n (q [N, Hq, D]) attends over its first context_lens[n] cached tokens, read
    through block_table[n] (pages of k_cache [pages, page_size, Hkv, D]). Returns [N, Hq*D]."""
    return _attention(
        q, q.shape[1], None, k_cache, v_cache, block_table, context_lens, scale, splits, tiles, max_context
    )


def fused_qk_norm_rope_attention(
    qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, block_table, context_lens, scale,
    num_heads: int, num_kv_heads: int, splits: int | None = None, tiles: AttentionTiles | None = None,
    max_context: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """qk_norm_rope_store then paged_attention in one kernel, for decode rows: row n of qkv
    [N, (Hq+2Hkv)*D] is its own sequence's new token, at positions[n] = context_lens[n] - 1 and
    cache slot slot_index[n], and no row reads another row's new token. Returns [N, Hq*D]."""
    fused = (q_norm, k_norm, cos, sin, positions, slot_index, eps)
    return _attention(qkv, num_heads, fused, k_cache, v_cache, block_table, context_lens, scale, splits, tiles,
                      max_context)  # fmt: skip


def _attention(q, hq, fused, k_cache, v_cache, block_table, context_lens, scale, splits, tiles, max_context):
    n, d = q.shape[0], k_cache.shape[3]
    ps, hkv = k_cache.shape[1], k_cache.shape[2]
    splits = splits or attention_splits(n, hkv)
    tiles = tiles or attention_tiles(n, max_context)
    g = hq // hkv
    out = torch.empty(n, hq * d, dtype=q.dtype, device=q.device)
    if splits > 1:
        m = torch.empty(n * hq * splits, dtype=torch.float32, device=q.device)
        l = torch.empty_like(m)
        acc = torch.empty(n * hq * splits, d, dtype=torch.float32, device=q.device)
    else:  # one split writes `out` itself: the partial buffers are never touched
        m = l = acc = out
    qn, kn, cos, sin, pos, slot, eps = fused or (q, q, q, q, context_lens, context_lens, 0.0)
    launch = pdl_launch(q)
    _paged_attention_kernel[(n, hkv, splits)](
        q, k_cache, v_cache, block_table, context_lens, m, l, acc, out, scale, block_table.stride(0), k_cache.shape[0],
        qn, kn, cos, sin, pos, slot, eps,
        HQ=hq, HKV=hkv, D=d, PS=ps, G=g, G_PAD=max(16, triton.next_power_of_2(g)),
        BT=max(tiles.block_tokens, ps), SPLITS=splits, IEEE=k_cache.dtype == torch.float32, FUSED=fused is not None,
        STAGES=tiles.stages, PREFETCH=tiles.prefetch, num_warps=tiles.warps, **launch,
    )  # fmt: skip
    if splits > 1:
        _merge_splits_kernel[(n * hq,)](m, l, acc, out, D=d, SPLITS=splits, **launch)
    return out
