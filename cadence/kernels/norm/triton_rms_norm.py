"""RMSNorm with the residual add before it (Triton), alone or as the second half of a layer's o or
down projection: where that GEMM splits K, its programs leave their fp32 partials and the norm
kernel adds them in split order (`linear_rms_norm`), so the GEMM ends without a ticket and its last
program's serial sum. Before its PDL wait the kernel may pull the next layer's cached keys and values
into L2 (kv_prefetch.py)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..launch.pdl import pdl_launch
from ..launch.triton_pdl import pdl_trigger, pdl_wait
from ..linear.dispatch import linear
from ..linear.triton_streaming_gemm import GemmTiles, streaming_gemm_partials, streaming_tiles
from .kv_prefetch import KvPrefetch
from .triton_kv_prefetch import prefetch_args, prefetch_kv_pages


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, n_cols, part_stride, eps, HAS_RES: tl.constexpr,
                     PARTS: tl.constexpr, BLOCK: tl.constexpr, USE_PDL: tl.constexpr, kc_ptr=None, vc_ptr=None,
                     bt_ptr=None, ctx_ptr=None, bt_stride=0, num_pages=1, KV_TOKENS: tl.constexpr = 0,
                     KV_SLOTS: tl.constexpr = 32, PS: tl.constexpr = 1, TOKEN_ELEMS: tl.constexpr = 1):  # fmt: skip
    """PARTS > 0: x is a split-K GEMM's fp32 partials ([PARTS, rows, n_cols], `part_stride` apart),
    added in split order and rounded as the GEMM's own last program would: the same x, bit for bit.

    KV_TOKENS > 0 (kv_prefetch.py): before its wait for the kernel before, program `row` pulls the
    first KV_TOKENS cached tokens of decode row `row`'s pages in one layer's caches into L2, a page of
    keys and one of values a thread (KV_SLOTS threads).

    The norm's weight is loaded before the wait: weights never change, so they need not wait for the
    kernel before; loaded after it, ptxas leaves their load behind the sum of squares' barriers, one
    more L2 round trip on every norm's critical path."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    pdl_trigger(USE_PDL)
    if KV_TOKENS:
        prefetch_kv_pages(kc_ptr, vc_ptr, bt_ptr, ctx_ptr, row, bt_stride, num_pages, KV_TOKENS, KV_SLOTS, PS,
                          TOKEN_ELEMS)  # fmt: skip
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    pdl_wait(USE_PDL)
    if PARTS:
        total = tl.zeros([BLOCK], dtype=tl.float32)
        for s in tl.static_range(PARTS):
            total += tl.load(x_ptr + s * part_stride + row * n_cols + cols, mask=mask, other=0.0)
        x = total.to(out_ptr.dtype.element_ty)
    else:
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    if HAS_RES:
        x = (x.to(tl.float32) + tl.load(res_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(sum_ptr + row * n_cols + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=0) / n_cols + eps)
    normed = (x32 * inv).to(x.dtype).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (w * normed).to(x.dtype), mask=mask)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    prefetch: KvPrefetch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """prefetch: a layer's cached keys and values to pull into L2 for x's rows (decode rows), a hint."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    out = torch.empty_like(x2)
    total = torch.empty_like(x2) if residual is not None else x2
    _launch_rms_norm(x2, 0, weight, eps, residual, out, total, prefetch)
    return out.view(shape), total.view(shape)


# The norm that adds split-K partials runs 8 warps: a row's 16 KB of partials over twice the threads
# (16 warps are no faster). Its sum of squares then adds in another order than the 4-warp kernel's,
# so its rounding may differ from the two-kernel path's in the last bit.
PARTS_NORM_WARPS = 8


def _launch_rms_norm(x, parts: int, weight, eps: float, residual, out: torch.Tensor, total: torch.Tensor,
                     prefetch: KvPrefetch | None = None) -> None:  # fmt: skip
    """out (and total, with a residual) for out's rows; x [rows, n] or, with parts, [parts, tile rows, n] fp32."""
    rows, n = out.shape
    res = residual.reshape(rows, n) if residual is not None else out
    warps = PARTS_NORM_WARPS if parts else 4
    _rms_norm_kernel[(rows,)](
        x, res, weight, out, total, n, x[0].numel() if parts else 0, eps, HAS_RES=residual is not None, PARTS=parts,
        BLOCK=triton.next_power_of_2(n), num_warps=warps, **pdl_launch(out), **prefetch_args(prefetch, rows, warps),
    )  # fmt: skip


def linear_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None,
    force: bool = False,
    prefetch: KvPrefetch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """rms_norm(linear(x, weight), norm_weight, eps, residual): a decoder layer's o or down
    projection and the norm after it. Where the GEMM splits K (o_proj and down_proj up to 64 rows),
    its programs only store their fp32 partials and the norm kernel adds them in split order, so
    the GEMM ends without a ticket and its last program's serial sum. The rows' sum (x + residual)
    is the same bits as the two kernels'; the normalised rows may differ in the last bit, as the
    norm's reduction runs over 8 warps there (PARTS_NORM_WARPS). Without a residual (every layer
    has one) the two kernels. force: the weight-streaming GEMM for fp32 too (tests; `linear` routes
    fp32 to cuBLAS). prefetch: as rms_norm's."""
    tiles = _partials_tiles(x, weight, residual, force)
    if tiles is None:
        return rms_norm(linear(x, weight, force=force), norm_weight, eps, residual, prefetch)
    parts = streaming_gemm_partials(x, weight, tiles)
    out = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    total = torch.empty_like(out)
    _launch_rms_norm(parts, tiles.split_k, norm_weight, eps, residual, out, total, prefetch)
    return out, total


def _partials_tiles(x, weight, residual, force: bool = False) -> GemmTiles | None:
    """The tiles of x @ weight^T where its programs leave their split-K partials for the kernel after
    it to add (the norm kernel), or None: the GEMM not split over
    K, or no residual (every layer has one)."""
    tiles = streaming_tiles(x, weight, force)
    if tiles is None or tiles.split_k == 1 or residual is None:
        return None
    return tiles
