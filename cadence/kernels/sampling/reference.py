"""Batched logits processing and sampling with per-row parameters held in tensors.

The same arithmetic as the reference (`models/qwen3_tts/sampling.py`, transformers' order), but
every parameter is a [B] tensor gathered from slot-indexed state, so one call serves a batch of
requests with different settings and needs no per-request Python work. Sampling is Gumbel-max
with counter-based noise (`rng.py`): argmax(warped logits + noise) draws from softmax(warped).
"""

from __future__ import annotations

import torch

from .rng import gumbel
from .spec import NEW_TOKENS, CodeHistory, RowParams, TokenOutputs, TokenSampling

NEG_INF = -float("inf")


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


def sample_tokens(logits: torch.Tensor, spec: TokenSampling, outputs: TokenOutputs = NEW_TOKENS) -> torch.Tensor:
    """Logits processing (the repetition penalty and the control-token mask where the spec has them)
    then greedy or Gumbel-max sampling per row: the engine's sampler in one call. Logits of any float
    dtype are processed in fp32 (the Triton kernel converts them as it loads them: no copy kernel).
    Returns the tokens (outputs.tokens, or a new tensor); spec.py says what each argument means."""
    out = check_token_outputs(logits.shape[0], logits.device, outputs, spec.history)
    rows = spec.rows if spec.rows is not None else torch.arange(logits.shape[0], device=logits.device)
    params, seed, frame = spec.params.take(rows), spec.seed[rows], spec.frame[rows]
    logits = logits.float()
    if (history := spec.history) is not None:
        logits = repetition_penalty(logits, history.seen[rows], history.penalty[rows])
    if (eos := spec.eos) is not None:
        ban = eos.ban[rows] | (frame < eos.min_frames)
        logits = mask_control_tokens(logits, eos.eos_id, eos.suppress_start, ban)
    out.copy_(sample(logits, params, seed, frame, spec.codebook))
    if history is not None and history.record:
        history.seen[rows, out] = True
    if outputs.embed_table is not None:
        outputs.embed_out.copy_(outputs.embed_table[out])
    return out


def check_token_outputs(
    n: int, device: torch.device, outputs: TokenOutputs, history: CodeHistory | None = None
) -> torch.Tensor:
    """sample_tokens' outputs and code history checked (shapes, dtypes, unit inner stride for the
    kernels' row addressing); returns the tokens' tensor, a new one when `outputs.tokens` is None."""
    seen = history.seen if history is not None else None
    out, embed_table, embed_out = outputs.tokens, outputs.embed_table, outputs.embed_out
    if seen is not None and (seen.dtype != torch.bool or not seen.is_contiguous()):
        raise ValueError(f"seen must be a contiguous bool tensor, got {seen.dtype} strides {list(seen.stride())}")
    if out is None:
        out = torch.empty(n, dtype=torch.long, device=device)
    elif out.shape != (n,) or out.dtype != torch.long:
        raise ValueError(f"outputs.tokens must be a [{n}] long tensor, got {list(out.shape)} {out.dtype}")
    if (embed_table is None) != (embed_out is None):
        raise ValueError("embed_table and embed_out go together")
    if embed_table is not None:
        shape = (n, embed_table.shape[1])
        if embed_out.shape != shape or embed_out.dtype != embed_table.dtype or embed_out.stride(-1) != 1:
            raise ValueError(
                f"embed_out must be {list(shape)} {embed_table.dtype} with unit inner stride, got "
                f"{list(embed_out.shape)} {embed_out.dtype} strides {embed_out.stride()}"
            )
        if not embed_table.is_contiguous():
            raise ValueError("embed_table must be contiguous")
    return out
