"""Which kernel samples on a GPU: the CUDA sampler where it runs and takes the call's arguments,
else the Triton kernel (which converts any float logits as it loads them)."""

from __future__ import annotations

import torch

from .cuda_sampler import cuda_fits, cuda_sample_tokens, sampler_supported
from .spec import NEW_TOKENS, TokenOutputs, TokenSampling


def sample_tokens(logits: torch.Tensor, spec: TokenSampling, outputs: TokenOutputs = NEW_TOKENS) -> torch.Tensor:
    """reference.sample_tokens by the CUDA kernel where it runs, else by the Triton kernel."""
    if sampler_supported(logits.device) and cuda_fits(logits, spec, outputs):
        return cuda_sample_tokens(logits, spec, outputs)
    from .triton_sampler import sample_tokens as triton_sample_tokens

    return triton_sample_tokens(logits, spec, outputs)
