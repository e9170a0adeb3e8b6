"""Triton kernels of the codec's decoder (reference.py has their definitions): RoPE on its
transformer's q and k, and SnakeBeta, its activation, with the adds around it fused."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

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
