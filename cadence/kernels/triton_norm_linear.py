"""The norm after a split-K GEMM made inside the next GEMM's Triton tiles (perf-notes #144): a layer's
down projection leaves its fp32 partials, and the next layer's qkv GEMM (64-row tiles) adds them, adds
the residual, normalises the rows and multiplies them by the weights, in one kernel where the walk
ran two (the norm kernel, then qkv). At 33-64 rows a qkv program takes 192 KB of shared memory, so it
starts only as down's programs leave (#145); what goes is the norm kernel's own grid between them.

How the rows are made without a grid-wide barrier: after its PDL wait (down's end), program p < M
claims row p's flag and, if it won, makes row p; then every program takes tickets, one row each,
until they run out, and makes every row whose flag it wins (the rows of programs not yet started).
A row is published with a release add on a counter; each program polls the counter (acquire) until
all M rows are in, then runs its dots on them. A program only ever waits for rows that running
programs hold, so the grid needs no co-residency (fewer SMs than programs, an SM share under MPS).
The last program to finish zeroes the counters and flags, for the next call of the shape.

A row's arithmetic is the norm kernel's with PARTS (triton_ops._rms_norm_kernel): the partials added
in split order, rounded, the residual added and rounded (the same bits: the next residual), then
the row normalised, whose sum of squares reduces over this kernel's 4 warps, not the norm's 8, so a
normalised value may differ from the two kernels' in the last bit (as the split norm's already does
from the unsplit one's, triton_ops.PARTS_NORM_WARPS)."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .kv_prefetch import KvPrefetch
from .triton_kv_prefetch import prefetch_args, prefetch_kv_pages
from .triton_launch import globaltimer, pdl_launch, pdl_trigger, pdl_wait, stamp_args, write_stamps
from .triton_linear import SkinnyTiles, prefetch_weight_slab

# Experiment switch (perf-notes #144), off until timed: the norm after down inside the next qkv GEMM.
NORM_IN_QKV = os.environ.get("CADENCE_NORM_IN_QKV", "0") == "1"

# The workspace of a shape: [next ticket, rows published, programs finished, pad, then a flag a row]
SYNC_WORDS = tl.constexpr(4)


@triton.jit
def _publish_row(parts_ptr, part_stride, res_ptr, nw_ptr, h_ptr, sum_ptr, sync_ptr, row, n_cols, eps,
                 PARTS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Make row `row` of the norm if its flag is this program's to take, and publish it: h =
    rms_norm(partials summed + residual) * weight, and the sum itself (the next residual).

    The row's loads are issued before the flag's exchange, so the two L2 round trips overlap (a row
    lost to another program costs only its loads). The exchange is relaxed: an acq_rel atomic is a
    full fence (MEMBAR.ALL.GPU) that would wait for those loads; what orders the row's stores before
    any reader is the release add that publishes it."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    at = row * n_cols + cols
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for s in tl.static_range(PARTS):
        total += tl.load(parts_ptr + s * part_stride + at, mask=mask, other=0.0)
    res = tl.load(res_ptr + at, mask=mask, other=0.0)
    w = tl.load(nw_ptr + cols, mask=mask, other=0.0)
    if tl.atomic_xchg(sync_ptr + SYNC_WORDS + row, 1, sem="relaxed") == 0:
        dtype = h_ptr.dtype.element_ty
        x = (total.to(dtype).to(tl.float32) + res.to(tl.float32)).to(dtype)
        tl.store(sum_ptr + at, x, mask=mask)
        x32 = x.to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=0) / n_cols + eps)
        normed = (x32 * inv).to(dtype).to(tl.float32)
        tl.store(h_ptr + at, (w.to(tl.float32) * normed).to(dtype), mask=mask)
        tl.debug_barrier()  # every thread's stores of the row before the release that publishes them
        tl.atomic_add(sync_ptr + 1, 1, sem="release")


@triton.jit
def _norm_linear_kernel(parts_ptr, res_ptr, nw_ptr, h_ptr, sum_ptr, sync_ptr, w_ptr, out_ptr, M, N, part_stride,
                        eps, K: tl.constexpr, PARTS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, NORM_BLOCK: tl.constexpr, USE_PDL: tl.constexpr, kc_ptr=None,
                        vc_ptr=None, bt_ptr=None, ctx_ptr=None, bt_stride=0, num_pages=1,
                        KV_TOKENS: tl.constexpr = 0, KV_SLOTS: tl.constexpr = 32, PS: tl.constexpr = 1,
                        TOKEN_ELEMS: tl.constexpr = 1, EVICT_LAST: tl.constexpr = False,
                        KV_AFTER_WAIT: tl.constexpr = False, stamp_ptr=None, stamp_row=0,
                        STAMP: tl.constexpr = False):  # fmt: skip
    """out[M, N] = rms_norm(partials + residual)[M, K] @ w[N, K]^T, the norm's rows into h and sum.
    Otherwise triton_linear._skinny_linear_kernel without split-K: one BLOCK_N-row weight slab a
    program, pulled into L2 before the wait. Program p < M issues row p's KV prefetch, where the
    norm kernel would have (KV_TOKENS, triton_kv_prefetch). STAMP: the clock at the start, after the
    prefetches, after the wait, once every row is in, and at the end."""
    pid = tl.program_id(0)
    if STAMP:
        t_start = globaltimer(pid)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    pdl_trigger(USE_PDL)
    if KV_TOKENS and not KV_AFTER_WAIT:
        if pid < M:
            prefetch_kv_pages(kc_ptr, vc_ptr, bt_ptr, ctx_ptr, pid, bt_stride, num_pages, KV_TOKENS, KV_SLOTS, PS,
                              TOKEN_ELEMS, EVICT_LAST)  # fmt: skip
    if USE_PDL:
        prefetch_weight_slab(w_ptr, rn, N, K, 0, K, BLOCK_K, False)
    if STAMP:
        t_ahead = globaltimer(pid)
    pdl_wait(USE_PDL)
    if STAMP:
        t_waited = globaltimer(pid)
    if KV_TOKENS and KV_AFTER_WAIT:
        if pid < M:
            prefetch_kv_pages(kc_ptr, vc_ptr, bt_ptr, ctx_ptr, pid, bt_stride, num_pages, KV_TOKENS, KV_SLOTS, PS,
                              TOKEN_ELEMS, EVICT_LAST)  # fmt: skip
    if pid < M:  # its own row first: the row's loads start without a ticket's round trip
        _publish_row(parts_ptr, part_stride, res_ptr, nw_ptr, h_ptr, sum_ptr, sync_ptr, pid, K, eps, PARTS,
                     NORM_BLOCK)  # fmt: skip
    ticket = tl.atomic_add(sync_ptr, 1, sem="relaxed")  # only the count matters: no fence
    while ticket < M:
        _publish_row(parts_ptr, part_stride, res_ptr, nw_ptr, h_ptr, sum_ptr, sync_ptr, ticket, K, eps, PARTS,
                     NORM_BLOCK)  # fmt: skip
        ticket = tl.atomic_add(sync_ptr, 1, sem="relaxed")
    published = tl.atomic_add(sync_ptr + 1, 0, sem="acquire")
    while published < M:
        published = tl.atomic_add(sync_ptr + 1, 0, sem="acquire")
    if STAMP:
        t_rows = globaltimer(pid)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for i in range(0, K, BLOCK_K):  # a compile-time trip count: a pipelined loop
        kk = i + rk
        x_mask = (rm[:, None] < M) & (kk[None, :] < K)
        # .cg: other programs wrote these rows during this kernel; read them where they are, in L2
        x = tl.load(h_ptr + rm[:, None] * K + kk[None, :], mask=x_mask, other=0.0, cache_modifier=".cg")
        w_mask = (rn[:, None] < N) & (kk[None, :] < K)
        w = tl.load(w_ptr + rn[:, None] * K + kk[None, :], mask=w_mask, other=0.0)
        acc += tl.dot(x, tl.trans(w))
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=out_mask)
    # The last program out resets the workspace: every program is past its poll, so no row is still
    # being claimed or waited for. Relaxed: a program counts itself only after its poll (an acquire
    # load, which nothing later passes), and a fence here would hold its end for its output's stores.
    if tl.atomic_add(sync_ptr + 2, 1, sem="relaxed") == tl.num_programs(0) - 1:
        words = tl.arange(0, SYNC_WORDS)
        tl.store(sync_ptr + words, tl.zeros_like(words))
        tl.store(sync_ptr + SYNC_WORDS + rm, tl.zeros_like(rm), mask=rm < M)
    if STAMP:
        write_stamps(stamp_ptr, stamp_row + pid, t_start, t_ahead, t_waited, t_rows)


_sync_words: dict[tuple, torch.Tensor] = {}


def _sync_workspace(device: torch.device, n: int, k: int, tiles: SkinnyTiles) -> torch.Tensor:
    """The counters and row flags of one shape, zeroed once and reset by each call's last program
    (a graph captures the address; calls of one shape on the walk's stream never overlap)."""
    key = (device, n, k, tiles)
    if key not in _sync_words:
        _sync_words[key] = torch.zeros(SYNC_WORDS.value + tiles.block_m, dtype=torch.int32, device=device)
    return _sync_words[key]


def norm_linear(parts: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                weight: torch.Tensor, tiles: SkinnyTiles, prefetch: KvPrefetch | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(y, the sum, h) for h = rms_norm(partials summed + residual) * norm_weight and y = h @ weight^T,
    in one kernel: parts [split, tile rows, K] fp32 (a split-K GEMM's, `skinny_linear_partials`),
    residual [M, K]; `tiles` the unsplit 64-row tiles of weight [N, K] (`linear_tiles`). prefetch:
    the cached keys and values the norm kernel would have pulled into L2 for these rows."""
    m, k = residual.shape
    n = weight.shape[0]
    if tiles.split_k != 1 or m > tiles.block_m or parts.shape[1] < m or parts.shape[2] != k or weight.shape[1] != k:
        raise ValueError(
            f"norm_linear: partials {tuple(parts.shape)}, {m} rows, weight {tuple(weight.shape)}, tiles {tiles}: "
            "expected unsplit tiles of at least the rows, and K the partials' width"
        )
    h = torch.empty_like(residual)
    total = torch.empty_like(residual)
    out = torch.empty(m, n, dtype=residual.dtype, device=residual.device)
    sync = _sync_workspace(residual.device, n, k, tiles)
    grid = (triton.cdiv(n, tiles.block_n),)
    stamps = stamp_args(f"gemm+norm {n}x{k}", grid[0], placeholder=out)
    _norm_linear_kernel[grid](
        parts, residual, norm_weight, h, total, sync, weight, out, m, n, parts[0].numel(), eps, K=k,
        PARTS=parts.shape[0], BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        NORM_BLOCK=triton.next_power_of_2(k), num_warps=tiles.warps, num_stages=tiles.stages,
        **pdl_launch(residual), **prefetch_args(prefetch, m, tiles.warps), **stamps,
        **({"maxnreg": tiles.max_registers} if tiles.max_registers else {}),
    )  # fmt: skip
    return out, total, h
