"""Triton kernels for the fast decode step; same signatures and semantics as `torch_ops.py`.

Elementwise rounding follows PyTorch's: math in fp32, result rounded to the activation dtype at
the points where the eager model produces a tensor, so bf16 results track the eager path.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..engine.rng import U_MAX
from ..engine.sampler import RowParams
from .torch_ops import check_token_outputs
from .triton_attention import (
    AttentionTiles,
    attention_splits,
    attention_tiles,
    norm_rope_heads,
    paged_attention,
)
from .triton_attention import qk_norm_rope_attention as fused_qk_norm_rope_attention
from .triton_launch import pdl_entry, pdl_launch, pdl_settings, pdl_trigger_first, trigger_first_for, use_pdl
from .triton_linear import (
    SKINNY_MAX_ROWS,
    SkinnyTiles,
    linear,
    linear_tiles,
    skinny_linear,
    skinny_linear_partials,
    skinny_tiles,
    swiglu_tiles,
)

# The ops module's interface (kernels.load_ops), with the launch choices the sweeps and tests use.
__all__ = [
    "AttentionTiles", "FUSED_ATTENTION_MAX_ROWS", "SKINNY_MAX_ROWS", "SkinnyTiles", "attention_splits",
    "attention_tiles", "embed_frame", "linear", "linear_rms_norm", "linear_swiglu", "paged_attention", "pdl_launch",
    "pdl_settings", "pdl_trigger_first", "qk_norm_rope_attention", "qk_norm_rope_store", "rms_norm", "rope_qk",
    "sample_tokens", "silu_mul", "skinny_linear", "skinny_tiles", "snake_beta", "swiglu_tiles", "trigger_first_for",
    "use_pdl",
]  # fmt: skip

# -- RMSNorm (+ residual) --------------------------------------------------------------------------


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, n_cols, part_stride, eps, HAS_RES: tl.constexpr,
                     PARTS: tl.constexpr, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):  # fmt: skip
    """PARTS > 0: x is a split-K GEMM's fp32 partials ([PARTS, rows, n_cols], `part_stride` apart),
    added in split order and rounded as the GEMM's own last program would: the same x, bit for bit."""
    pdl_entry(USE_PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if PARTS:
        total = tl.zeros([BLOCK], dtype=tl.float32)
        for s in tl.static_range(PARTS):
            total += tl.load(x_ptr + s * part_stride + row * n_cols + cols, mask=mask, other=0.0)
        x = total.to(out_ptr.dtype.element_ty)
    else:
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
    _launch_rms_norm(x2, 0, weight, eps, residual, out, total)
    return out.view(shape), total.view(shape)


# The norm that adds split-K partials runs 8 warps (a row's 16 KB of partials over twice the threads):
# b1 3.13 -> 2.89 ms back to back against 4 (perf-notes #77). Its sum of squares then adds in another
# order than the 4-warp kernel's, so its rounding may differ from the two-kernel path's in the last bit.
# 16 warps measured no gain in the walk (#78).
PARTS_NORM_WARPS = 8


def _launch_rms_norm(x, parts: int, weight, eps: float, residual, out: torch.Tensor, total: torch.Tensor) -> None:
    """out (and total, with a residual) for out's rows; x [rows, n] or, with parts, [parts, tile rows, n] fp32."""
    rows, n = out.shape
    res = residual.reshape(rows, n) if residual is not None else out
    _rms_norm_kernel[(rows,)](
        x, res, weight, out, total, n, x[0].numel() if parts else 0, eps, HAS_RES=residual is not None, PARTS=parts,
        BLOCK=triton.next_power_of_2(n), num_warps=PARTS_NORM_WARPS if parts else 4, **pdl_launch(out),
    )  # fmt: skip


# Split-K partials added by the norm kernel after the GEMM (perf-notes #74); CADENCE_SPLIT_K_IN_NORM=0: the
# GEMM's last program adds them (a ticket a slab), as before.
SPLIT_K_IN_NORM = os.environ.get("CADENCE_SPLIT_K_IN_NORM", "1") != "0"


def linear_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None,
    force: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm(linear(x, weight), norm_weight, eps, residual): a decoder layer's o or down
    projection and the norm after it. Where the GEMM splits K (o_proj and down_proj up to 64 rows),
    its programs only store their fp32 partials and the norm kernel adds them in split order, so
    the GEMM ends without a ticket and its last program's serial sum. The rows' sum (x + residual)
    is the same bits as the two kernels'; the normalised rows may differ in the last bit, as the
    norm's reduction runs over 8 warps there (PARTS_NORM_WARPS). Without a residual (every layer
    has one) the two kernels. force: the weight-streaming GEMM for fp32 too (tests; `linear` routes
    fp32 to cuBLAS)."""
    tiles = linear_tiles(x, weight, force)
    if tiles is None or tiles.split_k == 1 or not SPLIT_K_IN_NORM or residual is None:
        return rms_norm(linear(x, weight, force=force), norm_weight, eps, residual)
    parts = skinny_linear_partials(x, weight, tiles)
    out = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    total = torch.empty_like(out)
    _launch_rms_norm(parts, tiles.split_k, norm_weight, eps, residual, out, total)
    return out, total


# -- QK-norm + RoPE + KV write ---------------------------------------------------------------------


@triton.jit
def _qk_norm_rope_store_kernel(
    qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr, kc_ptr, vc_ptr, slot_ptr, q_out_ptr, eps,
    HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    pdl_entry(USE_PDL)
    n = tl.program_id(0)
    h = tl.program_id(1)  # 0..HQ+2*HKV-1: q heads, then k heads, then v heads
    d = tl.arange(0, D)
    row = qkv_ptr + n * (HQ + 2 * HKV) * D
    slot = tl.load(slot_ptr + n).to(tl.int64)
    if h >= HQ + HKV:  # values: stored as they are
        tl.store(vc_ptr + (slot * HKV + (h - HQ - HKV)) * D + d, tl.load(row + h * D + d))
    else:
        # The arithmetic of the fused decode attention's own QK-norm and RoPE (norm_rope_heads),
        # so that both paths round alike: one head here.
        pos = tl.load(pos_ptr + n).to(tl.int64)
        one = tl.arange(0, 1)
        if h < HQ:
            y = norm_rope_heads(row, h + one, one < 1, qn_ptr, cos_ptr, sin_ptr, pos, eps, D)  # [1, D]
            tl.store(q_out_ptr + (n * HQ + h) * D + d[None, :], y)
        else:
            y = norm_rope_heads(row, h + one, one < 1, kn_ptr, cos_ptr, sin_ptr, pos, eps, D)
            tl.store(kc_ptr + (slot * HKV + (h - HQ)) * D + d[None, :], y)


def qk_norm_rope_store(
    qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, num_heads, num_kv_heads
) -> torch.Tensor:
    n = qkv.shape[0]
    d = q_norm.shape[0]
    q = torch.empty(n, num_heads, d, dtype=qkv.dtype, device=qkv.device)
    _qk_norm_rope_store_kernel[(n, num_heads + 2 * num_kv_heads)](
        qkv, q_norm, k_norm, cos, sin, positions, k_cache, v_cache, slot_index, q, eps,
        HQ=num_heads, HKV=num_kv_heads, D=d, **pdl_launch(qkv),
    )  # fmt: skip
    return q


# Decode batches up to this many rows take the QK-norm, RoPE and cache write inside the attention
# kernel (#58); larger ones run qk_norm_rope_store then paged_attention. Measured on the H200
# (perf-notes #64): the fused kernel gains at 8 rows (walk 4.08 -> 3.70 ms with #59-#60) and is
# even at 64, but at 256 rows the walk was 0.15 ms slower with it (11.05 -> 11.21 ms), where every
# program's long context loop is bandwidth-bound and the fused prologue only adds to it.
FUSED_ATTENTION_MAX_ROWS = 64


def qk_norm_rope_attention(
    qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, block_table, context_lens, scale,
    num_heads: int, num_kv_heads: int, splits: int | None = None, tiles: AttentionTiles | None = None,
    max_context: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """Decode attention with the rows' QK-norm, RoPE and cache write (torch_ops has the definition):
    one fused kernel up to FUSED_ATTENTION_MAX_ROWS rows, the two kernels above."""
    norm_rope = (q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index)
    if qkv.shape[0] <= FUSED_ATTENTION_MAX_ROWS:
        return fused_qk_norm_rope_attention(
            qkv, *norm_rope, block_table, context_lens, scale, num_heads, num_kv_heads, splits, tiles, max_context
        )
    q = qk_norm_rope_store(qkv, *norm_rope, num_heads, num_kv_heads)
    return paged_attention(q, k_cache, v_cache, block_table, context_lens, scale, splits, tiles, max_context)


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


# -- SwiGLU ----------------------------------------------------------------------------------------


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, inter, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_entry(USE_PDL)
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
    _silu_mul_kernel[(rows, triton.cdiv(inter, block))](gate_up, out, inter, BLOCK=block, **pdl_launch(gate_up))
    return out


def linear_swiglu(x: torch.Tensor, gate_up: torch.Tensor) -> torch.Tensor:
    """silu(x @ gate^T) * (x @ up^T) for the concatenated [gate; up] weight: one weight-streaming
    kernel where `linear` would stream it (each program a gate slab and its up slab, as many
    weight rows as the unfused GEMM's tiles), else the GEMM then `silu_mul`. The fused kernel runs
    the same dots and rounds at the same points as the two (test_linear_swiglu compares the bits)."""
    m, k = x.shape
    tiles = swiglu_tiles(gate_up.shape[0], k, m)
    if tiles is None or x.dtype not in (torch.bfloat16, torch.float16):
        return silu_mul(linear(x, gate_up))
    return skinny_linear(x, gate_up, tiles, swiglu=True)


# -- a frame's embedding: 16 table rows summed, the text track added ------------------------------


@triton.jit
def _embed_frame_kernel(codes_ptr, off_ptr, table_ptr, plus_ptr, out_ptr, H, codes_stride, G: tl.constexpr,
                        BLOCK: tl.constexpr, HAS_PLUS: tl.constexpr, USE_PDL: tl.constexpr):  # fmt: skip
    pdl_entry(USE_PDL)
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < H
    acc = tl.zeros([BLOCK], tl.float32)
    for j in tl.static_range(G):  # in codebook order, in fp32, as the eager sum accumulates
        idx = (tl.load(codes_ptr + row * codes_stride + j) + tl.load(off_ptr + j)).to(tl.int64)
        acc += tl.load(table_ptr + idx * H + cols, mask=mask, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    x = acc.to(dtype)  # rounded once, then the text track added in the activation dtype
    if HAS_PLUS:
        x = (x.to(tl.float32) + tl.load(plus_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)).to(dtype)
    tl.store(out_ptr + row * H + cols, x, mask=mask)


def embed_frame(
    codes: torch.Tensor, table: torch.Tensor, offsets: torch.Tensor, plus: torch.Tensor | None = None
) -> torch.Tensor:
    b, g = codes.shape
    h = table.shape[1]
    out = torch.empty(b, h, dtype=table.dtype, device=table.device)
    block = 512
    _embed_frame_kernel[(b, triton.cdiv(h, block))](
        codes, offsets, table, out if plus is None else plus, out, h, codes.stride(0), G=g, BLOCK=block,
        HAS_PLUS=plus is not None, **pdl_launch(table),
    )  # fmt: skip
    return out


# -- sampling: processing + greedy / Gumbel-max in one kernel --------------------------------------

_U_MAX = tl.constexpr(U_MAX)  # the noise's uniforms stay below 1 (engine/rng.py)


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
    """fp32 -> int32 keys with the same order (IEEE bits, negatives flipped)."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


# The top-k threshold's search tests TOPK_WAYS - 1 thresholds a pass: each pass is a block
# reduction, each threshold a compare per key. Each threshold's count is a 16-bit field of one
# int64 sum, so at most 4 thresholds (5 ways; 2 is a bisection, 32 passes). On an H200 (perf-notes
# #68, benchmarks/sampler.py) 4 ways (16 passes) was fastest: 11.9 -> 9.7 us a call on 2048 codes,
# 15.4 -> 14.3 on 3072; 5 ways no faster than 2.
TOPK_WAYS = 4
# One program a row; the benchmark (benchmarks/sampler.py) sweeps this with TOPK_WAYS. In the walk
# (perf-notes #78) 8 and 16 warps were no faster: the search's passes wait on their reductions.
SAMPLE_WARPS = 4


def topk_search_passes(ways: int) -> int:
    """Passes that narrow the 32-bit key range to one key: each leaves at most ceil(width / ways)."""
    if not 2 <= ways <= 5:
        raise ValueError(f"the top-k search takes 2 to 5 ways (a 16-bit count per threshold), got {ways}")
    width, passes = 2**32, 0
    while width > 1:
        width, passes = -(-width // ways), passes + 1
    return passes


def topk_search(block: int) -> tuple[int, int]:
    """(ways, passes) of the top-k threshold's search over `block` keys, for every kernel that
    samples: TOPK_WAYS while a packed 16-bit count holds the block's keys (< 2^16), else 2 (a
    bisection: one count a pass, nothing packed)."""
    ways = TOPK_WAYS if block < 2**16 else 2
    return ways, topk_search_passes(ways)


@triton.jit
def _kth_largest_key(key, k, WAYS: tl.constexpr, PASSES: tl.constexpr):
    """The k-th largest of the int32 keys [BLOCK], ties counted (1 <= k <= BLOCK; BLOCK < 2^16 unless
    WAYS is 2, whose one count is not packed): a WAYS-ary search over the key range keeping
    count(key >= lo) >= k > count(key >= hi). Each pass counts the keys at or above the WAYS - 1
    thresholds inside (lo, hi) in one reduction (the counts packed as 16-bit fields of an int64),
    then keeps the interval between the last threshold that still counts k keys and the next."""
    lo = tl.full((), -(2**31), tl.int64)
    hi = tl.full((), 2**31, tl.int64)
    for _ in range(PASSES):
        width = hi - lo
        packed = tl.zeros_like(key).to(tl.int64)
        for j in tl.static_range(1, WAYS):  # t_j = lo + width * j // WAYS < hi: fits int32
            t = (lo + (width * j) // WAYS).to(tl.int32)
            packed += (key >= t).to(tl.int64) << (16 * (j - 1))
        counts = tl.sum(packed, axis=0)
        kept = tl.zeros((), tl.int64)  # thresholds still counting k keys: a prefix of j
        for j in tl.static_range(1, WAYS):
            count = counts >> (16 * (j - 1))
            if j < WAYS - 1:  # the last field has nothing above it: unmasked, it holds any count
                count = count & 0xFFFF
            kept += (count >= k).to(tl.int64)
        lo, hi = lo + (width * kept) // WAYS, lo + (width * (kept + 1)) // WAYS
    return lo.to(tl.int32)


@triton.jit
def _sample_choice(x, col, valid, row, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr, codebook_key, V,
                   TOPK_WAYS: tl.constexpr, TOPK_PASSES: tl.constexpr):  # fmt: skip
    """Row `row`'s token from its processed logits x [BLOCK] (fp32, -inf where invalid): the argmax,
    or with do_sample the Gumbel-max over the temperature-scaled, top-k / top-p filtered values
    with counter-based noise of (seed, frame, codebook key, column). Shared with the persistent
    code predictor, so both sample with the same arithmetic."""
    do = tl.load(do_ptr + row) != 0
    if do:
        # Temperature, then top-k and top-p as value thresholds found by searching the
        # order-preserving integer keys (a few reductions instead of sorting the vocabulary).
        y = x / tl.load(temp_ptr + row)
        k = tl.load(topk_ptr + row)
        if (k > 0) & (k < V):
            key = _sortable(y)
            kth = _kth_largest_key(key, k, TOPK_WAYS, TOPK_PASSES)
            y = tl.where(key >= kth, y, -float("inf"))  # ties at the k-th value kept, as HF
        top_p = tl.load(topp_ptr + row)
        if top_p < 1.0:
            key = _sortable(y).to(tl.int64)
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
        u = tl.minimum(((h >> 8).to(tl.float32) + 0.5) / 16777216.0, _U_MAX)  # rng.uniform's clamp
        noisy = tl.where(valid, y - tl.log(-tl.log(u)), -float("inf"))
        choice = tl.argmax(noisy, axis=0)
    else:
        choice = tl.argmax(x, axis=0)
    return choice


@triton.jit
def _sample_kernel(
    logits_ptr, seen_ptr, pen_ptr, ban_ptr, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr, out_ptr,
    table_ptr, emb_ptr, V, eos_id, suppress_start, codebook_key, out_stride, emb_stride, H,
    HAS_SEEN: tl.constexpr, HAS_BAN: tl.constexpr, HAS_EMBED: tl.constexpr, BLOCK: tl.constexpr,
    BLOCK_H: tl.constexpr, TOPK_WAYS: tl.constexpr, TOPK_PASSES: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    pdl_entry(USE_PDL)
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
    choice = _sample_choice(x, col, valid, row, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr,
                            codebook_key, V, TOPK_WAYS, TOPK_PASSES)  # fmt: skip
    tl.store(out_ptr + row * out_stride, choice.to(tl.int64))
    if HAS_EMBED:  # the token's embedding row: the next step's input, without a lookup kernel
        for h0 in range(0, H, BLOCK_H):
            hc = h0 + tl.arange(0, BLOCK_H)
            e = tl.load(table_ptr + choice.to(tl.int64) * H + hc, mask=hc < H)
            tl.store(emb_ptr + row * emb_stride + hc, e, mask=hc < H)


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
    out: torch.Tensor | None = None,
    embed_table: torch.Tensor | None = None,
    embed_out: torch.Tensor | None = None,
) -> torch.Tensor:
    n, v = logits.shape
    out = check_token_outputs(n, logits.device, out, embed_table, embed_out)
    dummy = logits
    h = embed_table.shape[1] if embed_table is not None else 0
    block = triton.next_power_of_2(v)
    ways, passes = topk_search(block)
    _sample_kernel[(n,)](
        logits, seen if seen is not None else dummy, penalty if penalty is not None else dummy,
        ban_eos if ban_eos is not None else dummy, params.do_sample, params.temperature, params.top_k,
        params.top_p, seed, frame, out, embed_table if h else dummy, embed_out if h else dummy, v, eos_id,
        suppress_start, (codebook * 0x1E3779B9) & 0xFFFFFFFF, out.stride(0), embed_out.stride(0) if h else 0, h,
        HAS_SEEN=seen is not None, HAS_BAN=ban_eos is not None, HAS_EMBED=h > 0, BLOCK=block,
        BLOCK_H=min(1024, triton.next_power_of_2(max(h, 1))), TOPK_WAYS=ways, TOPK_PASSES=passes,
        num_warps=SAMPLE_WARPS, **pdl_launch(logits),
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
