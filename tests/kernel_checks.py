"""What the Triton kernel tests share: where they run and how close a kernel must come to its
PyTorch definition (torch_ops.py).

They run on a CUDA device, or on the CPU through Triton's interpreter (TRITON_INTERPRET=1, fp32
only), and are skipped where Triton is not installed (CI installs the CPU build of torch, which has
no Triton). Their `ops` fixture (the Triton kernels and the definitions) is in conftest.py."""

from __future__ import annotations

import os

import pytest
import torch

from cadence.kernels import triton_available

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
NEEDS_TRITON = pytest.mark.skipif(
    not triton_available() or not (torch.cuda.is_available() or INTERPRET),
    reason="needs Triton with a CUDA device, or TRITON_INTERPRET=1",
)
DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32] if INTERPRET else [torch.float32, torch.bfloat16]


def tol(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 2e-2
