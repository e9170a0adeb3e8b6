"""The attention ops' PyTorch definitions: what the Triton and CUDA kernels compute (and the CPU
path), in the eager model's dtype order (fp32 math, rounded where the eager code rounds)."""

from __future__ import annotations

import torch

from ..norm.reference import rms_norm


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE in x's dtype: x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def qk_norm_rope_store(
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
    num_heads: int,
    num_kv_heads: int,
) -> torch.Tensor:
    """Split qkv [N, (Hq+2Hkv)*D], QK-RMSNorm per head, RoPE at `positions` (cos/sin tables
    [max_pos, D]), write K/V to flat cache slots `slot_index` [N]; return q [N, Hq, D]."""
    n = qkv.shape[0]
    d = q_norm.shape[0]
    q, k, v = qkv.view(n, num_heads + 2 * num_kv_heads, d).split([num_heads, num_kv_heads, num_kv_heads], dim=1)
    q = rms_norm(q, q_norm, eps)[0]
    k = rms_norm(k, k_norm, eps)[0]
    c, s = cos[positions][:, None, :], sin[positions][:, None, :]
    q, k = rope(q, c, s), rope(k, c, s)
    k_cache.view(-1, num_kv_heads, d)[slot_index] = k
    v_cache.view(-1, num_kv_heads, d)[slot_index] = v
    return q


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    splits: int | None = None,  # how the Triton kernel divides the context; no effect here
    max_context: int | None = None,  # the longest context_lens can be: the Triton kernel's tiles follow it
) -> torch.Tensor:
    """Each query row n attends over its first context_lens[n] cached tokens, read through
    block_table[n] (pages of k_cache [pages, page_size, Hkv, D]). q [N, Hq, D] -> [N, Hq*D]."""
    n, hq, d = q.shape
    hkv = k_cache.shape[2]
    keys = k_cache[block_table].flatten(1, 2)  # [N, P*page_size, Hkv, D]
    values = v_cache[block_table].flatten(1, 2)
    visible = torch.arange(keys.shape[1], device=q.device)[None, :] < context_lens[:, None]
    keys = keys.repeat_interleave(hq // hkv, dim=2)
    values = values.repeat_interleave(hq // hkv, dim=2)
    scores = torch.einsum("nhd,nshd->nhs", q.float(), keys.float()) * scale
    scores = scores.masked_fill(~visible[:, None, :], -float("inf"))
    out = torch.einsum("nhs,nshd->nhd", scores.softmax(-1), values.float())
    return out.to(q.dtype).reshape(n, hq * d)
