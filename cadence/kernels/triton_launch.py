"""How the Triton kernels are launched: programmatic dependent launch (PDL) on Hopper and newer.

Off outside `pdl_settings` (use_pdl(True) turns it on; the talker's graphs ask for it per row count,
EngineConfig.pdl_max_rows). With it, each kernel taking USE_PDL is launched while the one before it
still runs (compute capability >= 9): it waits for that kernel (gdc_wait) before touching anything
it may have written, and only then lets the next one in (gdc_launch_dependents), so at most two
neighbours overlap and the later one has done nothing but launch (and, for the GEMM, pull constant
weights into L2). Kernels launched without it (PyTorch's, cuBLAS) wait for their predecessor as usual.

Trigger first (pdl_trigger_first(True); the talker's graphs of more than TRIGGER_FIRST_ABOVE_ROWS
rows): a kernel lets the next one in before it waits, so kernels launch ahead of the one running as
far as the SMs hold their waiting programs, and each GEMM's weight prefetch starts earlier. On an
H200 (perf-notes #65) that took 0.16 ms off the batch-64 walk and put 0.64 ms on batch 1's, where
the kernels are a few programs each and the chain runs far ahead. Still correct: a kernel touches
nothing written before its own gdc_wait returns, which needs the kernel before it complete, which
needed its own wait, and so on back.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
import triton
import triton.language as tl

_pdl_enabled = False
_pdl_trigger_first = False
# Graphs of more rows than this trigger first (perf-notes #65: measured at 64 rows, -0.16 ms; slower
# at 1 and 4, neutral at 16), i.e. the 33-64-row bucket whose GEMMs stream 64-row tiles.
TRIGGER_FIRST_ABOVE_ROWS = 32

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


def trigger_first_for(rows: int) -> bool:
    """Whether a talker graph of `rows` rows launches its kernels trigger first."""
    return rows > TRIGGER_FIRST_ABOVE_ROWS


@functools.cache
def _pdl_capable(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device)[0] >= 9


def pdl_launch(x: torch.Tensor) -> dict:
    """The launch arguments of a kernel taking USE_PDL, for a call on `x`'s device."""
    if _pdl_enabled and x.is_cuda and _pdl_capable(x.device):
        return {"USE_PDL": PDL_TRIGGER_FIRST if _pdl_trigger_first else PDL_WAIT_FIRST, "launch_pdl": True}
    return {"USE_PDL": PDL_OFF}


@triton.jit
def pdl_entry(USE_PDL: tl.constexpr):
    """A kernel's first step when launched early: wait for the kernel before and let the next in, in
    USE_PDL's order."""
    pdl_trigger(USE_PDL)
    pdl_wait(USE_PDL)


@triton.jit
def pdl_trigger(USE_PDL: tl.constexpr):
    """The trigger-first half of `pdl_entry`: let the next kernel in (nothing when waiting first)."""
    if USE_PDL == 2:  # PDL_TRIGGER_FIRST
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def pdl_wait(USE_PDL: tl.constexpr):
    """The rest of `pdl_entry`: wait for the kernel before (and, waiting first, then let the next in)."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    if USE_PDL == 1:  # PDL_WAIT_FIRST
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_l2(ptrs):
    """Fetch the 128-byte lines at `ptrs` into L2 (a hint: nothing is loaded into registers)."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def bulk_prefetch_l2(ptrs, nbytes, valid):
    """Ask the copy engine to pull `nbytes` (a multiple of 16; 16-byte aligned) at each of `ptrs` into
    L2 where `valid`, at the normal priority (a hint: nothing lands in registers or shared memory, and
    nothing waits for it). Every element is issued by each thread holding it, so give it a layout of
    one element a thread (a 1-D tensor of 32 x num_warps elements)."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $3; mov.u32 $0, 0; }",
        "=r,l,r,r", [ptrs, valid.to(tl.int32), nbytes.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip
