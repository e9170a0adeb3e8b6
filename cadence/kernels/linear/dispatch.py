"""Which kernel runs a projection on a GPU: the streaming GEMM (Triton) where its tile rules have
tiles for the shape and row count, the slab SwiGLU GEMM (CUDA) for the MLP's gate/up at 33-64 rows,
else cuBLAS (and silu_mul after it)."""

from __future__ import annotations

import torch

from . import cuda_slab_swiglu_gemm
from .triton_silu_mul import silu_mul
from .triton_streaming_gemm import streaming_gemm, streaming_tiles, swiglu_gemm_tiles


def linear(x: torch.Tensor, weight: torch.Tensor, force: bool = False) -> torch.Tensor:
    """x @ weight^T: the streaming GEMM where `streaming_tiles` has tiles, else cuBLAS."""
    tiles = streaming_tiles(x, weight, force)
    return torch.nn.functional.linear(x, weight) if tiles is None else streaming_gemm(x, weight, tiles)


def linear_swiglu(x: torch.Tensor, gate_up: torch.Tensor) -> torch.Tensor:
    """silu(x @ gate^T) * (x @ up^T) for the concatenated [gate; up] weight: the slab SwiGLU GEMM
    where its route takes the call, else the streaming GEMM with SwiGLU in its epilogue where `linear`
    would stream the weight (each program a gate slab and its up slab, as many weight rows as the
    plain GEMM's tiles), else the GEMM then `silu_mul`. The fused kernels run the same dots and round
    at the same points as the two (test_linear_swiglu compares the bits)."""
    if (plan := cuda_slab_swiglu_gemm.slab_swiglu_route(x, gate_up)) is not None:
        return cuda_slab_swiglu_gemm.slab_swiglu_gemm(x, gate_up, plan)
    m, k = x.shape
    tiles = swiglu_gemm_tiles(gate_up.shape[0], k, m)
    if tiles is None or x.dtype not in (torch.bfloat16, torch.float16):
        return silu_mul(linear(x, gate_up))
    return streaming_gemm(x, gate_up, tiles, swiglu=True)
