"""The projections' PyTorch definitions: what the GEMM kernels compute (and the CPU path)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weight)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU on concatenated [gate | up] projections: silu(gate) * up, rounded like eager."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
