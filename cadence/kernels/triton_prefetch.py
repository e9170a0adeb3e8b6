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


@triton.jit
def _line_prefetch(addresses, mask):
    """One `prefetch.global.L2` of a 128-byte line per active lane."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
        "=r,l,r", [addresses, mask], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit(do_not_specialize=["lead_bytes", "max_spins"])
def prefetch_weights_kernel(table_ptr, count_ptr, progress_ptr, lead_bytes, max_spins,
                            CHUNK: tl.constexpr, BULK: tl.constexpr):  # fmt: skip
    """Prefetch the table's weights into L2 in order; entry j only once the chain's progress word p
    (the index of the GEMM now starting) has j <= p + 1 or entry j ends within `lead_bytes` of
    entry p's start. Chunks of CHUNK bytes go round-robin over the programs so that every entry is
    spread over all of them. A program stops pacing itself after `max_spins` reads of the progress
    word in all (a chain that never reports makes the walk slow, never hung)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    count = tl.load(count_ptr)
    lane = tl.arange(0, LANES)
    spins = 0
    for j in range(0, count):
        start = tl.load(table_ptr + 3 * j)
        size = tl.load(table_ptr + 3 * j + 1)
        end = tl.load(table_ptr + 3 * j + 2) + size  # bytes of the schedule up to this entry's end
        p = tl.minimum(tl.maximum(tl.load(progress_ptr, volatile=True), 0), count - 1)
        base = tl.load(table_ptr + 3 * p + 2)
        while (j > p + 1) & (end - base > lead_bytes) & (spins < max_spins):
            spins += 1
            p = tl.minimum(tl.maximum(tl.load(progress_ptr, volatile=True), 0), count - 1)
            base = tl.load(table_ptr + 3 * p + 2)
        chunks = tl.cdiv(size, CHUNK)
        if BULK:  # lanes take chunks pid, pid + programs, ...: 128 chunks a program a pass
            for first in range(0, chunks, LANES * programs):
                c = first + lane * programs + pid
                offset = c.to(tl.int64) * CHUNK
                _bulk_prefetch(start + offset, tl.minimum(size - offset, CHUNK).to(tl.int32), (c < chunks).to(tl.int32))
        else:  # a program takes chunks pid, pid + programs, ...: its lanes one line each
            for c in range(pid, chunks, programs):
                offset = c.to(tl.int64) * CHUNK + lane * 128
                _line_prefetch(start + offset, (offset < size).to(tl.int32))
