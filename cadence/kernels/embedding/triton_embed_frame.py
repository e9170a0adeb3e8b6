"""A frame's embedding as one Triton kernel (reference.embed_frame): the 16 codebooks' rows gathered
from one stacked table and summed in codebook order in fp32, rounded once, then the text track added
in the activation dtype, instead of 16 lookups, a stack and a sum."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..launch.pdl import pdl_launch
from ..launch.triton_pdl import pdl_entry


@triton.jit
def _embed_frame_kernel(codes_ptr, off_ptr, table_ptr, plus_ptr, out_ptr, H, codes_stride, G: tl.constexpr,
                        BLOCK: tl.constexpr, HAS_PLUS: tl.constexpr, USE_PDL: tl.constexpr):  # fmt: skip
    pdl_entry(USE_PDL)
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < H
    acc = tl.zeros([BLOCK], tl.float32)
    for j in tl.static_range(G):  # in codebook order, in fp32, as the eager sum accumulates
        idx = (tl.load(codes_ptr + row * codes_stride + j) + tl.load(off_ptr + j)).to(tl.int64)
        acc += tl.load(table_ptr + idx * H + cols, mask=mask, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    x = acc.to(dtype)  # rounded once, then the text track added in the activation dtype
    if HAS_PLUS:
        x = (x.to(tl.float32) + tl.load(plus_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)).to(dtype)
    tl.store(out_ptr + row * H + cols, x, mask=mask)


def embed_frame(
    codes: torch.Tensor, table: torch.Tensor, offsets: torch.Tensor, plus: torch.Tensor | None = None
) -> torch.Tensor:
    b, g = codes.shape
    h = table.shape[1]
    out = torch.empty(b, h, dtype=table.dtype, device=table.device)
    block = 512
    _embed_frame_kernel[(b, triton.cdiv(h, block))](
        codes, offsets, table, out if plus is None else plus, out, h, codes.stride(0), G=g, BLOCK=block,
        HAS_PLUS=plus is not None, **pdl_launch(table),
    )  # fmt: skip
    return out
