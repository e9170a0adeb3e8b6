"""Which kernel samples on a GPU: the CUDA sampler where it runs and takes the call's arguments,
else the Triton kernel (which converts any float logits as it loads them)."""

from __future__ import annotations

import torch

from .cuda_sampler import cuda_fits, cuda_sample_tokens, sampler_supported
from .reference import RowParams


def sample_tokens(
    logits: torch.Tensor,
    params: RowParams,
    seed: torch.Tensor,
    frame: torch.Tensor,
    codebook: int,
    seen: torch.Tensor | None = None,
    penalty: torch.Tensor | None = None,
    ban_eos: torch.Tensor | None = None,
    eos_id: int = -1,
    suppress_start: int = -1,
    out: torch.Tensor | None = None,
    embed_table: torch.Tensor | None = None,
    embed_out: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
    eos_min_frames: int = 0,
    mark_seen: bool = False,
) -> torch.Tensor:
    """reference.sample_tokens (its docstring has the arguments) by the CUDA kernel where it runs,
    else by triton_sampler's."""
    args = (logits, params, seed, frame, codebook, seen, penalty, ban_eos, eos_id, suppress_start, out, embed_table,
            embed_out, rows, eos_min_frames, mark_seen)  # fmt: skip
    if sampler_supported(logits.device) and cuda_fits(logits, params, [seed, frame, rows, penalty, ban_eos],
                                                       embed_table, embed_out):  # fmt: skip
        return cuda_sample_tokens(*args)
    from .triton_sampler import sample_tokens as triton_sample_tokens  # noqa: PLC0415

    return triton_sample_tokens(*args)
