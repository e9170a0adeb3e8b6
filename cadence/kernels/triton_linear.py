"""The weight-streaming GEMM for decode batches of a few rows (Triton), with split-K; the same GEMM
with SwiGLU in its epilogue for the MLP's concatenated gate/up projection, and with the residual
add and RMSNorm that follow the o and down projections run by its last program to finish."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .triton_launch import pdl_entry, pdl_launch, prefetch_l2
from .triton_norm import NORM_ROWS, rms_norm, rms_norm_rows


@triton.jit
def _norm_when_last(out_ptr, count_ptr, res_ptr, nw_ptr, normed_ptr, sum_ptr, M, N, eps, HAS_RES: tl.constexpr,
                    ROWS: tl.constexpr, NORM_BLOCK: tl.constexpr):  # fmt: skip
    """Called by each slab's finishing program once the slab's output is stored: the last slab to
    finish (a ticket on the counter after the per-slab ones) normalises the whole rows, then resets
    the counter for the next call or graph replay."""
    slabs = tl.num_programs(0)
    tl.debug_barrier()  # every thread's output stored before the ticket releases it
    if tl.atomic_add(count_ptr + slabs, 1, sem="acq_rel") == slabs - 1:
        for r0 in range(0, M, ROWS):
            rms_norm_rows(out_ptr, res_ptr, nw_ptr, normed_ptr, sum_ptr, r0, M, N, eps, HAS_RES, ROWS, NORM_BLOCK)
        tl.atomic_xchg(count_ptr + slabs, 0)


@triton.jit
def _skinny_linear_kernel(x_ptr, w_ptr, out_ptr, part_ptr, count_ptr, M, N, stride_xm,
                          res_ptr, nw_ptr, normed_ptr, sum_ptr, eps, K: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                          K_PER_SPLIT: tl.constexpr, SWIGLU: tl.constexpr, NORM: tl.constexpr, HAS_RES: tl.constexpr,
                          NORM_ROWS: tl.constexpr, NORM_BLOCK: tl.constexpr, USE_PDL: tl.constexpr):  # fmt: skip
    """out[M, N] = x[M, K] @ w[N, K]^T for a handful of rows: decode is a weight-streaming problem,
    so each program reads one BLOCK_N-row slab of the weight (or, split over K, 1/SPLIT_K of it)
    once, with wide loads.

    SWIGLU (no split): w is [gate; up], 2N rows, and out[M, N] = silu(x @ gate^T) * (x @ up^T); a
    program streams the gate slab and the matching up slab, and rounds where the unfused GEMM and
    `silu_mul` round (the projections, then silu), so the result is theirs without the [M, 2N]
    intermediate and its kernel.

    NORM: then (normed, sum) = (nw * RMSNorm(out + res), out + res), as `rms_norm` computes them
    (the same device function), by the program that finishes last: one kernel fewer per norm.

    Split over K, each program stores its fp32 partial and takes a ticket from the slab's counter;
    the last to arrive adds the partials in split order (deterministic, whatever order the programs
    ran in), stores the result and resets the counter to 0 for the next call or graph replay.

    Launched early (USE_PDL), a program first pulls its share of the weight into L2 (weights are
    never written, so this need not wait), then waits for the kernel before it: the weight read
    overlaps that kernel's tail instead of following it."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    if USE_PDL:
        lines = tl.arange(0, BLOCK_K // 64) * 64  # one address per 128-byte line (bf16)
        rows = tl.minimum(rn, N - 1)
        for i in range(0, K_PER_SPLIT, BLOCK_K):
            kk = tl.minimum(split * K_PER_SPLIT + i + lines, K - 1)
            prefetch_l2(w_ptr + rows[:, None] * K + kk[None, :])
            if SWIGLU:
                prefetch_l2(w_ptr + (N + rows[:, None]) * K + kk[None, :])
    pdl_entry(USE_PDL)
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
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=out_mask)
        if NORM:
            _norm_when_last(out_ptr, count_ptr, res_ptr, nw_ptr, normed_ptr, sum_ptr, M, N, eps, HAS_RES, NORM_ROWS,
                            NORM_BLOCK)  # fmt: skip
    else:
        parts = part_ptr + rm[:, None] * N + rn[None, :]  # partials laid out [SPLIT_K, BLOCK_M, N]
        tl.store(parts + split * BLOCK_M * N, acc, mask=out_mask)
        tl.debug_barrier()  # every thread's partial written before the ticket releases them
        ticket = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel")
        if ticket == SPLIT_K - 1:
            total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for s in range(SPLIT_K):  # .cg: read through L2, where the other programs' stores are
                total += tl.load(parts + s * BLOCK_M * N, mask=out_mask, other=0.0, cache_modifier=".cg")
            tl.store(out_ptr + rm[:, None] * N + rn[None, :], total.to(out_ptr.dtype.element_ty), mask=out_mask)
            tl.atomic_xchg(count_ptr + pid, 0)
            if NORM:
                _norm_when_last(out_ptr, count_ptr, res_ptr, nw_ptr, normed_ptr, sum_ptr, M, N, eps, HAS_RES,
                                NORM_ROWS, NORM_BLOCK)  # fmt: skip


