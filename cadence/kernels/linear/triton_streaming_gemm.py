"""The streaming GEMM (Triton): the weight-streaming GEMM for decode batches of up to 128 rows, with
split-K, and the same GEMM with SwiGLU in its epilogue for the MLP's concatenated gate/up projection.
Decode is a weight-streaming problem: each program reads one slab of the weight once, with wide
loads; cuBLAS takes the shapes and row counts the tile table's rules leave to it (linear/dispatch.py)."""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ..launch.pdl import pdl_launch
from ..launch.triton_pdl import pdl_trigger, pdl_wait, prefetch_l2
from ..tile_table import GemmTiles, current_table


@triton.jit
def _streaming_gemm_kernel(x_ptr, w_ptr, out_ptr, part_ptr, count_ptr, M, N, stride_xm, K: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                           K_PER_SPLIT: tl.constexpr, SWIGLU: tl.constexpr, REDUCE: tl.constexpr,
                           USE_PDL: tl.constexpr):  # fmt: skip
    """out[M, N] = x[M, K] @ w[N, K]^T for a handful of rows: decode is a weight-streaming problem,
    so each program reads one BLOCK_N-row slab of the weight (or, split over K, 1/SPLIT_K of it)
    once, with wide loads.

    SWIGLU (no split): w is [gate; up], 2N rows, and out[M, N] = silu(x @ gate^T) * (x @ up^T); a
    program streams the gate slab and the matching up slab, and rounds where the unfused GEMM and
    `silu_mul` round (the projections, then silu), so the result is theirs without the [M, 2N]
    intermediate and its kernel.

    Split over K, each program stores its fp32 partial and takes a ticket from the slab's counter;
    the last to arrive adds the partials in split order (deterministic, whatever order the programs
    ran in), stores the result and resets the counter to 0 for the next call or graph replay.
    Without REDUCE the programs only store their partials, for the next kernel to add in the same
    order (`rms_norm`'s PARTS): no ticket's round trip and no serial tail on the GEMM's chain.

    Launched early (USE_PDL), a program first pulls its share of the weight into L2 (weights are
    never written, so this need not wait), then waits for the kernel before it: the weight read
    overlaps that kernel's tail instead of following it (trigger first: the next kernel is let in
    before the prefetch)."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    pdl_trigger(USE_PDL)
    if USE_PDL:
        prefetch_weight_slab(w_ptr, rn, N, K, split * K_PER_SPLIT, K_PER_SPLIT, BLOCK_K, SWIGLU)
    pdl_wait(USE_PDL)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for i in range(0, K_PER_SPLIT, BLOCK_K):  # a compile-time trip count: a pipelined loop
        kk = split * K_PER_SPLIT + i + rk
        x_mask = (rm[:, None] < M) & (kk[None, :] < K)
        x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=x_mask, other=0.0)
        w_mask = (rn[:, None] < N) & (kk[None, :] < K)
        w = tl.load(w_ptr + rn[:, None] * K + kk[None, :], mask=w_mask, other=0.0)
        acc += tl.dot(x, tl.trans(w))
        if SWIGLU:
            w_up = tl.load(w_ptr + (N + rn[:, None]) * K + kk[None, :], mask=w_mask, other=0.0)
            acc_up += tl.dot(x, tl.trans(w_up))
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    dtype = out_ptr.dtype.element_ty
    if SWIGLU:
        g = acc.to(dtype).to(tl.float32)
        silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], (silu * acc_up.to(dtype).to(tl.float32)).to(dtype),
                 mask=out_mask)  # fmt: skip
    elif SPLIT_K == 1:
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(dtype), mask=out_mask)
    else:
        parts = part_ptr + rm[:, None] * N + rn[None, :]  # partials laid out [SPLIT_K, BLOCK_M, N]
        tl.store(parts + split * BLOCK_M * N, acc, mask=out_mask)
        if REDUCE:
            tl.debug_barrier()  # every thread's partial written before the ticket releases them
            ticket = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel")
            if ticket == SPLIT_K - 1:
                total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for s in range(SPLIT_K):  # .cg: read through L2, where the other programs' stores are
                    total += tl.load(parts + s * BLOCK_M * N, mask=out_mask, other=0.0, cache_modifier=".cg")
                tl.store(out_ptr + rm[:, None] * N + rn[None, :], total.to(dtype), mask=out_mask)
                tl.atomic_xchg(count_ptr + pid, 0)


@triton.jit
def prefetch_weight_slab(w_ptr, rn, N, K: tl.constexpr, k_start, K_SPAN: tl.constexpr, BLOCK_K: tl.constexpr,
                         SWIGLU: tl.constexpr):  # fmt: skip
    """Pull weight rows rn (clamped below N) of a [N, K] weight over K_SPAN columns from k_start into
    L2, one address per 128-byte line (bf16), a BLOCK_K step at a time; with SWIGLU the up rows N + rn
    too, step by step. Weights are never written, so a kernel launched early issues this before its
    PDL wait."""
    lines = tl.arange(0, BLOCK_K // 64) * 64
    rows = tl.minimum(rn, N - 1)
    for i in range(0, K_SPAN, BLOCK_K):
        kk = tl.minimum(k_start + i + lines, K - 1)
        prefetch_l2(w_ptr + rows[:, None] * K + kk[None, :])
        if SWIGLU:
            prefetch_l2(w_ptr + (N + rows[:, None]) * K + kk[None, :])


def _constexprs(tiles: GemmTiles, k: int, swiglu: bool, reduce: bool) -> dict[str, object]:
    """The kernel's compile-time arguments `tiles` set for a K-wide weight."""
    return dict(BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, SPLIT_K=tiles.split_k,
                K_PER_SPLIT=tiles.k_per_split(k), SWIGLU=swiglu, REDUCE=reduce)  # fmt: skip


