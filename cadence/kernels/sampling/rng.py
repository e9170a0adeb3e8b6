"""Counter-based random numbers: noise as a pure function of (seed, frame, codebook, index).

A global generator hands out numbers in call order, so a request's samples would depend on which
other requests share its batch and in which order. Hashing the coordinates instead makes every
draw reproducible and batch-invariant, and it is plain elementwise tensor math, so it runs inside a
CUDA graph with the seeds and frame counters read from device tensors.

The hash works on 32-bit lanes held in int64 with multipliers below 2^31, so products never
overflow int64 and right shifts of non-negative values are logical.
"""

from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF
_M1 = 0x7FEB352D  # odd multipliers < 2^31 (mixing constants of a 32-bit integer finaliser)
_M2 = 0x2C1B3C6D
_GOLDEN = 0x1E3779B9
U_MAX = 1.0 - 2.0**-24  # the largest fp32 below 1: the noise stays finite (-log(-log(U_MAX)) ~ 16.6)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit avalanche mix of non-negative int64 lanes (values < 2^32)."""
    x = x ^ (x >> 16)
    x = (x * _M1) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _M2) & _MASK32
    x = x ^ (x >> 16)
    return x


def stream_key(seed: torch.Tensor, frame: torch.Tensor, codebook: int) -> torch.Tensor:
    """One 32-bit key per row for (seed [B], frame [B], codebook)."""
    s = seed.long()
    k = _mix((s & _MASK32) ^ _GOLDEN)
    k = _mix(k ^ ((s >> 32) & _MASK32))
    k = _mix(k ^ (frame.long() & _MASK32))
    return _mix(k ^ ((codebook * _GOLDEN) & _MASK32))


def uniform(seed: torch.Tensor, frame: torch.Tensor, codebook: int, n: int) -> torch.Tensor:
    """[B, n] floats in (0, 1), a pure function of (seed, frame, codebook, column)."""
    key = stream_key(seed, frame, codebook)[:, None]
    idx = torch.arange(n, device=seed.device, dtype=torch.long)[None, :]
    x = _mix(key ^ ((idx * _GOLDEN + 0x5BD1E995) & _MASK32))
    x = _mix(x ^ key)
    # 24 random bits -> (0, 1), never 0 or 1. (2^24 - 1) + 0.5 is not an fp32 number: it rounds to
    # 2^24, u to 1.0 and the Gumbel noise to +inf, and a masked column's -inf + inf is a NaN that
    # wins the argmax (a control token reached the codec). Clamped to the float below 1.
    return (((x >> 8).float() + 0.5) / float(1 << 24)).clamp(max=U_MAX)


def gumbel(seed: torch.Tensor, frame: torch.Tensor, codebook: int, n: int) -> torch.Tensor:
    """Gumbel(0, 1) noise: argmax(logits + noise) samples from softmax(logits)."""
    return -torch.log(-torch.log(uniform(seed, frame, codebook, n)))
