"""QK-norm, RoPE and the cache write of a layer's new tokens (Triton): the rows' query heads
normalised and rotated, their keys normalised, rotated and written with their values to the cache
(reference.qk_norm_rope_store). The fused decode attention (triton_paged_attention.py) runs the same
arithmetic on its rows (norm_rope_heads), so that both paths round alike."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..launch.pdl import pdl_launch
from ..launch.triton_pdl import pdl_entry


@triton.jit
def norm_rope_heads(src_ptr, heads, hmask, w_ptr, cos_ptr, sin_ptr, pos, eps, D: tl.constexpr):
    """QK-norm then RoPE of the heads `heads` [NH] of one qkv row at position `pos`, rounded as
    qk_norm_rope_store rounds: [NH, D] in the row's dtype."""
    half: tl.constexpr = D // 2
    d = tl.arange(0, D)
    m = hmask[:, None]
    x = tl.load(src_ptr + heads[:, None] * D + d[None, :], mask=m, other=0.0, cache_modifier=".cg")
    dtype = x.dtype
    x32 = x.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=1) / D + eps)
    w = tl.load(w_ptr + d).to(tl.float32)
    normed = (w[None, :] * (x32 * inv[:, None]).to(dtype).to(tl.float32)).to(dtype)
    pd = tl.where(d < half, d + half, d - half)
    xp = tl.load(src_ptr + heads[:, None] * D + pd[None, :], mask=m, other=0.0, cache_modifier=".cg").to(tl.float32)
    wp = tl.load(w_ptr + pd).to(tl.float32)
    partner = (wp[None, :] * (xp * inv[:, None]).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    rotated = tl.where(d[None, :] < half, -partner, partner)
    c = tl.load(cos_ptr + pos * D + d).to(tl.float32)
    s = tl.load(sin_ptr + pos * D + d).to(tl.float32)
    a = (normed.to(tl.float32) * c[None, :]).to(dtype).to(tl.float32)
    b = (rotated.to(dtype).to(tl.float32) * s[None, :]).to(dtype).to(tl.float32)
    return (a + b).to(dtype)


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
