"""The fused operations of the fast decode step, written as plain PyTorch.

These are the definitions the Triton kernels (`triton_ops.py`) are checked against, and the
implementation the fast path uses where Triton is absent (CPU), so the fast step's logic is
tested in CI. Each function computes exactly what the eager model computes, in the same dtype
order (fp32 math, rounded to the activation dtype where the eager code rounds).
"""

from __future__ import annotations

import torch

from .attention.reference import paged_attention, qk_norm_rope_store
from .codec.reference import rope_qk, snake_beta
from .embedding.reference import embed_frame
from .linear.reference import linear, silu_mul
from .norm.kv_prefetch import KvPrefetch
from .norm.reference import rms_norm
from .sampling.reference import check_token_outputs, sample_tokens

# The ops module's interface (kernels.load_ops).
__all__ = [
    "check_token_outputs", "embed_frame", "linear", "linear_rms_norm", "linear_rms_norm_linear",
    "linear_rms_norm_swiglu", "linear_swiglu", "paged_attention", "qk_norm_rope_attention", "qk_norm_rope_store",
    "rms_norm", "rope_qk", "sample_tokens", "silu_mul", "snake_beta",
]  # fmt: skip


def linear_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None,
    prefetch: KvPrefetch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A projection and the residual-add + RMSNorm after it (a layer's o or down projection)."""
    return rms_norm(linear(x, weight), norm_weight, eps, residual, prefetch)


def linear_rms_norm_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor,
    next_weight: torch.Tensor,
    prefetch: KvPrefetch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's down projection, the norm after it and the next layer's qkv projection: (the
    normed rows @ next_weight^T, the sum x @ weight^T + residual, the next residual)."""
    h, total = linear_rms_norm(x, weight, norm_weight, eps, residual, prefetch)
    return linear(h, next_weight), total


def linear_rms_norm_swiglu(
    x: torch.Tensor,
    weight: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor,
    gate_up: torch.Tensor,
    prefetch: KvPrefetch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's o projection, the norm after it and the MLP's first half: (SwiGLU of the normed
    rows, the sum x @ weight^T + residual, the next residual)."""
    h, total = linear_rms_norm(x, weight, norm_weight, eps, residual, prefetch)
    return linear_swiglu(h, gate_up), total


def qk_norm_rope_attention(
    qkv: torch.Tensor,
    q_norm: torch.Tensor,
    k_norm: torch.Tensor,
    eps: float,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_index: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    num_heads: int,
    num_kv_heads: int,
    splits: int | None = None,
    max_context: int | None = None,
    new_tokens: int = 1,
) -> torch.Tensor:
    """qk_norm_rope_store then paged_attention, for decode rows (each its own sequence's new token
    at positions[n] = context_lens[n] - 1), which the Triton backend runs as one kernel. With
    new_tokens > 1, every that many consecutive rows are one sequence's new tokens (the code
    predictor's first pass: 2), each attending over its own context_lens[n] tokens: the same
    definition, since every key is written before any row attends."""
    q = qk_norm_rope_store(
        qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, num_heads, num_kv_heads
    )
    return paged_attention(q, k_cache, v_cache, block_table, context_lens, scale, splits, max_context)


def linear_swiglu(x: torch.Tensor, gate_up: torch.Tensor) -> torch.Tensor:
    """The MLP's first half: SwiGLU of x's concatenated [gate | up] projections."""
    return silu_mul(linear(x, gate_up))
