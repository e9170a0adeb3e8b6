"""Small host lists to the device without a host wait.

`torch.tensor(values, device="cuda")` copies from pageable memory, and PyTorch then waits for the
whole stream: in an engine step that is the decode walk just launched, so the host would sit idle
for a walk (~5-20 ms) instead of preparing the next work. From pinned memory with
non_blocking=True the copy is queued like a kernel and the host goes on; PyTorch's caching host
allocator keeps the pinned block until the copy has run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def to_device(values: Sequence, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """`torch.tensor(values, dtype=dtype, device=device)` (numbers, or nested sequences of them),
    asynchronous on CUDA devices."""
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def to_device_packed(arrays: Sequence[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Host arrays of any dtypes and shapes to the device in one copy, as `to_device` (pinned and
    asynchronous on CUDA devices): each copy is a launch of its own (~5-10 us of host time), so
    several small arrays travel as one buffer, each at an 8-byte aligned offset, and come back as
    views of it in their own dtype and shape (a view costs no launch)."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    starts, end = [], 0
    for a in arrays:
        starts.append(end)
        end += -(-a.nbytes // 8) * 8
    host = torch.empty(end // 8, dtype=torch.long, pin_memory=device.type == "cuda")
    raw = host.numpy().view(np.uint8)
    for a, start in zip(arrays, starts, strict=True):
        raw[start : start + a.nbytes] = a.reshape(-1).view(np.uint8)
    flat = host.to(device, non_blocking=True)
    typed = {t: flat.view(_TORCH_DTYPES[t]) for t in {a.dtype.type for a in arrays}}
    return [
        typed[a.dtype.type].as_strided(a.shape, [s // a.itemsize for s in a.strides], start // a.itemsize)
        for a, start in zip(arrays, starts, strict=True)
    ]


_TORCH_DTYPES = {np.int64: torch.long, np.float32: torch.float32, np.bool_: torch.bool}
