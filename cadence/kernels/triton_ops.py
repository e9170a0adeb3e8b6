"""Triton kernels for the fast decode step; same signatures and semantics as `torch_ops.py`.

Elementwise rounding follows PyTorch's: math in fp32, result rounded to the activation dtype at
the points where the eager model produces a tensor, so bf16 results track the eager path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..engine.sampler import RowParams

# -- small-batch linear layers ---------------------------------------------------------------------


@triton.jit
def _skinny_linear_kernel(x_ptr, w_ptr, out_ptr, part_ptr, count_ptr, M, N, K: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                          K_PER_SPLIT: tl.constexpr):  # fmt: skip
    """out[M, N] = x[M, K] @ w[N, K]^T for a handful of rows: decode is a weight-streaming problem,
    so each program reads one BLOCK_N-row slab of the weight (or, split over K, 1/SPLIT_K of it)
    once, with wide loads.

    Split over K, each program stores its fp32 partial and takes a ticket from the slab's counter;
    the last to arrive adds the partials in split order (deterministic, whatever order the programs
    ran in), stores the result and resets the counter to 0 for the next call or graph replay."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for i in range(0, K_PER_SPLIT, BLOCK_K):  # a compile-time trip count: a pipelined loop
        kk = split * K_PER_SPLIT + i + rk
        x = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
        acc += tl.dot(x, tl.trans(w))
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT_K == 1:
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        parts = part_ptr + rm[:, None] * N + rn[None, :]  # partials laid out [SPLIT_K, BLOCK_M, N]
        tl.store(parts + split * BLOCK_M * N, acc, mask=out_mask)
        tl.debug_barrier()  # every thread's partial written before the ticket releases them
        ticket = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel")
        if ticket == SPLIT_K - 1:
            total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for s in range(SPLIT_K):  # .cg: read through L2, where the other programs' stores are
                total += tl.load(parts + s * BLOCK_M * N, mask=out_mask, other=0.0, cache_modifier=".cg")
            tl.store(out_ptr + rm[:, None] * N + rn[None, :], total.to(out_ptr.dtype.element_ty), mask=out_mask)
            tl.atomic_xchg(count_ptr + pid, 0)


SKINNY_MAX_ROWS = 16


@dataclass(frozen=True)
class SkinnyTiles:
    """Launch choices of the weight-streaming GEMM: weight rows per program, K per loop step,
    warps, pipeline stages, how many programs share one slab's K (split-K), and the activation
    rows one program holds (the most rows a call may have; `linear` routes up to 16 here)."""

    block_n: int = 32
    block_k: int = 256
    warps: int = 4
    stages: int = 3
    split_k: int = 1
    block_m: int = SKINNY_MAX_ROWS


def skinny_tiles(n: int, k: int) -> SkinnyTiles:
    """Tiles of the weight-streaming GEMM for an [n, k] weight, from the sweeps of
    benchmarks/skinny_linear.py on the H200 (perf-notes #20, #21), chosen for 1 and 16 rows alike:
    the narrow, long projections (o_proj 1024x2048, down 1024x3072: 32 slabs of 32 rows) split
    their K over 4 programs to fill the SMs; the 6144-wide gate/up streams 64-row slabs; the rest
    32-row slabs in 256-wide K steps."""
    if n <= 1024 and k >= 2048:
        return SkinnyTiles(block_n=32, block_k=256, split_k=4)
    return SkinnyTiles(block_n=64 if n >= 6144 else 32, block_k=256)


