"""The GPU backend of ops.Ops: the Triton kernels, and the CUDA kernels where each operation's
dispatch.py takes them (Hopper). Elementwise rounding follows PyTorch's: math in fp32, the result
rounded to the activation dtype at the points where the eager model produces a tensor, so bf16
results track the eager path."""

from __future__ import annotations

import torch

from .attention import dispatch as attention_dispatch
from .attention import triton_paged_attention, triton_qk_norm_rope
from .attention.triton_paged_attention import AttentionTiles, attention_splits, attention_tiles
from .codec import triton_codec
from .embedding import triton_embed_frame
from .launch.pdl import pdl_launch, pdl_settings
from .linear import dispatch as linear_dispatch
from .linear import triton_silu_mul
from .linear.triton_streaming_gemm import GemmTiles, gemm_tiles
from .norm import triton_rms_norm
from .ops import Ops
from .sampling import dispatch as sampling_dispatch
from .sampling.spec import NEW_TOKENS
from .tile_table import current_table


class TritonOps(Ops):
    """The Triton and CUDA kernels. `streaming_fp32`: the streaming GEMM for fp32 rows too (tests:
    the Triton interpreter runs fp32 only); without it fp32 GEMMs go to cuBLAS, whose exact path
    tensor cores would round to TF32."""

    backend = "triton"

    def __init__(self, streaming_fp32: bool = False):
        self.streaming_fp32 = streaming_fp32

    def linear(self, x, weight):
        return linear_dispatch.linear(x, weight, force=self.streaming_fp32)

    def silu_mul(self, gate_up):
        return triton_silu_mul.silu_mul(gate_up)

    def rms_norm(self, x, weight, eps, residual=None, prefetch=None):
        return triton_rms_norm.rms_norm(x, weight, eps, residual, prefetch)

    def qk_norm_rope_store(self, qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index,
                           num_heads, num_kv_heads):  # fmt: skip
        return triton_qk_norm_rope.qk_norm_rope_store(
            qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, num_heads, num_kv_heads
        )

    def paged_attention(self, q, k_cache, v_cache, block_table, context_lens, scale, splits=None, *,
                        max_context=None, tiles=None):  # fmt: skip
        return triton_paged_attention.paged_attention(
            q, k_cache, v_cache, block_table, context_lens, scale, splits, tiles, max_context
        )

    def sample_tokens(self, logits, spec, outputs=NEW_TOKENS):
        return sampling_dispatch.sample_tokens(logits, spec, outputs)

    def embed_frame(self, codes, table, offsets, plus=None):
        return triton_embed_frame.embed_frame(codes, table, offsets, plus)

    def rope_qk(self, qkv, cos, sin, num_heads, num_kv_heads):
        return triton_codec.rope_qk(qkv, cos, sin, num_heads, num_kv_heads)

    def snake_beta(self, x, log_alpha, log_beta, bias=None, residual=None, out=None, sum_out=None):
        return triton_codec.snake_beta(x, log_alpha, log_beta, bias, residual, out, sum_out)

    # -- the composites this backend has fused kernels for ----------------------------------------

    def linear_rms_norm(self, x, weight, norm_weight, eps, residual, prefetch=None):
        """Where the GEMM splits K, its partials are added by the norm kernel (norm/triton_rms_norm.py)."""
        return triton_rms_norm.linear_rms_norm(x, weight, norm_weight, eps, residual, self.streaming_fp32, prefetch)

    def linear_swiglu(self, x, gate_up):
        """The slab SwiGLU GEMM or the streaming GEMM with SwiGLU in its epilogue where they take the
        call (linear/dispatch.py), else the composite."""
        return linear_dispatch.linear_swiglu(x, gate_up)

    def qk_norm_rope_attention(self, qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index,
                               block_table, context_lens, scale, num_heads, num_kv_heads, splits=None, *,
                               max_context=None, new_tokens=1, tiles=None):  # fmt: skip
        """The CUDA decode attention, the fused Triton one or the two kernels (attention/dispatch.py)."""
        return attention_dispatch.qk_norm_rope_attention(
            qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, block_table, context_lens,
            scale, num_heads, num_kv_heads, splits, tiles, max_context, new_tokens,
        )  # fmt: skip

    # -- launch settings, and the launch choices the sweeps and tests read ------------------------

    def pdl_settings(self, enabled, trigger_first):
        return pdl_settings(enabled, trigger_first)

    def pdl_launch(self, x: torch.Tensor) -> dict:
        return pdl_launch(x)

    def gemm_tiles(self, n: int, k: int, rows: int | None = None) -> GemmTiles | None:
        return gemm_tiles(n, k, rows)

    def attention_tiles(self, rows: int, max_context: int | None = None) -> AttentionTiles:
        return attention_tiles(rows, max_context)

    def attention_splits(self, rows: int, kv_heads: int) -> int:
        return attention_splits(rows, kv_heads)

    @property
    def fused_attention_max_rows(self) -> int:
        return current_table().paged_attention.fused_max_rows
