"""The Triton kernels' side of programmatic dependent launch (pdl.py has the setting and the
protocol): the wait and the trigger in USE_PDL's order, and the L2 prefetches a kernel launched early
issues before its wait (constant weights, cached keys and values)."""

from __future__ import annotations

import triton
import triton.language as tl


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