_split_k_buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _split_k_workspace(device: torch.device, n: int, tiles: SkinnyTiles) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partials and per-slab tickets for split-K, one pair per (device, N, tiles), kept for
    the process: a CUDA graph captures their addresses, and the counters reset themselves. Calls on
    one stream (the decode walk) run one after another, so one pair per shape is enough."""
    key = (device, n, tiles)
    if key not in _split_k_buffers:
        parts = torch.empty(tiles.split_k * tiles.block_m * n, dtype=torch.float32, device=device)
        counters = torch.zeros(triton.cdiv(n, tiles.block_n), dtype=torch.int32, device=device)
        _split_k_buffers[key] = (parts, counters)
    return _split_k_buffers[key]


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, tiles: SkinnyTiles, out: torch.Tensor | None = None):
    """The weight-streaming kernel with the given tiles (the sweep calls this directly)."""
    (m, k), n = x.shape, weight.shape[0]
    if m > tiles.block_m:
        raise ValueError(f"these tiles hold at most {tiles.block_m} rows (SkinnyTiles.block_m), got {m}")
    if out is None:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    parts = counters = out  # unused placeholders when the K loop is not split
    if tiles.split_k > 1:
        parts, counters = _split_k_workspace(x.device, n, tiles)
    _skinny_linear_kernel[(triton.cdiv(n, tiles.block_n), tiles.split_k)](
        x, weight, out, parts, counters, m, n, k, BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k, SPLIT_K=tiles.split_k,
        K_PER_SPLIT=triton.cdiv(triton.cdiv(k, tiles.block_k), tiles.split_k) * tiles.block_k,
        num_warps=tiles.warps, num_stages=tiles.stages,
    )  # fmt: skip
    return out


def linear(x: torch.Tensor, weight: torch.Tensor, force: bool = False) -> torch.Tensor:
    """x @ weight^T; up to 16 rows of bf16/fp16 through the weight-streaming kernel, the rest (and
    fp32, which tensor cores would round to TF32) through cuBLAS."""
    m, k = x.shape
    if not force and (m > SKINNY_MAX_ROWS or x.dtype not in (torch.bfloat16, torch.float16)):
        return torch.nn.functional.linear(x, weight)
    return skinny_linear(x, weight, skinny_tiles(weight.shape[0], k))


# -- RMSNorm (+ residual) --------------------------------------------------------------------------


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, n_cols, eps, HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    if HAS_RES:
        x = (x.to(tl.float32) + tl.load(res_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(sum_ptr + row * n_cols + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=0) / n_cols + eps)
    normed = (x32 * inv).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (w * normed).to(x.dtype), mask=mask)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    out = torch.empty_like(x2)
    total = torch.empty_like(x2) if residual is not None else x2
    res = residual.reshape(-1, shape[-1]) if residual is not None else x2
    _rms_norm_kernel[(x2.shape[0],)](
        x2, res, weight, out, total, shape[-1], eps, HAS_RES=residual is not None,
        BLOCK=triton.next_power_of_2(shape[-1]),
    )  # fmt: skip
    return out.view(shape), total.view(shape)


# -- QK-norm + RoPE + KV write ---------------------------------------------------------------------


@triton.jit
def _qk_norm_rope_store_kernel(
    qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr, kc_ptr, vc_ptr, slot_ptr, q_out_ptr, eps,
    HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
):  # fmt: skip
    n = tl.program_id(0)
    h = tl.program_id(1)  # 0..HQ+2*HKV-1: q heads, then k heads, then v heads
    half: tl.constexpr = D // 2
    d = tl.arange(0, D)
    x = tl.load(qkv_ptr + (n * (HQ + 2 * HKV) + h) * D + d)
    slot = tl.load(slot_ptr + n).to(tl.int64)
    if h >= HQ + HKV:  # values: stored as they are
        tl.store(vc_ptr + (slot * HKV + (h - HQ - HKV)) * D + d, x)
    else:
        x32 = x.to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=0) / D + eps)
        if h < HQ:
            w = tl.load(qn_ptr + d).to(tl.float32)
        else:
            w = tl.load(kn_ptr + d).to(tl.float32)
        normed = (w * (x32 * inv).to(x.dtype).to(tl.float32)).to(x.dtype)
        # rotate_half needs the partner element: re-derive it from the loaded vector by index.
        partner_idx = tl.where(d < half, d + half, d - half)
        xp = tl.load(qkv_ptr + (n * (HQ + 2 * HKV) + h) * D + partner_idx).to(tl.float32)
        xp_inv = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=0) / D + eps)
        if h < HQ:
            wp = tl.load(qn_ptr + partner_idx).to(tl.float32)
        else:
            wp = tl.load(kn_ptr + partner_idx).to(tl.float32)
        partner = (wp * (xp * xp_inv).to(x.dtype).to(tl.float32)).to(x.dtype).to(tl.float32)
        rotated = tl.where(d < half, -partner, partner)
        pos = tl.load(pos_ptr + n).to(tl.int64)
        c = tl.load(cos_ptr + pos * D + d).to(tl.float32)
        s = tl.load(sin_ptr + pos * D + d).to(tl.float32)
        a = (normed.to(tl.float32) * c).to(x.dtype).to(tl.float32)
        b = (rotated.to(x.dtype).to(tl.float32) * s).to(x.dtype).to(tl.float32)
        y = (a + b).to(x.dtype)
        if h < HQ:
            tl.store(q_out_ptr + (n * HQ + h) * D + d, y)
        else:
            tl.store(kc_ptr + (slot * HKV + (h - HQ)) * D + d, y)


def qk_norm_rope_store(
    qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, num_heads, num_kv_heads
) -> torch.Tensor:
    n = qkv.shape[0]
    d = q_norm.shape[0]
    q = torch.empty(n, num_heads, d, dtype=qkv.dtype, device=qkv.device)
    _qk_norm_rope_store_kernel[(n, num_heads + 2 * num_kv_heads)](
        qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, slot_index, q, eps,
        HQ=num_heads, HKV=num_kv_heads, D=d,
    )  # fmt: skip
    return q


# -- RoPE on q and k (the codec's transformer) -------------------------------------------------------


@triton.jit
def _rope_qk_kernel(qkv_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr):
    n = tl.program_id(0)
    h = tl.program_id(1)  # 0..HQ+HKV-1: q heads, then k heads
    half: tl.constexpr = D // 2
    d = tl.arange(0, D)
    src = qkv_ptr + (n * (HQ + 2 * HKV) + h) * D
    x = tl.load(src + d).to(tl.float32)
    partner = tl.load(src + tl.where(d < half, d + half, d - half)).to(tl.float32)
    rotated = tl.where(d < half, -partner, partner)
    c = tl.load(cos_ptr + n * D + d).to(tl.float32)
    s = tl.load(sin_ptr + n * D + d).to(tl.float32)
    y = x * c + rotated * s
    if h < HQ:
        tl.store(q_ptr + (n * HQ + h) * D + d, y.to(q_ptr.dtype.element_ty))
    else:
        tl.store(k_ptr + (n * HKV + h - HQ) * D + d, y.to(k_ptr.dtype.element_ty))


def rope_qk(qkv, cos, sin, num_heads: int, num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    n, d = qkv.shape[0], cos.shape[-1]
    q = torch.empty(n, num_heads, d, dtype=qkv.dtype, device=qkv.device)
    k = torch.empty(n, num_kv_heads, d, dtype=qkv.dtype, device=qkv.device)
    _rope_qk_kernel[(n, num_heads + num_kv_heads)](
        qkv.contiguous(), cos.contiguous(), sin.contiguous(), q, k, HQ=num_heads, HKV=num_kv_heads, D=d
    )
    return q, k


# -- paged decode attention (split over the context, then merged) ----------------------------------


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
def _paged_attention_kernel(
    q_ptr, kc_ptr, vc_ptr, bt_ptr, ctx_ptr, m_ptr, l_ptr, acc_ptr, o_ptr, scale, bt_stride,
    HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, PS: tl.constexpr, G: tl.constexpr,
    G_PAD: tl.constexpr, BT: tl.constexpr, SPLITS: tl.constexpr, IEEE: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    """One program per (query row, kv head, split): the split's share of the row's own context
    (so short and long contexts both spread over all splits), online softmax over blocks of BT
    tokens gathered from several pages at once, so each iteration has a block's loads in flight
    rather than one page's. With PREFETCH the next block's loads are issued before the current one
    is scored (a hand-written double buffer: Triton does not pipeline a loop of runtime length).
    The G query heads sharing the kv head are padded to the 16 rows a tensor-core dot needs (free:
    the kernel is bound by reading K and V). With one split the result is final and stored
    directly; otherwise the partial (max, sum, acc) go to the merge."""
    n = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, D)
    t = tl.arange(0, BT)
    heads = n * HQ + kvh * G + g  # query heads of this kv head (rows >= G are padding)
    q = tl.load(q_ptr + heads[:, None] * D + d[None, :], mask=g[:, None] < G, other=0.0)  # [G_PAD, D]
    ctx = tl.load(ctx_ptr + n)
    pages = (ctx + PS - 1) // PS
    per_split = (pages + SPLITS - 1) // SPLITS
    start = split * per_split * PS
    end = tl.minimum((split + 1) * per_split * PS, ctx)
    m_i = tl.full([G_PAD], -float("inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    tok0 = start
    if PREFETCH:
        k_next, v_next, valid_next = _load_block(kc_ptr, vc_ptr, bt_ptr, n, kvh, tok0, end, bt_stride, t, d, HKV, D, PS)
        while tok0 < end:  # a while loop: runtime bounds (and Triton's CPU interpreter accepts it)
            k, v, valid = k_next, v_next, valid_next
            k_next, v_next, valid_next = _load_block(
                kc_ptr, vc_ptr, bt_ptr, n, kvh, tok0 + BT, end, bt_stride, t, d, HKV, D, PS
            )
            m_i, l_i, acc = _attend_block(q, k, v, valid, m_i, l_i, acc, scale, IEEE)
            tok0 += BT
    else:
        while tok0 < end:
            k, v, valid = _load_block(kc_ptr, vc_ptr, bt_ptr, n, kvh, tok0, end, bt_stride, t, d, HKV, D, PS)
            m_i, l_i, acc = _attend_block(q, k, v, valid, m_i, l_i, acc, scale, IEEE)
            tok0 += BT
    if SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(o_ptr + heads[:, None] * D + d[None, :], out.to(o_ptr.dtype.element_ty), mask=g[:, None] < G)
    else:
        part = heads * SPLITS + split
        tl.store(m_ptr + part, m_i, mask=g < G)
        tl.store(l_ptr + part, l_i, mask=g < G)
        tl.store(acc_ptr + part[:, None] * D + d[None, :], acc, mask=g[:, None] < G)


@triton.jit
def _merge_splits_kernel(m_ptr, l_ptr, acc_ptr, o_ptr, D: tl.constexpr, SPLITS: tl.constexpr):
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


def attention_splits(rows: int, kv_heads: int, target_programs: int = 256) -> int:
    """Splits per (row, kv head) so that a decode batch fills the GPU's 132 SMs about twice (the
    sweep of benchmarks/paged_attention.py, perf-notes #23: batch 8 best at 4 splits, 1 at 16)."""
    splits = 1
    while splits < 16 and rows * kv_heads * splits < target_programs:
        splits *= 2
    return splits


