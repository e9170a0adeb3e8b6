"""Which kernel runs a decode attention with its rows' QK-norm, RoPE and cache write on a GPU: the
CUDA kernel where its plan takes the call (the code predictor's short contexts at 64 rows, on
Hopper), else one fused Triton kernel up to the tile table's paged_attention.fused_max_rows rows of
one new token each (above, every program's long context loop is bandwidth-bound and the fused
prologue only adds to it), else qk_norm_rope_store then paged_attention (whose cache write precedes
every row's attention)."""

from __future__ import annotations

import torch

from ..tile_table import current_table
from . import cuda_decode_attention
from .triton_paged_attention import AttentionTiles, fused_qk_norm_rope_attention, paged_attention
from .triton_qk_norm_rope import qk_norm_rope_store


def qk_norm_rope_attention(
    qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, block_table, context_lens, scale,
    num_heads: int, num_kv_heads: int, splits: int | None = None, tiles: AttentionTiles | None = None,
    max_context: int | None = None, new_tokens: int = 1,
) -> torch.Tensor:  # fmt: skip
    """Decode attention with the rows' QK-norm, RoPE and cache write (the reference composite has
    the definition, and says what new_tokens > 1 means), on the kernel the module docstring names."""
    norm_rope = (q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index)
    plan = cuda_decode_attention.decode_plan(
        qkv, k_cache, block_table, num_heads, num_kv_heads, max_context, new_tokens
    )
    if plan is not None:
        return cuda_decode_attention.cuda_qk_norm_rope_attention(
            qkv, *norm_rope, block_table, context_lens, scale, num_heads, num_kv_heads, plan
        )
    if qkv.shape[0] <= current_table().paged_attention.fused_max_rows and new_tokens == 1:
        return fused_qk_norm_rope_attention(
            qkv, *norm_rope, block_table, context_lens, scale, num_heads, num_kv_heads, splits, tiles, max_context
        )
    q = qk_norm_rope_store(qkv, *norm_rope, num_heads, num_kv_heads)
    return paged_attention(q, k_cache, v_cache, block_table, context_lens, scale, splits, tiles, max_context)
