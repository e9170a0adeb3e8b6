"""The weight prefetcher's kernel (weight_prefetch.py says what it is for and how it is paced)."""

from __future__ import annotations

import triton
import triton.language as tl

LANES = tl.constexpr(128)  # one address a thread at 4 warps


@triton.jit
def _bulk_prefetch(addresses, sizes, mask):
    """One `cp.async.bulk.prefetch.L2` (Hopper's copy engine, no registers held) per active lane."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r,r", [addresses, sizes, mask], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit(do_not_specialize=["lead_kb", "max_spins"])
def prefetch_weights_kernel(table_ptr, count_ptr, progress_ptr, lead_kb, max_spins, CHUNK: tl.constexpr):
    """Prefetch the table's units into L2, program p taking units p, p + programs, ...: a unit only
    once it ends within `lead_kb` of the progress word (KB of the schedule before the weight now
    streaming), which only grows during a walk, so the last value read is kept until a unit needs
    more. A program stops pacing itself after `max_spins` reads of the word in all (a chain that
    never reports makes the walk slow, never hung)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    count = tl.load(count_ptr)
    lane = tl.arange(0, LANES)
    spins = 0
    progress = tl.load(progress_ptr, volatile=True)
    for u in range(pid, count, programs):
        start = tl.load(table_ptr + 3 * u)  # three independent loads: one round trip
        size = tl.load(table_ptr + 3 * u + 1)
        end_kb = tl.load(table_ptr + 3 * u + 2)
        while (end_kb - progress > lead_kb) & (spins < max_spins):
            spins += 1
            progress = tl.load(progress_ptr, volatile=True)
        offset = lane.to(tl.int64) * CHUNK
        _bulk_prefetch(start + offset, tl.minimum(size - offset, CHUNK).to(tl.int32), (offset < size).to(tl.int32))
