"""RMSNorm's PyTorch definition: what the norm kernels compute (and the CPU path), rounded where the
eager model rounds."""

from __future__ import annotations

import torch

from .kv_prefetch import KvPrefetch


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    prefetch: KvPrefetch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual) * weight, x + residual); residual None means just x. prefetch: the
    Triton kernel's L2 hint (kv_prefetch.py), nothing to do here."""
    if residual is not None:
        x = x + residual
    x32 = x.float()
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return weight * normed, x
