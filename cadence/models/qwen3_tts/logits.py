"""The official logits processing (transformers 4.57.3 order): the reference loop's oracle.

code0 (talker): repetition penalty over the generated code0s -> EOS banned for the first
`min_new_tokens` frames -> control tokens [vocab-1024, vocab) except EOS suppressed -> (sampling:)
temperature -> top-k -> top-p. Codes 1..15 (code predictor): temperature -> top-k -> top-p only.
The engine's batched sampler computes the same per row; the tests compare the two.
"""

from __future__ import annotations

import torch


def repetition_penalty(logits: torch.Tensor, history: torch.Tensor, penalty: float) -> torch.Tensor:
    """HF RepetitionPenaltyLogitsProcessor: every id seen in `history` [B,T] is penalised once."""
    if penalty == 1.0 or history.shape[1] == 0:
        return logits
    score = torch.gather(logits, 1, history)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return logits.scatter(1, history, score)


def mask_code0(logits: torch.Tensor, eos_id: int, suppress: tuple[int, int], ban_eos: bool) -> torch.Tensor:
    """Suppress control tokens except EOS, and EOS itself while `ban_eos`."""
    logits = logits.clone()
    start, end = suppress
    keep_eos = logits[:, eos_id].clone()
    logits[:, start:end] = -float("inf")
    logits[:, eos_id] = -float("inf") if ban_eos else keep_eos
    return logits


def warp(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Temperature, then top-k (ties at the k-th value kept, as HF), then top-p."""
    logits = logits / temperature
    if top_k > 0:
        k = min(top_k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -float("inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - top_p)
        remove_sorted[..., -1:] = False  # keep at least one
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        logits = logits.masked_fill(remove, -float("inf"))
    return logits


def choose(
    logits: torch.Tensor,
    do_sample: bool,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Greedy argmax or a multinomial draw from the warped distribution. logits [B,V] fp32 -> [B]."""
    if not do_sample:
        return logits.argmax(dim=-1)
    probs = warp(logits, temperature, top_k, top_p).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]