@dataclass(frozen=True)
class AttentionTiles:
    """Launch choices of the paged attention kernel: context tokens per iteration (64: 32 KB of K
    and V in flight per program in bf16), warps, and whether the next block is prefetched."""

    block_tokens: int = 64
    warps: int = 4
    prefetch: bool = False


def attention_tiles(rows: int, max_context: int | None = None) -> AttentionTiles:
    """The tiles for a decode batch of `rows` query rows, from the sweep of
    benchmarks/paged_attention.py on the H200 (perf-notes #23): from 8 rows up, 128-token blocks
    (fewer, longer iterations: 3.4 -> 3.6 TB/s at 256 rows, 2.5 -> 3.3 at 64); below, where the
    context is split 16 ways and each split is short, 64. The prefetch never won. Contexts known
    to be short (the code predictor's <= 17 tokens: `max_context`) take 32-token blocks: a longer
    block only adds masked work and registers (with 128-token ones there the batch-256 walk took
    12.57 ms, with 32-token ones 11.20: perf-notes #24, #25)."""
    if max_context is not None and max_context <= 32:
        return AttentionTiles(block_tokens=32)
    return AttentionTiles(block_tokens=128 if rows >= 8 else 64)


def paged_attention(
    q, k_cache, v_cache, block_table, context_lens, scale, splits: int | None = None,
    tiles: AttentionTiles | None = None, max_context: int | None = None,
):  # fmt: skip
    n, hq, d = q.shape
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
    _paged_attention_kernel[(n, hkv, splits)](
        q, k_cache, v_cache, block_table, context_lens, m, l, acc, out, scale, block_table.stride(0),
        HQ=hq, HKV=hkv, D=d, PS=ps, G=g, G_PAD=max(16, triton.next_power_of_2(g)),
        BT=max(tiles.block_tokens, ps), SPLITS=splits, IEEE=k_cache.dtype == torch.float32,
        PREFETCH=tiles.prefetch, num_warps=tiles.warps,
    )  # fmt: skip
    if splits > 1:
        _merge_splits_kernel[(n * hq,)](m, l, acc, out, D=d, SPLITS=splits)
    return out


