"""Fused operations of the fast decode step and the streaming codec: Triton kernels on GPUs,
PyTorch definitions elsewhere.

`load_ops("triton" | "torch")` returns a module with the same functions: linear, rms_norm,
linear_rms_norm (a projection and the norm after it), linear_rms_norm_swiglu (o, its norm and the
MLP's gate/up with SwiGLU), linear_rms_norm_linear (down, its norm and the next layer's qkv),
qk_norm_rope_store, rope_qk,
paged_attention, qk_norm_rope_attention (the two before it as one, for decode rows), silu_mul,
linear_swiglu (the GEMM with SwiGLU after it), sample_tokens, snake_beta.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

import torch

BACKENDS = ("triton", "torch")


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def load_ops(backend: str) -> ModuleType:
    if backend not in BACKENDS:
        raise ValueError(f"unknown kernel backend '{backend}'; allowed: {', '.join(BACKENDS)}")
    if backend == "triton" and not triton_available():
        raise RuntimeError("the triton kernel backend needs the triton package (it ships with CUDA builds of torch)")
    return importlib.import_module(f".{backend}_ops", __name__)


def ops_for(x: torch.Tensor) -> ModuleType:
    """The ops for `x`'s device: the Triton kernels for CUDA tensors where Triton is installed, the
    PyTorch definitions elsewhere. For callers that run on either (the codec's SnakeBeta: one fused
    kernel on a GPU instead of five passes, or seven with the adds folded in)."""
    return load_ops("triton" if x.is_cuda and triton_available() else "torch")
