"""Sampling parameters and the official logits processing (transformers 4.57.3 order).

code0 (talker): repetition penalty over the generated code0s -> EOS banned for the first
`min_new_tokens` frames -> control tokens [vocab-1024, vocab) except EOS suppressed -> (sampling:)
temperature -> top-k -> top-p. Codes 1..15 (code predictor): temperature -> top-k -> top-p only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from ...errors import InvalidRequestError
from .config import GenerationDefaults

MIN_NEW_TOKENS = 2  # the official generate() always bans EOS for the first two frames


@dataclass(frozen=True)
class SamplingParams:
    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    # Audio frames (80 ms each). The official max_new_tokens=N yields at most N-1 frames.
    max_new_tokens: int = 2048
    seed: int | None = None

    @classmethod
    def from_defaults(cls, defaults: GenerationDefaults, **overrides) -> SamplingParams:
        """Checkpoint generation_config.json values, then the caller's non-None overrides."""
        base = {f.name: getattr(defaults, f.name) for f in fields(defaults)}
        base.update({k: v for k, v in overrides.items() if v is not None})
        params = cls(**base)
        params.validate()
        return params

    def greedy(self) -> SamplingParams:
        return replace(self, do_sample=False, subtalker_dosample=False)

    def validate(self) -> None:
        for prefix in ("", "subtalker_"):
            t = getattr(self, f"{prefix}temperature")
            k = getattr(self, f"{prefix}top_k")
            p = getattr(self, f"{prefix}top_p")
            if not (0.0 < t <= 10.0):
                raise InvalidRequestError(
                    f"{prefix}temperature must be 0 (greedy) or in (0, 10], got {t}", f"{prefix}temperature"
                )
            if not (0 <= k <= 100_000) or int(k) != k:
                raise InvalidRequestError(f"{prefix}top_k must be an integer >= 0 (0 = off), got {k}", f"{prefix}top_k")
            if not (0.0 < p <= 1.0):
                raise InvalidRequestError(f"{prefix}top_p must be in (0, 1], got {p}", f"{prefix}top_p")
        if not (0.0 < self.repetition_penalty <= 10.0):
            raise InvalidRequestError(
                f"repetition_penalty must be in (0, 10], got {self.repetition_penalty}", "repetition_penalty"
            )
        if self.max_new_tokens < 1:
            raise InvalidRequestError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}", "max_new_tokens")


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
