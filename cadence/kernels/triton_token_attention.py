"""Decode attention reading whole tokens (perf-notes #119, an experiment): what
triton_attention.qk_norm_rope_attention does for decode rows, with one program taking all of a
row's kv heads over a share of its context, so that each cached token is read as one run of
HKV x D values (2 KB for the talker) instead of HKV runs of D.

`hbm_rate.py --runs` (#117): plain loads of 2 KB runs read the b64 caches at 3.68 TB/s where the
256-byte runs of a program per kv head read at 3.15, and the shipped attention streams at ~3.3.
The dots stay the size they are now: a block's BT tokens x HKV heads are BT * HKV key rows, and
the row's HQ query heads score all of them, each keeping only its own kv head's columns (a block
diagonal mask). Where the per-head kernel pads each kv head's G query heads to the 16 rows a
tensor-core dot needs, this one computes the other heads' products instead: the same arithmetic.

Off unless `CADENCE_ATTENTION_WHOLE_TOKENS` is SPLITS:BT:WARPS:STAGES (e.g. 8:8:4:2): programs a
row, tokens a block (BT x HKV a power of two, at least 16, and BT dividing the page), warps, and the
pipelining depth of the block loop. Taken by decode calls of 33 to 64 rows over long contexts
(the b64 walk's talker).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .triton_attention import _attend_one, _context_len, _merge_splits_kernel, _split_range, norm_rope_heads
from .triton_launch import pdl_launch, pdl_trigger, pdl_wait


@dataclass(frozen=True)
class TokenTiles:
    """The kernel's launch: programs a row (their context shares merged by _merge_splits_kernel),
    tokens a block, warps, pipelining depth."""

    splits: int = 8
    block_tokens: int = 8
    warps: int = 4
    stages: int = 2


def parse_tiles(spec: str) -> TokenTiles | None:
    """`CADENCE_ATTENTION_WHOLE_TOKENS`: SPLITS:BT:WARPS:STAGES, or empty (off)."""
    if not spec:
        return None
    try:
        splits, block_tokens, warps, stages = (int(x) for x in spec.split(":"))
    except ValueError:
        raise ValueError(f"CADENCE_ATTENTION_WHOLE_TOKENS: {spec!r} is not SPLITS:BT:WARPS:STAGES") from None
    tiles = TokenTiles(splits, block_tokens, warps, stages)
    if tiles.splits < 1 or tiles.block_tokens < 1 or tiles.warps not in (1, 2, 4, 8) or tiles.stages < 0:
        raise ValueError(f"CADENCE_ATTENTION_WHOLE_TOKENS: {spec!r}: splits and BT >= 1, warps 1-8, stages >= 0")
    return tiles


TILES = parse_tiles(os.environ.get("CADENCE_ATTENTION_WHOLE_TOKENS", ""))
MIN_ROWS, MAX_ROWS = 33, 64  # the 64-row bucket's calls


def token_tiles(rows: int, heads: int, kv_heads: int, page_size: int, dtype: torch.dtype, max_context: int | None,
                tiles: TokenTiles | None = TILES) -> TokenTiles | None:  # fmt: skip
    """The tiles for a decode call where the switch takes it: 33-64 rows of bf16 or fp16 caches over
    long contexts (not the code predictor's <= 32 tokens), query heads a power of two, blocks that
    stay in a page and whose rows are a power of two; else None."""
    if tiles is None or not MIN_ROWS <= rows <= MAX_ROWS or dtype not in (torch.bfloat16, torch.float16):
        return None
    if max_context is not None and max_context <= 32:
        return None
    rows_a_block = tiles.block_tokens * kv_heads
    if heads & (heads - 1) or rows_a_block & (rows_a_block - 1) or rows_a_block < 16 or page_size % tiles.block_tokens:
        return None
    return tiles


@triton.jit
def _token_attention_kernel(
    qkv_ptr, kc_ptr, vc_ptr, bt_ptr, ctx_ptr, m_ptr, l_ptr, acc_ptr, o_ptr, scale, bt_stride,
    qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr, eps,
    HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, PS: tl.constexpr, BT: tl.constexpr,
    SPLITS: tl.constexpr, STAGES: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    """Program (row n, split): the split's share of the row's pages, BT tokens (all HKV heads) a
    block. Query rows r (every head of the row), key rows c = t * HKV + h of a block; r scores only
    the columns of its kv head r // G. The new token (at ctx - 1, from qkv) is one more softmax
    step in the split that holds it; split 0 writes it to the cache."""
    n = tl.program_id(0)
    split = tl.program_id(1)
    pdl_trigger(USE_PDL)
    pdl_wait(USE_PDL)
    G: tl.constexpr = HQ // HKV
    r = tl.arange(0, HQ)
    d = tl.arange(0, D)
    row = qkv_ptr + n * (HQ + 2 * HKV) * D
    pos = tl.load(pos_ptr + n).to(tl.int64)
    every = r < HQ
    q = norm_rope_heads(row, r, every, qn_ptr, cos_ptr, sin_ptr, pos, eps, D)  # [HQ, D]
    k_new = norm_rope_heads(row, HQ + r // G, every, kn_ptr, cos_ptr, sin_ptr, pos, eps, D)  # row r: its kv head's
    v_new = tl.load(row + (HQ + HKV + r // G)[:, None] * D + d[None, :])
    if split == 0:  # the new key and value, written by the first query row of each kv head
        cell = (tl.load(slot_ptr + n).to(tl.int64) * HKV + r // G)[:, None] * D + d[None, :]
        tl.store(kc_ptr + cell, k_new, mask=(r % G == 0)[:, None])
        tl.store(vc_ptr + cell, v_new, mask=(r % G == 0)[:, None])
    ctx = _context_len(ctx_ptr, n)
    start, stop, end = _split_range(ctx, split, True, PS, SPLITS)
    c = tl.arange(0, BT * HKV)
    t = c // HKV
    own = (r // G)[:, None] == (c % HKV)[None, :]  # [HQ, BT * HKV]: query row r's kv head
    m_i = tl.full([HQ], -float("inf"), tl.float32)
    l_i = tl.zeros([HQ], tl.float32)
    acc = tl.zeros([HQ, D], tl.float32)
    for tok0 in tl.range(start, stop, BT, num_stages=STAGES):
        valid = tok0 + t < stop
        page = tl.load(bt_ptr + n * bt_stride + tok0 // PS).to(tl.int64)  # a block stays in one page
        cell = ((page * PS + tok0 % PS) * HKV + c).to(tl.int64)[:, None] * D + d[None, :]  # consecutive rows
        k = tl.load(kc_ptr + cell, mask=valid[:, None], other=0.0)
        v = tl.load(vc_ptr + cell, mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k))
        s = tl.where(own & valid[None, :], s * scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # every row has a valid column: its head's first token
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if (start <= ctx - 1) & (ctx - 1 < end):
        m_i, l_i, acc = _attend_one(q, k_new, v_new, m_i, l_i, acc, scale, False)
    heads = n * HQ + r
    if SPLITS == 1:
        tl.store(o_ptr + heads[:, None] * D + d[None, :], (acc / l_i[:, None]).to(o_ptr.dtype.element_ty))
    else:
        part = heads * SPLITS + split
        tl.store(m_ptr + part, m_i)
        tl.store(l_ptr + part, l_i)
        tl.store(acc_ptr + part[:, None] * D + d[None, :], acc)


def token_attention(
    qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, block_table, context_lens, scale,
    num_heads: int, num_kv_heads: int, tiles: TokenTiles,
) -> torch.Tensor:  # fmt: skip
    """triton_attention.qk_norm_rope_attention for decode rows by the whole-token kernel (the same
    arguments and result, [N, Hq*D]). Its dots are the tensor cores' default precision, so the
    walk routes only bf16 and fp16 caches here (`token_tiles`); fp32 runs under the interpreter."""
    n, d = qkv.shape[0], k_cache.shape[3]
    ps = k_cache.shape[1]
    rows_a_block = tiles.block_tokens * num_kv_heads
    if ps % tiles.block_tokens or rows_a_block & (rows_a_block - 1) or rows_a_block < 16:
        raise ValueError(f"the whole-token attention needs blocks within a page ({ps} tokens) of a power of two, "
                         f"at least 16, rows (BT {tiles.block_tokens} x {num_kv_heads} kv heads)")  # fmt: skip
    out = torch.empty(n, num_heads * d, dtype=qkv.dtype, device=qkv.device)
    splits = tiles.splits
    if splits > 1:
        m = torch.empty(n * num_heads * splits, dtype=torch.float32, device=qkv.device)
        l = torch.empty_like(m)
        acc = torch.empty(n * num_heads * splits, d, dtype=torch.float32, device=qkv.device)
    else:
        m = l = acc = out
    launch = pdl_launch(qkv)
    _token_attention_kernel[(n, splits)](
        qkv, k_cache, v_cache, block_table, context_lens, m, l, acc, out, scale, block_table.stride(0),
        q_norm, k_norm, cos, sin, positions, slot_index, eps,
        HQ=num_heads, HKV=num_kv_heads, D=d, PS=ps, BT=tiles.block_tokens, SPLITS=splits, STAGES=tiles.stages,
        num_warps=tiles.warps, **launch,
    )  # fmt: skip
    if splits > 1:
        _merge_splits_kernel[(n * num_heads,)](m, l, acc, out, D=d, SPLITS=splits, **launch)
    return out