def gemm_tiles(n: int, k: int, rows: int | None = None) -> GemmTiles | None:
    """Tiles of the streaming GEMM for an [n, k] weight and `rows` activation rows (None: the
    table's small_rows), or None where cuBLAS is faster (the L2-cold sweeps of
    benchmarks/skinny_linear.py): the first of the current tile table's streaming_gemm rules that
    holds the call. The families' tables (kernels/profiles/) say which shapes and rows take which
    tiles and why."""
    table = current_table().streaming_gemm
    return table.tiles(n, k, table.small_rows if rows is None else rows)


def swiglu_gemm_tiles(n: int, k: int, rows: int) -> GemmTiles | None:
    """Tiles of the SwiGLU GEMM for a [gate; up] weight of n rows, or None where it does not apply
    (cuBLAS shapes, split-K, more rows than the table's swiglu_max_rows): a program streams a gate
    slab and its up slab, as many weight rows as the plain GEMM's tile for the same weight. Above
    those rows the gate/up GEMM and silu_mul stay two kernels, which is no slower there."""
    tiles = gemm_tiles(n, k, rows)
    if tiles is None or tiles.split_k > 1 or rows > current_table().streaming_gemm.swiglu_max_rows:
        return None
    return gate_up_slabs(tiles)


def gate_up_slabs(tiles: GemmTiles) -> GemmTiles:
    """The SwiGLU kernel's tiles for the plain GEMM's `tiles` on the same [gate; up] weight: half the
    slab rows, since a program streams a gate slab and its up slab (as many weight rows in all)."""
    return dataclasses.replace(tiles, block_n=max(16, tiles.block_n // 2))


_split_k_buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _split_k_workspace(device: torch.device, n: int, tiles: GemmTiles) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partials and per-slab tickets for split-K, one pair per (device, N, tiles), kept for
    the process: a CUDA graph captures their addresses, and the counters reset themselves. Calls on
    one stream (the decode walk) run one after another, so one pair per shape is enough."""
    key = (device, n, tiles)
    if key not in _split_k_buffers:
        parts = torch.empty(tiles.split_k * tiles.block_m * n, dtype=torch.float32, device=device)
        counters = torch.zeros(triton.cdiv(n, tiles.block_n), dtype=torch.int32, device=device)
        _split_k_buffers[key] = (parts, counters)
    return _split_k_buffers[key]


def streaming_gemm(
    x: torch.Tensor, weight: torch.Tensor, tiles: GemmTiles, out: torch.Tensor | None = None, swiglu: bool = False
) -> torch.Tensor:
    """x @ weight^T by the streaming GEMM with the given tiles (the sweep calls this directly). swiglu:
    `weight` is [gate; up] and the result silu(x @ gate^T) * (x @ up^T), without split-K."""
    n = weight.shape[0] // 2 if swiglu else weight.shape[0]
    if swiglu and tiles.split_k > 1:
        raise ValueError("the SwiGLU epilogue needs whole K per program (split_k=1)")
    if out is None:
        out = torch.empty(x.shape[0], n, dtype=x.dtype, device=x.device)
    parts = counters = out  # unused placeholders when the K loop is not split
    if tiles.split_k > 1:
        parts, counters = _split_k_workspace(x.device, n, tiles)
    _launch(x, weight, n, tiles, out, parts, counters, swiglu=swiglu, reduce=True)
    return out


def streaming_gemm_partials(x: torch.Tensor, weight: torch.Tensor, tiles: GemmTiles) -> torch.Tensor:
    """The split-K kernel's fp32 partials, [split_k, block_m, n] (rows past x's are stale), for
    the next kernel to add in split order; the programs take no ticket. They live in the shape's
    workspace, so they must be read before the next GEMM of the same shape and tiles runs (the
    next kernel on the same stream: the norm of `linear_rms_norm`)."""
    if tiles.split_k < 2:
        raise ValueError("partials need a split K (split_k >= 2)")
    n = weight.shape[0]
    parts, counters = _split_k_workspace(x.device, n, tiles)
    _launch(x, weight, n, tiles, parts, parts, counters, swiglu=False, reduce=False)
    return parts.view(tiles.split_k, tiles.block_m, n)


def _launch(x, weight, n: int, tiles: GemmTiles, out, parts, counters, swiglu: bool, reduce: bool) -> None:
    """One launch of the kernel: out [m, n] (or, without `reduce`, only the partials)."""
    m, k = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    if m > tiles.block_m:
        raise ValueError(f"these tiles hold at most {tiles.block_m} rows (GemmTiles.block_m), got {m}")
    grid = (triton.cdiv(n, tiles.block_n), tiles.split_k)
    _streaming_gemm_kernel[grid](
        x, weight, out, parts, counters, m, n, x.stride(0), k, **_constexprs(tiles, k, swiglu, reduce),
        num_warps=tiles.warps, num_stages=tiles.stages, **pdl_launch(x),
    )  # fmt: skip


def streaming_tiles(x: torch.Tensor, weight: torch.Tensor, force: bool = False) -> GemmTiles | None:
    """The streaming GEMM's tiles for x @ weight^T, or None where cuBLAS runs it: bf16/fp16 rows where
    `gemm_tiles` has tiles for the shape and row count (fp32 goes to cuBLAS, whose exact path tensor
    cores would round to TF32). `force`: the kernel whatever the dtype (tests), with the small_rows
    tiles where the row count has none."""
    m, k = x.shape
    tiles = gemm_tiles(weight.shape[0], k, m)
    if force:
        return tiles or gemm_tiles(weight.shape[0], k)
    return tiles if x.dtype in (torch.bfloat16, torch.float16) else None
