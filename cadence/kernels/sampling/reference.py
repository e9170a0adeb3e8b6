"""Batched logits processing and sampling with per-row parameters held in tensors.

The same arithmetic as the reference (`models/qwen3_tts/sampling.py`, transformers' order), but
every parameter is a [B] tensor gathered from slot-indexed state, so one call serves a batch of
requests with different settings and needs no per-request Python work. Sampling is Gumbel-max
with counter-based noise (`rng.py`): argmax(warped logits + noise) draws from softmax(warped).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .rng import gumbel

NEG_INF = -float("inf")


@dataclass
class RowParams:
    """Per-row sampling parameters, each a [B] tensor on the logits' device."""

    do_sample: torch.Tensor  # bool
    temperature: torch.Tensor  # float
    top_k: torch.Tensor  # long, 0 = off
    top_p: torch.Tensor  # float, 1.0 = off

    def take(self, rows: torch.Tensor) -> RowParams:
        """The parameters of table rows `rows` (e.g. a batch's slots)."""
        return RowParams(self.do_sample[rows], self.temperature[rows], self.top_k[rows], self.top_p[rows])


def repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Penalise every id already generated once (HF semantics). seen [B,V] bool, penalty [B]."""
    p = penalty[:, None]
    return torch.where(seen, torch.where(logits < 0, logits * p, logits / p), logits)


def mask_control_tokens(logits: torch.Tensor, eos_id: int, suppress_start: int, ban_eos: torch.Tensor) -> torch.Tensor:
    """code0 ids >= suppress_start are control tokens: banned, except EOS unless `ban_eos` [B]."""
    v = logits.shape[-1]
    col = torch.arange(v, device=logits.device)[None, :]
    banned = (col >= suppress_start) & (col != eos_id)
    banned = banned | ((col == eos_id) & ban_eos[:, None])
    return logits.masked_fill(banned, NEG_INF)


def warp(logits: torch.Tensor, params: RowParams) -> torch.Tensor:
    """Temperature, top-k (ties at the k-th value kept), top-p; per row."""
    v = logits.shape[-1]
    logits = logits / params.temperature[:, None]
    k = params.top_k.clamp(min=0)
    use_k = (k > 0) & (k < v)
    desc = logits.sort(dim=-1, descending=True).values
    kth = desc.gather(1, (k.clamp(min=1, max=v) - 1)[:, None])
    logits = torch.where(use_k[:, None] & (logits < kth), NEG_INF, logits)
    asc, order = logits.sort(dim=-1, descending=False)
    cumulative = asc.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1.0 - params.top_p)[:, None]
    remove[:, -1] = False  # always keep the most likely token
    remove = remove & (params.top_p < 1.0)[:, None]
    return logits.masked_fill(remove.scatter(1, order, remove), NEG_INF)


def sample(
    logits: torch.Tensor, params: RowParams, seed: torch.Tensor, frame: torch.Tensor, codebook: int
) -> torch.Tensor:
    """Greedy rows take the argmax; sampling rows Gumbel-max over the warped logits. -> [B] long."""
    greedy = logits.argmax(dim=-1)
    noisy = warp(logits, params) + gumbel(seed, frame, codebook, logits.shape[-1])
    return torch.where(params.do_sample, noisy.argmax(dim=-1), greedy)
