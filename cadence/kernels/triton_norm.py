"""RMSNorm (+ residual) in Triton: a kernel of its own, and the same rows as a device function that
the weight-streaming GEMM runs in whichever of its programs finishes last (`linear_rms_norm`), so
the two compute the same bits and the walk saves a kernel per norm."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_launch import pdl_entry, pdl_launch

NORM_ROWS = 4  # rows per program of the kernel, and per step of the GEMM's last program


@triton.jit
def rms_norm_rows(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, r0, M, n_cols, eps, HAS_RES: tl.constexpr,
                  ROWS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Rows r0 .. r0 + ROWS (those < M) of x (+ res, stored to sum): w * RMSNorm, to out. Math in
    fp32, rounded where PyTorch's eager RMSNorm rounds. x is read through L2 (.cg): in the GEMM
    other programs wrote it."""
    rows = r0 + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < n_cols)
    offs = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")
    if HAS_RES:
        x = (x.to(tl.float32) + tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(sum_ptr + offs, x, mask=mask)
    x32 = x.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=1) / n_cols + eps)
    normed = (x32 * inv[:, None]).to(x.dtype).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (w[None, :] * normed).to(x.dtype), mask=mask)


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, M, n_cols, eps, HAS_RES: tl.constexpr,
                     ROWS: tl.constexpr, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):  # fmt: skip
    pdl_entry(USE_PDL)
    r0 = tl.program_id(0) * ROWS
    rms_norm_rows(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, r0, M, n_cols, eps, HAS_RES, ROWS, BLOCK)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight * RMSNorm(x + residual), x + residual); residual None means just x."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    out = torch.empty_like(x2)
    total = torch.empty_like(x2) if residual is not None else x2
    res = residual.reshape(-1, shape[-1]) if residual is not None else x2
    m = x2.shape[0]
    _rms_norm_kernel[(triton.cdiv(m, NORM_ROWS),)](
        x2, res, weight, out, total, m, shape[-1], eps, HAS_RES=residual is not None, ROWS=NORM_ROWS,
        BLOCK=triton.next_power_of_2(shape[-1]), num_warps=4, **pdl_launch(x),
    )  # fmt: skip
    return out.view(shape), total.view(shape)
