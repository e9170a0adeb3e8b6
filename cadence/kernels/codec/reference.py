"""The codec kernels' PyTorch definitions (and the CPU path)."""

from __future__ import annotations

import torch

from ..attention.reference import rope


def rope_qk(
    qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int, num_kv_heads: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE (rotate-half) on the q and k heads of qkv [N, (Hq+2Hkv)*D] at per-row cos/sin [N, D]:
    math in fp32, rounded to qkv's dtype once (as the codec's attention rotates). Returns new
    tensors q [N, Hq, D] and k [N, Hkv, D]; v is `qkv`'s last Hkv heads, untouched."""
    n, d = qkv.shape[0], cos.shape[-1]
    q, k, _ = qkv.view(n, num_heads + 2 * num_kv_heads, d).split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    c, s = cos.float()[:, None, :], sin.float()[:, None, :]
    return rope(q.float(), c, s).to(qkv.dtype), rope(k.float(), c, s).to(qkv.dtype)


def snake_beta(
    x: torch.Tensor,
    log_alpha: torch.Tensor,
    log_beta: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    sum_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """SnakeBeta on [B, C, T]: s + sin²(s·e^α) / (e^β + 1e-9) per channel, in fp32, rounded to
    `out`'s dtype (x's by default) -- codec.SnakeBeta's definition.

    The streaming codec folds the adds before an activation into the same pass: s = x, plus the
    producing conv's `bias` per channel, plus a `residual` ([B, C, T], added last), each add rounded
    to x's dtype as the unfused `conv + bias` then `residual + conv` round. `sum_out` receives s
    (the residual stream), `out` the activation (a view into a conv's history window, say).
    """
    s = x
    if bias is not None:
        s = s + bias.to(x.dtype)[None, :, None]
    if residual is not None:
        s = residual + s
    if sum_out is not None:
        sum_out.copy_(s)
    alpha = torch.exp(log_alpha.float())[None, :, None]
    beta = torch.exp(log_beta.float())[None, :, None]
    s32 = s.float()
    act = s32 + (1.0 / (beta + 1e-9)) * torch.pow(torch.sin(s32 * alpha), 2)
    if out is None:
        return act.to(x.dtype)
    return out.copy_(act)
