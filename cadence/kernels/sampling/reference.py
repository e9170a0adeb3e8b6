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
    """Logits processing (repetition penalty, control-token masks when given) then greedy or
    Gumbel-max sampling per row: the engine's sampler in one call. Logits of any float dtype are
    processed in fp32 (the Triton kernel converts them as it loads them: no copy kernel).

    `params`, `seed`, `frame` (the noise's frame counter), `seen`, `penalty` and `ban_eos` are per
    logits row, or with `rows` [n] tables that logits row i reads at row rows[i] (a walk passes the
    slot-indexed state and its slots: no gather kernels). EOS is banned where `ban_eos` is set or the
    frame counter is below `eos_min_frames`; `mark_seen` records each chosen token in `seen`.

    The tokens [n] go to `out` (a view, say a column of the frame) or a new tensor, which is
    returned; with `embed_table`, `embed_out` [n, H] receives each token's row of it (the next
    step's input embedding, gathered by the sampler instead of a lookup kernel)."""
    out = check_token_outputs(logits.shape[0], logits.device, out, embed_table, embed_out, seen, mark_seen)
    table_rows = rows if rows is not None else torch.arange(logits.shape[0], device=logits.device)
    params, seed, frame = params.take(table_rows), seed[table_rows], frame[table_rows]
    logits = logits.float()
    if seen is not None:
        logits = repetition_penalty(logits, seen[table_rows], penalty[table_rows])
    if ban_eos is not None:
        ban = ban_eos[table_rows] | (frame < eos_min_frames)
        logits = mask_control_tokens(logits, eos_id, suppress_start, ban)
    out.copy_(sample(logits, params, seed, frame, codebook))
    if mark_seen:
        seen[table_rows, out] = True
    if embed_table is not None:
        embed_out.copy_(embed_table[out])
    return out


def check_token_outputs(
    n: int,
    device: torch.device,
    out: torch.Tensor | None,
    embed_table: torch.Tensor | None,
    embed_out: torch.Tensor | None,
    seen: torch.Tensor | None = None,
    mark_seen: bool = False,
) -> torch.Tensor:
    """sample_tokens' outputs and code history checked (shapes, dtypes, unit inner stride for the
    kernels' row addressing; `seen` given where `mark_seen` writes it); returns the tokens' tensor,
    a new one when `out` is None."""
    if mark_seen and seen is None:
        raise ValueError("mark_seen records the tokens in seen: pass seen")
    if seen is not None and (seen.dtype != torch.bool or not seen.is_contiguous()):
        raise ValueError(f"seen must be a contiguous bool tensor, got {seen.dtype} strides {list(seen.stride())}")
    if out is None:
        out = torch.empty(n, dtype=torch.long, device=device)
    elif out.shape != (n,) or out.dtype != torch.long:
        raise ValueError(f"out must be a [{n}] long tensor, got {list(out.shape)} {out.dtype}")
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
