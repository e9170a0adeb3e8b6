"""Programmatic dependent launch (PDL) on Hopper and newer: the setting every kernel's launch reads.

Off outside `pdl_settings` (the talker's graphs ask for it per row count, KernelConfig.pdl_max_rows).
With it, each kernel taking USE_PDL is launched while the one before it still runs (compute
capability >= 9): it waits for that kernel (gdc_wait) before touching anything it may have written,
and only then lets the next one in (gdc_launch_dependents), so at most two neighbours overlap and the
later one has done nothing but launch (and, for the GEMMs, pull constant weights into L2). Kernels
launched without it (PyTorch's, cuBLAS) wait for their predecessor as usual.

Trigger first (`pdl_settings(True, trigger_first=True)`; the talker's graphs above the tile table's
`pdl.trigger_first_above_rows`): a kernel lets the next one in before it waits, so kernels launch
ahead of the one running as far as the SMs hold their waiting programs, and each GEMM's weight
prefetch starts earlier. That pays where every kernel has many programs (batch 64) and costs where
each has a few and the chain runs far ahead (batch 1). Still correct: a kernel touches nothing
written before its own wait returns, which needs the kernel before it complete, which needed its
own wait, and so on back.

The Triton side of the protocol is triton_pdl.py; the CUDA kernels' launcher (nvrtc.launch) reads the
same setting through `pdl_on`, so that a graph's kernels all chain alike.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

from ..tile_table import current_table

_pdl_enabled = False
_pdl_trigger_first = False

# USE_PDL's values: off, wait for the kernel before then let the next in, or the reverse.
PDL_OFF, PDL_WAIT_FIRST, PDL_TRIGGER_FIRST = 0, 1, 2


def use_pdl(enabled: bool) -> bool:
    """Launch the fused step's kernels with programmatic dependent launch (Hopper and newer) or
    not, from now on (a CUDA graph keeps how it was captured); returns the previous setting."""
    global _pdl_enabled
    previous, _pdl_enabled = _pdl_enabled, enabled
    return previous


def pdl_trigger_first(enabled: bool) -> bool:
    """Kernels launched with PDL let the next one in before their wait (True) or after it (False),
    from now on (a CUDA graph keeps how it was captured); returns the previous setting."""
    global _pdl_trigger_first
    previous, _pdl_trigger_first = _pdl_trigger_first, enabled
    return previous


@contextlib.contextmanager
def pdl_settings(enabled: bool, trigger_first: bool) -> Iterator[None]:
    """Kernels launched (or captured) inside use these PDL settings; the previous ones come back after."""
    previous, previous_order = use_pdl(enabled), pdl_trigger_first(trigger_first)
    try:
        yield
    finally:
        use_pdl(previous)
        pdl_trigger_first(previous_order)


@functools.cache
def _pdl_capable(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] >= 9


def pdl_launch(x: torch.Tensor) -> dict:
    """The launch arguments of a Triton kernel taking USE_PDL, for a call on `x`'s device."""
    if _pdl_enabled and x.is_cuda and _pdl_capable(x.device):
        return {"USE_PDL": PDL_TRIGGER_FIRST if _pdl_trigger_first else PDL_WAIT_FIRST, "launch_pdl": True}
    return {"USE_PDL": PDL_OFF}


def pdl_on(x: torch.Tensor) -> bool:
    """Whether a CUDA kernel on `x`'s device is launched with PDL now."""
    return bool(pdl_launch(x).get("launch_pdl"))


def trigger_first_now(x: torch.Tensor) -> bool:
    """Whether a kernel on `x`'s device launched now lets the next one in before its wait (a CUDA
    kernel compiles the order in: its plans' TRIGGER_FIRST)."""
    return pdl_launch(x).get("USE_PDL") == PDL_TRIGGER_FIRST


def trigger_first_for(rows: int) -> bool:
    """Whether a talker graph of `rows` rows launches its kernels trigger first: above the tile
    table's pdl.trigger_first_above_rows (the 33-64-row bucket, whose GEMMs stream 64-row tiles)."""
    return rows > current_table().pdl.trigger_first_above_rows