# -- SwiGLU ----------------------------------------------------------------------------------------


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    g = tl.load(gu_ptr + row * 2 * inter + cols, mask=mask, other=0.0)
    u = tl.load(gu_ptr + row * 2 * inter + inter + cols, mask=mask, other=0.0)
    g32 = g.to(tl.float32)
    silu = (g32 / (1.0 + tl.exp(-g32))).to(g.dtype).to(tl.float32)
    tl.store(out_ptr + row * inter + cols, (silu * u.to(tl.float32)).to(g.dtype), mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    rows, inter = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty(rows, inter, dtype=gate_up.dtype, device=gate_up.device)
    block = 1024
    _silu_mul_kernel[(rows, triton.cdiv(inter, block))](gate_up, out, inter, BLOCK=block)
    return out


# -- sampling: processing + greedy / Gumbel-max in one kernel --------------------------------------


@triton.jit
def _mix32(x):
    # uint32 lanes: multiplication wraps mod 2^32 and shifts are logical, which is exactly what
    # rng.py computes with masked int64 arithmetic.
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x2C1B3C6D
    x = x ^ (x >> 16)
    return x


@triton.jit
def _sortable(x):
    """fp32 -> int64 keys with the same order (IEEE bits, negatives flipped)."""
    bits = x.to(tl.int32, bitcast=True).to(tl.int64)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


@triton.jit
def _sample_kernel(
    logits_ptr, seen_ptr, pen_ptr, ban_ptr, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr, out_ptr,
    V, eos_id, suppress_start, codebook_key,
    HAS_SEEN: tl.constexpr, HAS_BAN: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    valid = col < V
    x = tl.load(logits_ptr + row * V + col, mask=valid, other=-float("inf")).to(tl.float32)
    if HAS_SEEN:
        seen = tl.load(seen_ptr + row * V + col, mask=valid, other=0) != 0
        p = tl.load(pen_ptr + row)
        x = tl.where(seen, tl.where(x < 0, x * p, x / p), x)
    if HAS_BAN:
        ban = tl.load(ban_ptr + row) != 0
        banned = ((col >= suppress_start) & (col != eos_id)) | ((col == eos_id) & ban)
        x = tl.where(banned, -float("inf"), x)
    choice = tl.argmax(x, axis=0)
    do = tl.load(do_ptr + row) != 0
    if do:
        # Temperature, then top-k and top-p as value thresholds found by bisection over the
        # order-preserving integer keys (32 reductions instead of sorting the vocabulary).
        y = x / tl.load(temp_ptr + row)
        key = _sortable(y)
        k = tl.load(topk_ptr + row)
        if (k > 0) & (k < V):
            lo = tl.min(key, axis=0)  # count(key >= lo) = V >= k
            hi = tl.max(key, axis=0) + 1  # count(key >= hi) = 0 < k
            for _ in range(33):
                mid = lo + (hi - lo) // 2
                ok = tl.sum((key >= mid).to(tl.int32), axis=0) >= k
                lo = tl.where(ok, mid, lo)
                hi = tl.where(ok, hi, mid)
            y = tl.where(key >= lo, y, -float("inf"))  # ties at the k-th value kept, as HF
            key = _sortable(y)
        top_p = tl.load(topp_ptr + row)
        if top_p < 1.0:
            probs = tl.exp(y - tl.max(y, axis=0))
            probs = probs / tl.sum(probs, axis=0)
            # keep values v with mass(key <= v) > 1 - top_p: find the smallest such key
            lo = tl.min(key, axis=0) - 1  # mass(<= lo) = 0
            hi = tl.max(key, axis=0)  # mass(<= hi) = 1
            for _ in range(33):
                mid = lo + (hi - lo) // 2
                ok = tl.sum(tl.where(key <= mid, probs, 0.0), axis=0) > 1.0 - top_p
                hi = tl.where(ok, mid, hi)
                lo = tl.where(ok, lo, mid)
            y = tl.where(key >= hi, y, -float("inf"))
        seed = tl.load(seed_ptr + row).to(tl.uint64)
        frame = tl.load(frame_ptr + row).to(tl.uint64)
        hkey = _mix32(seed.to(tl.uint32) ^ 0x1E3779B9)
        hkey = _mix32(hkey ^ (seed >> 32).to(tl.uint32))
        hkey = _mix32(hkey ^ frame.to(tl.uint32))
        hkey = _mix32(hkey ^ codebook_key.to(tl.uint32))
        h = _mix32(hkey ^ (col.to(tl.uint32) * 0x1E3779B9 + 0x5BD1E995))
        h = _mix32(h ^ hkey)
        u = ((h >> 8).to(tl.float32) + 0.5) / 16777216.0
        noisy = tl.where(valid, y - tl.log(-tl.log(u)), -float("inf"))
        choice = tl.argmax(noisy, axis=0)
    tl.store(out_ptr + row, choice.to(tl.int64))


def sample_tokens(
    logits: torch.Tensor,
    params: RowParams,
    seed: torch.Tensor,
    frame: torch.Tensor,
    codebook: int,
    seen: torch.Tensor | None = None,
    penalty: torch.Tensor | None = None,
    ban_eos: torch.Tensor | None = None,
    eos_id: int = -1,
    suppress_start: int = -1,
) -> torch.Tensor:
    n, v = logits.shape
    out = torch.empty(n, dtype=torch.long, device=logits.device)
    dummy = logits
    _sample_kernel[(n,)](
        logits, seen if seen is not None else dummy, penalty if penalty is not None else dummy,
        ban_eos if ban_eos is not None else dummy, params.do_sample, params.temperature, params.top_k,
        params.top_p, seed, frame, out, v, eos_id, suppress_start, (codebook * 0x1E3779B9) & 0xFFFFFFFF,
        HAS_SEEN=seen is not None, HAS_BAN=ban_eos is not None, BLOCK=triton.next_power_of_2(v),
    )  # fmt: skip
    return out


# -- SnakeBeta (the codec's activation) -------------------------------------------------------------


@triton.jit
def _snake_beta_kernel(x_ptr, bias_ptr, res_ptr, la_ptr, lb_ptr, out_ptr, sum_ptr, channels, length,
                       xs_b, xs_c, xs_t, rs_b, rs_c, rs_t, ss_b, ss_c, ss_t, os_b, os_c, os_t,
                       HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, STORE_SUM: tl.constexpr,
                       BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):  # fmt: skip
    """One read and one write of the activation (plus the residual's read and the sum's write when
    fused) instead of the unfused passes: bias add, residual add, and five for SnakeBeta.

    A [BLOCK_T, BLOCK_C] tile of a [B, C, T] tensor of any strides: Triton specialises unit
    strides, so loads coalesce along time (channel-major tensors) or channels (time-major ones)."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)[:, None]
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    b = tl.program_id(2).to(tl.int64)
    has_c = c < channels
    mask = (t < length) & has_c
    alpha = tl.exp(tl.load(la_ptr + c, mask=has_c, other=0.0).to(tl.float32))
    inv_beta = 1.0 / (tl.exp(tl.load(lb_ptr + c, mask=has_c, other=0.0).to(tl.float32)) + 1e-9)
    x = tl.load(x_ptr + b * xs_b + c * xs_c + t * xs_t, mask=mask, other=0.0)
    s = x
    if HAS_BIAS:  # rounded as the unfused `conv + bias`
        s = (s.to(tl.float32) + tl.load(bias_ptr + c, mask=has_c, other=0.0).to(tl.float32)).to(x.dtype)
    if HAS_RES:  # then `residual + that`
        r = tl.load(res_ptr + b * rs_b + c * rs_c + t * rs_t, mask=mask, other=0.0)
        s = (r.to(tl.float32) + s.to(tl.float32)).to(x.dtype)
    if STORE_SUM:
        tl.store(sum_ptr + b * ss_b + c * ss_c + t * ss_t, s, mask=mask)
    s32 = s.to(tl.float32)
    sn = tl.sin(s32 * alpha)  # the accurate sine on NVIDIA (libdevice's fast_sinf is the approximate one)
    act = s32 + inv_beta * (sn * sn)
    tl.store(out_ptr + b * os_b + c * os_c + t * os_t, act.to(out_ptr.dtype.element_ty), mask=mask)


def snake_beta(
    x: torch.Tensor,
    log_alpha: torch.Tensor,
    log_beta: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    sum_out: torch.Tensor | None = None,
) -> torch.Tensor:
    batch, channels, length = x.shape
    if out is None:
        out = torch.empty_like(x)
    for name, t in (("out", out), ("residual", residual), ("sum_out", sum_out)):
        if t is not None and t.shape != x.shape:
            raise ValueError(f"{name} must have x's shape {list(x.shape)}, got {list(t.shape)}")
    if sum_out is not None and sum_out.dtype != x.dtype:
        raise ValueError("sum_out must have x's dtype")
    res = residual if residual is not None else x
    total = sum_out if sum_out is not None else x
    block_t, block_c = (16, 64) if x.stride(1) == 1 else (128, 8)  # the tile's long side along the unit stride
    grid = (triton.cdiv(length, block_t), triton.cdiv(channels, block_c), batch)
    _snake_beta_kernel[grid](
        x, bias if bias is not None else x, res, log_alpha, log_beta, out, total, channels, length,
        *x.stride(), *res.stride(), *total.stride(), *out.stride(),
        HAS_BIAS=bias is not None, HAS_RES=residual is not None, STORE_SUM=sum_out is not None,
        BLOCK_T=block_t, BLOCK_C=block_c,
    )  # fmt: skip
    return out
