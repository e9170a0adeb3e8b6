"""Triton kernels for the fast decode step; same signatures and semantics as `torch_ops.py`.

Elementwise rounding follows PyTorch's: math in fp32, result rounded to the activation dtype at
the points where the eager model produces a tensor, so bf16 results track the eager path.
"""

from __future__ import annotations

import torch

from .attention.dispatch import FUSED_ATTENTION_MAX_ROWS, qk_norm_rope_attention
from .attention.triton_paged_attention import AttentionTiles, attention_splits, attention_tiles, paged_attention
from .attention.triton_qk_norm_rope import qk_norm_rope_store
from .codec.triton_codec import rope_qk, snake_beta
from .embedding.triton_embed_frame import embed_frame
from .launch.pdl import pdl_launch, pdl_settings, pdl_trigger_first, trigger_first_for, use_pdl
from .linear.dispatch import linear, linear_swiglu
from .linear.triton_silu_mul import silu_mul
from .linear.triton_streaming_gemm import (
    STREAMING_SMALL_ROWS,
    GemmTiles,
    gemm_tiles,
    streaming_gemm,
    swiglu_gemm_tiles,
)
from .norm.kv_prefetch import KvPrefetch
from .norm.triton_rms_norm import linear_rms_norm, rms_norm
from .sampling.dispatch import sample_tokens  # the CUDA kernel where it runs, else the Triton one

# The ops module's interface (kernels.load_ops), with the launch choices the sweeps and tests use.
__all__ = [
    "AttentionTiles", "FUSED_ATTENTION_MAX_ROWS", "GemmTiles", "STREAMING_SMALL_ROWS", "attention_splits",
    "attention_tiles", "embed_frame", "gemm_tiles", "linear", "linear_rms_norm", "linear_rms_norm_linear",
    "linear_rms_norm_swiglu", "linear_swiglu", "paged_attention", "pdl_launch", "pdl_settings", "pdl_trigger_first",
    "qk_norm_rope_attention", "qk_norm_rope_store", "rms_norm", "rope_qk", "sample_tokens", "silu_mul",
    "snake_beta", "streaming_gemm", "swiglu_gemm_tiles", "trigger_first_for", "use_pdl",
]  # fmt: skip


def linear_rms_norm_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor,
    next_weight: torch.Tensor,
    prefetch: KvPrefetch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(linear(h, next_weight), the sum) for (h, the sum) = linear_rms_norm(x, weight, ...): a layer's
    down projection, the norm after it and the next layer's qkv."""
    h, total = linear_rms_norm(x, weight, norm_weight, eps, residual, prefetch=prefetch)
    return linear(h, next_weight), total


# -- SwiGLU ----------------------------------------------------------------------------------------


def linear_rms_norm_swiglu(
    x: torch.Tensor,
    weight: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor,
    gate_up: torch.Tensor,
    prefetch: KvPrefetch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(linear_swiglu(h, gate_up), the sum) for (h, the sum) = linear_rms_norm(x, weight, ...): a
    layer's o projection, the norm after it and the MLP's first half."""
    h, total = linear_rms_norm(x, weight, norm_weight, eps, residual, prefetch=prefetch)
    return linear_swiglu(h, gate_up), total
