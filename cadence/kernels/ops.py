"""The fused operations of the fast decode step and the streaming codec, one interface for two
backends: `TorchOps` (the PyTorch definitions: the CPU path, and what the kernels are checked
against) and `TritonOps` (the Triton and CUDA kernels on a GPU).

`load_ops(backend)` returns one. The primitives (linear, silu_mul, rms_norm, qk_norm_rope_store,
paged_attention, sample_tokens, embed_frame, rope_qk, snake_beta) are each backend's own; the
composites (linear_rms_norm, linear_swiglu, qk_norm_rope_attention) are written once here over the
primitives, and a backend overrides one only where it has a fused kernel for it. Each op computes
exactly what the eager model computes, in the same dtype order (fp32 math, rounded to the activation
dtype where the eager code rounds).
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, ClassVar

import torch

from .attention import reference as attention_ref
from .codec import reference as codec_ref
from .embedding import reference as embedding_ref
from .launch.pdl import trigger_first_for
from .linear import reference as linear_ref
from .norm import reference as norm_ref
from .sampling import reference as sampling_ref
from .sampling.spec import NEW_TOKENS, TokenOutputs, TokenSampling

if TYPE_CHECKING:
    from .attention.triton_paged_attention import AttentionTiles
    from .norm.kv_prefetch import KvPrefetch

BACKENDS = ("triton", "torch")


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


class Ops:
    """The interface FusedStack, FastDecoder and the codec call, with the composites written once
    over the backend's primitives (see the module docstring)."""

    backend: ClassVar[str]

    # -- the primitives, each backend's own -------------------------------------------------------

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def rms_norm(self, x, weight, eps: float, residual=None, prefetch: KvPrefetch | None = None):
        raise NotImplementedError

    def qk_norm_rope_store(self, qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index,
                           num_heads: int, num_kv_heads: int) -> torch.Tensor:  # fmt: skip
        raise NotImplementedError

    def paged_attention(self, q, k_cache, v_cache, block_table, context_lens, scale: float, splits: int | None = None,
                        *, max_context: int | None = None, tiles: AttentionTiles | None = None):  # fmt: skip
        raise NotImplementedError

    def sample_tokens(self, logits: torch.Tensor, spec: TokenSampling, outputs: TokenOutputs = NEW_TOKENS):
        raise NotImplementedError

    def embed_frame(self, codes, table, offsets, plus=None) -> torch.Tensor:
        raise NotImplementedError

    def rope_qk(self, qkv, cos, sin, num_heads: int, num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def snake_beta(self, x, log_alpha, log_beta, bias=None, residual=None, out=None, sum_out=None) -> torch.Tensor:
        raise NotImplementedError

    # -- the composites, written once -------------------------------------------------------------

    def linear_rms_norm(self, x, weight, norm_weight, eps: float, residual, prefetch: KvPrefetch | None = None):
        """rms_norm(linear(x, weight), norm_weight, eps, residual): a layer's o or down projection and
        the residual-add + RMSNorm after it; (the normed rows, the sum)."""
        return self.rms_norm(self.linear(x, weight), norm_weight, eps, residual, prefetch)

    def linear_swiglu(self, x: torch.Tensor, gate_up: torch.Tensor) -> torch.Tensor:
        """The MLP's first half: SwiGLU of x's concatenated [gate | up] projections."""
        return self.silu_mul(self.linear(x, gate_up))

    def qk_norm_rope_attention(
        self, qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, block_table, context_lens,
        scale: float, num_heads: int, num_kv_heads: int, splits: int | None = None, *, max_context: int | None = None,
        new_tokens: int = 1, tiles: AttentionTiles | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """qk_norm_rope_store then paged_attention, for decode rows (each its own sequence's new token
        at positions[n] = context_lens[n] - 1), which the Triton backend runs as one kernel. With
        new_tokens > 1, every that many consecutive rows are one sequence's new tokens (the code
        predictor's first pass: 2), each attending over its own context_lens[n] tokens: the same
        definition, since every key is written before any row attends."""
        q = self.qk_norm_rope_store(
            qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, num_heads, num_kv_heads
        )
        return self.paged_attention(
            q, k_cache, v_cache, block_table, context_lens, scale, splits, max_context=max_context, tiles=tiles
        )

    # -- launch settings --------------------------------------------------------------------------

    def pdl_settings(self, enabled: bool, trigger_first: bool) -> contextlib.AbstractContextManager:
        """Kernels launched (or captured) inside use these programmatic-dependent-launch settings."""
        return contextlib.nullcontext()

    def trigger_first_for(self, rows: int) -> bool:
        """Whether a talker graph of `rows` rows launches its kernels trigger first (launch/pdl.py)."""
        return trigger_first_for(rows)


class TorchOps(Ops):
    """The PyTorch definitions (reference.py of each operation)."""

    backend = "torch"

    def linear(self, x, weight):
        return linear_ref.linear(x, weight)

    def silu_mul(self, gate_up):
        return linear_ref.silu_mul(gate_up)

    def rms_norm(self, x, weight, eps, residual=None, prefetch=None):
        return norm_ref.rms_norm(x, weight, eps, residual, prefetch)

    def qk_norm_rope_store(self, qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index,
                           num_heads, num_kv_heads):  # fmt: skip
        return attention_ref.qk_norm_rope_store(
            qkv, q_norm, k_norm, eps, cos, sin, positions, k_cache, v_cache, slot_index, num_heads, num_kv_heads
        )

    def paged_attention(self, q, k_cache, v_cache, block_table, context_lens, scale, splits=None, *,
                        max_context=None, tiles=None):  # fmt: skip
        """The definition; `splits`, `max_context` and `tiles` only steer the kernels' launch."""
        return attention_ref.paged_attention(q, k_cache, v_cache, block_table, context_lens, scale)

    def sample_tokens(self, logits, spec, outputs=NEW_TOKENS):
        return sampling_ref.sample_tokens(logits, spec, outputs)

    def embed_frame(self, codes, table, offsets, plus=None):
        return embedding_ref.embed_frame(codes, table, offsets, plus)

    def rope_qk(self, qkv, cos, sin, num_heads, num_kv_heads):
        return codec_ref.rope_qk(qkv, cos, sin, num_heads, num_kv_heads)

    def snake_beta(self, x, log_alpha, log_beta, bias=None, residual=None, out=None, sum_out=None):
        return codec_ref.snake_beta(x, log_alpha, log_beta, bias, residual, out, sum_out)


def load_ops(backend: str) -> Ops:
    """The ops of `backend` ("triton" or "torch")."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown kernel backend '{backend}'; allowed: {', '.join(BACKENDS)}")
    if backend == "triton" and not triton_available():
        raise RuntimeError("the triton kernel backend needs the triton package (it ships with CUDA builds of torch)")
    return _default_ops(backend)


@functools.cache
def _default_ops(backend: str) -> Ops:
    if backend == "torch":
        return TorchOps()
    from .gpu_ops import TritonOps

    return TritonOps()


def ops_for(x: torch.Tensor) -> Ops:
    """The ops for `x`'s device: the Triton kernels for CUDA tensors where Triton is installed, the
    PyTorch definitions elsewhere. For callers that run on either (the codec's SnakeBeta: one fused
    kernel on a GPU instead of five passes, or seven with the adds folded in)."""
    return load_ops("triton" if x.is_cuda and triton_available() else "torch")
