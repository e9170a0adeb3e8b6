"""A frame's embedding as PyTorch computes it: the definition of the Triton kernel (and the CPU path)."""

from __future__ import annotations

import torch


def embed_frame(
    codes: torch.Tensor, table: torch.Tensor, offsets: torch.Tensor, plus: torch.Tensor | None = None
) -> torch.Tensor:
    """The sum of a frame's G code embeddings, codes [B, G] into `table` (the G tables stacked,
    table j from row offsets[j]), reduced in one sum as `Talker.embed_frame` (one rounding in
    bf16); then `plus` [B, H] (the text track) added."""
    x = table[codes + offsets].sum(-2)
    return x if plus is None else x + plus
