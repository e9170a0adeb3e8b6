"""Fused operations of the fast decode step and the streaming codec: Triton kernels on GPUs,
PyTorch definitions elsewhere.

`load_ops("triton" | "torch")` returns a module with the same functions: linear, rms_norm,
qk_norm_rope_store, paged_attention, silu_mul, sample_tokens, snake_beta.
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


def snake_beta(
    x: torch.Tensor,
    log_alpha: torch.Tensor,
    log_beta: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    sum_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The codec's SnakeBeta activation, optionally with the adds before it folded in
    (torch_ops.snake_beta): one fused Triton kernel for CUDA tensors where Triton is installed (one
    pass over the activation instead of five, or seven with the adds), PyTorch elsewhere."""
    backend = "triton" if x.is_cuda and triton_available() else "torch"
    return load_ops(backend).snake_beta(x, log_alpha, log_beta, bias, residual, out, sum_out)