SKINNY_MAX_ROWS = 16


@dataclass(frozen=True)
class SkinnyTiles:
    """Launch choices of the weight-streaming GEMM: weight rows per program, K per loop step,
    warps, pipeline stages, how many programs share one slab's K (split-K), and the activation
    rows one program holds (the most rows a call may have; `linear` routes up to 16 here)."""

    block_n: int = 32
    block_k: int = 256
    warps: int = 4
    stages: int = 3
    split_k: int = 1
    block_m: int = SKINNY_MAX_ROWS


def skinny_tiles(n: int, k: int, rows: int = SKINNY_MAX_ROWS) -> SkinnyTiles | None:
    """Tiles of the weight-streaming GEMM for an [n, k] weight and `rows` activation rows, or None
    where cuBLAS is faster; from the L2-cold sweeps of benchmarks/skinny_linear.py on the H200.
    Up to 16 rows (perf-notes #20, #21, #26), chosen for 1 and 16 rows alike: the narrow, long
    projections (o_proj 1024x2048, down 1024x3072: 32 slabs of 32 rows) split their K over 4
    programs to fill the SMs; the 6144-wide gate/up streams 64-row slabs; the rest 32-row slabs in
    256-wide K steps. 17-32 rows (#28): only the narrow weights gain (o_proj, down, the code
    predictor's 2048-wide heads: -0.19 ms per walk against cuBLAS); above 32 rows cuBLAS (the best
    tiles gained 0.09 ms of 2.73 at 64 rows)."""
    if rows <= SKINNY_MAX_ROWS:
        if n <= 1024 and k >= 2048:
            return SkinnyTiles(block_n=32, block_k=256, split_k=4)
        return SkinnyTiles(block_n=64 if n >= 6144 else 32, block_k=256)
    if rows <= 32:
        if n <= 1024 and k >= 3072:
            return SkinnyTiles(block_n=32, block_k=256, split_k=4, block_m=32)
        if n <= 2048:
            return SkinnyTiles(block_n=16, block_k=512, block_m=32)
    return None


