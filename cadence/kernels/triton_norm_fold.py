"""The RMSNorm between a decoder layer's GEMMs folded into them at 33-64 rows (perf-notes #110,
experiment switch CADENCE_NORM_FOLD=1): no norm kernel between two GEMMs.

Unfolded, o and down are split-K GEMMs whose programs leave fp32 partials, and a norm kernel adds
them, adds the residual and normalises (`triton_ops.linear_rms_norm`); the next GEMM (gate/up,
the next layer's qkv) reads its rows. Folded, the split GEMM's last program of each slab adds
the partials (a ticket), adds the residual's slab, stores that sum (the next residual) and each
row's sum of squares over its slab (`linear_add_residual`); the next GEMM's programs add those
sums up after their wait, and normalise each x tile before its dot (`normed_linear`), rounded
where rms_norm rounds. The sums of squares add in another order than the norm kernel's, so a
normalised value may differ from it in the last bit. The kernel is triton_linear's, with ADD_RES
and NORM_IN.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch
import triton

from .triton_linear import SkinnyTiles, _launch, _split_k_workspace, skinny_tiles

ENABLED = os.environ.get("CADENCE_NORM_FOLD", "0") == "1"
MIN_ROWS, MAX_ROWS = 33, 64  # the 64-row tiles of skinny_tiles
DTYPES = (torch.bfloat16, torch.float16)  # fp32 keeps cuBLAS's exact products (`linear`)


@dataclass
class PendingNorm:
    """Rows whose RMSNorm the next GEMM applies: `total` [m, n] (x + residual, the next residual)
    and each row's sum of squares in `squares` [slabs, block_m] fp32, one slab of `tiles` a row of it."""

    total: torch.Tensor
    squares: torch.Tensor
    tiles: SkinnyTiles


def split_tiles(n: int, k: int, m: int) -> SkinnyTiles | None:
    """The GEMM's tiles where it can end by adding the residual (`linear_add_residual`): a split K
    and a power-of-two count of slabs (the next GEMM adds their sums in one tl.arange)."""
    tiles = skinny_tiles(n, k, m)
    slabs = triton.cdiv(n, tiles.block_n) if tiles is not None else 0
    if tiles is None or tiles.split_k < 2 or slabs & (slabs - 1):
        return None
    return tiles


def fold_tiles(m: int, n: int, k: int, dtype: torch.dtype) -> SkinnyTiles | None:
    """The split GEMM's tiles where its norm folds into the next GEMM: ENABLED, 33-64 rows of
    DTYPES, and split_tiles."""
    if not ENABLED or not MIN_ROWS <= m <= MAX_ROWS or dtype not in DTYPES:
        return None
    return split_tiles(n, k, m)


def normed_tiles(n: int, k: int, m: int) -> SkinnyTiles | None:
    """The normalising GEMM's tiles: the plain GEMM's (unsplit) in 128-wide K steps, since
    normalising a [64, 256] tile in fp32 spilled (ptxas, `benchmarks/triton_ptxas.py`: 760 bytes a
    thread for qkv's tiles, none at 128)."""
    tiles = skinny_tiles(n, k, m)
    return None if tiles is None or tiles.split_k > 1 else dataclasses.replace(tiles, block_k=min(tiles.block_k, 128))


_squares: dict[tuple, torch.Tensor] = {}


def _squares_workspace(device: torch.device, n: int, tiles: SkinnyTiles) -> torch.Tensor:
    """Each row's sums of squares by slab, one buffer per shape for the process (a graph captures its
    address). The GEMM after reads it before the next GEMM of the same shape writes it: o's before
    down's (gate/up reads it between), down's before the next layer's o (qkv between)."""
    key = (device, n, tiles)
    if key not in _squares:
        _squares[key] = torch.zeros(triton.cdiv(n, tiles.block_n), tiles.block_m, dtype=torch.float32, device=device)
    return _squares[key]


def linear_add_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor) -> PendingNorm:
    """x @ weight^T + residual, rounded as rms_norm rounds the sum, and its rows' sums of squares by
    slab: the o or down projection of a layer whose next norm the next GEMM applies."""
    (m, k), n = x.shape, weight.shape[0]
    tiles = split_tiles(n, k, m)
    if tiles is None or residual.shape != (m, n):
        raise ValueError(f"linear_add_residual: residual {tuple(residual.shape)} for [{m}, {n}], tiles {tiles}")
    total = torch.empty(m, n, dtype=x.dtype, device=x.device)
    parts, counters = _split_k_workspace(x.device, n, tiles)
    squares = _squares_workspace(x.device, n, tiles)
    fold = {"res_ptr": residual.contiguous(), "ss_ptr": squares, "ADD_RES": True}
    _launch(x, weight, n, tiles, total, parts, counters, swiglu=False, reduce=True, fold=fold)
    return PendingNorm(total, squares, tiles)


def normed_linear(rows: PendingNorm, norm_weight: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """rms_norm(rows.total, norm_weight, eps) @ weight^T, the norm done by the GEMM's programs on the
    tiles they load (64-row tiles, no split)."""
    x = rows.total
    m, k = x.shape
    n = weight.shape[0]
    tiles = normed_tiles(n, k, m)
    if tiles is None or tiles.block_m != rows.tiles.block_m:
        raise ValueError(f"normed_linear: no unsplit {rows.tiles.block_m}-row tiles for [{n}, {k}] at {m} rows")
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    fold = {"ss_ptr": rows.squares, "nw_ptr": norm_weight, "eps": eps, "NORM_IN": True,
            "SS_BLOCKS": rows.squares.shape[0]}  # fmt: skip
    _launch(x, weight, n, tiles, out, out, out, swiglu=False, reduce=True, fold=fold)
    return out


def norm_fold_applies(m: int, qkv: tuple, o: tuple, gate_up: tuple, down: tuple, dtype: torch.dtype) -> bool:
    """Whether a decoder layer of these weight shapes ([n, k]) runs folded at m rows: o and down
    with fold tiles, qkv and gate/up with unsplit tiles of the same rows."""
    o_tiles, down_tiles = fold_tiles(m, *o, dtype), fold_tiles(m, *down, dtype)
    if o_tiles is None or down_tiles is None:
        return False
    for n, k in (qkv, gate_up):
        tiles = normed_tiles(n, k, m)
        if tiles is None or tiles.block_m != o_tiles.block_m:
            return False
    return True
