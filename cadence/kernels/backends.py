"""Which ops a caller gets: `load_ops(backend)` by name, `ops_for(x)` by a tensor's device."""

from __future__ import annotations

import functools

import torch

from .ops import Ops, TorchOps

BACKENDS = ("triton", "torch")


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


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
