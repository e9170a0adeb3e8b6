"""Small host lists to the device without a host wait.

`torch.tensor(values, device="cuda")` copies from pageable memory, and PyTorch then waits for the
whole stream: in an engine step that is the decode walk just launched, so the host would sit idle
for a walk (~5-20 ms) instead of preparing the next work (perf-notes #16). From pinned memory with
non_blocking=True the copy is queued like a kernel and the host goes on; PyTorch's caching host
allocator keeps the pinned block until the copy has run.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def to_device(values: Sequence, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """`torch.tensor(values, dtype=dtype, device=device)` (numbers, or nested sequences of them),
    asynchronous on CUDA devices."""
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