_workspaces: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _workspace(device: torch.device, n: int, tiles: SkinnyTiles) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 split-K partials and the tickets (one per slab, then the norm's), one pair per (device,
    N, tiles), kept for the process: a CUDA graph captures their addresses, and the counters reset
    themselves. Calls on one stream (the decode walk) run one after another, so one pair per shape
    is enough."""
    key = (device, n, tiles)
    if key not in _workspaces:
        parts = torch.empty(max(tiles.split_k, 1) * tiles.block_m * n, dtype=torch.float32, device=device)
        counters = torch.zeros(triton.cdiv(n, tiles.block_n) + 1, dtype=torch.int32, device=device)
        _workspaces[key] = (parts, counters)
    return _workspaces[key]


@dataclass
class NormAfter:
    """What `skinny_linear` normalises after the GEMM: (normed, sum) = (weight * RMSNorm(out +
    residual), out + residual), written to `normed` and `total`."""

    weight: torch.Tensor
    eps: float
    residual: torch.Tensor | None
    normed: torch.Tensor
    total: torch.Tensor


def skinny_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    tiles: SkinnyTiles,
    out: torch.Tensor | None = None,
    swiglu: bool = False,
    norm: NormAfter | None = None,
) -> torch.Tensor:
    """The weight-streaming kernel with the given tiles (the sweep calls this directly). swiglu:
    `weight` is [gate; up] and the result silu(x @ gate^T) * (x @ up^T), without split-K. norm:
    also the RMSNorm after it (see NormAfter), by the last program to finish."""
    (m, k), n = x.shape, weight.shape[0]
    if swiglu:
        if tiles.split_k > 1:
            raise ValueError("the SwiGLU epilogue needs whole K per program (split_k=1)")
        n //= 2
    if x.stride(1) != 1:
        x = x.contiguous()
    if m > tiles.block_m:
        raise ValueError(f"these tiles hold at most {tiles.block_m} rows (SkinnyTiles.block_m), got {m}")
    if out is None:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    parts = counters = out  # unused placeholders when the K loop is not split and nothing follows
    if tiles.split_k > 1 or norm is not None:
        parts, counters = _workspace(x.device, n, tiles)
    res = nw = normed = total = out
    eps = 0.0
    if norm is not None:
        nw, eps, normed, total = norm.weight, norm.eps, norm.normed, norm.total
        res = norm.residual if norm.residual is not None else out
    _skinny_linear_kernel[(triton.cdiv(n, tiles.block_n), tiles.split_k)](
        x, weight, out, parts, counters, m, n, x.stride(0), res, nw, normed, total, eps, k, BLOCK_M=tiles.block_m,
        BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, SPLIT_K=tiles.split_k,
        K_PER_SPLIT=triton.cdiv(triton.cdiv(k, tiles.block_k), tiles.split_k) * tiles.block_k, SWIGLU=swiglu,
        NORM=norm is not None, HAS_RES=norm is not None and norm.residual is not None,
        NORM_ROWS=NORM_ROWS, NORM_BLOCK=triton.next_power_of_2(n), num_warps=tiles.warps, num_stages=tiles.stages,
        **pdl_launch(x),
    )  # fmt: skip
    return out


def linear(x: torch.Tensor, weight: torch.Tensor, force: bool = False) -> torch.Tensor:
    """x @ weight^T; bf16/fp16 through the weight-streaming kernel where `skinny_tiles` has tiles for
    the shape and row count, the rest (and fp32, which tensor cores would round to TF32) through
    cuBLAS. `force`: the kernel whatever the dtype (tests), with the 16-row tiles up to 16 rows."""
    m, k = x.shape
    tiles = skinny_tiles(weight.shape[0], k, m)
    if force:
        return skinny_linear(x, weight, tiles or skinny_tiles(weight.shape[0], k))
    if tiles is None or x.dtype not in (torch.bfloat16, torch.float16):
        return torch.nn.functional.linear(x, weight)
    return skinny_linear(x, weight, tiles)


def linear_rms_norm(
    x: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm(x @ weight^T, norm_weight, eps, residual): one weight-streaming kernel where `linear`
    would stream the GEMM (its last program to finish runs rms_norm's rows: the same bits), else
    the GEMM then `rms_norm`."""
    m, k = x.shape
    n = weight.shape[0]
    tiles = skinny_tiles(n, k, m)
    # The norm's rows are laid out by the launch's warps: as rms_norm's kernel (4) to give its bits.
    if tiles is None or x.dtype not in (torch.bfloat16, torch.float16) or tiles.warps != 4:
        return rms_norm(linear(x, weight), norm_weight, eps, residual)
    normed = torch.empty(m, n, dtype=x.dtype, device=x.device)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    total = torch.empty_like(out) if residual is not None else out
    skinny_linear(x, weight, tiles, out, norm=NormAfter(norm_weight, eps, residual, normed, total))
    return normed, total
