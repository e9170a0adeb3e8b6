"""Sampling parameters: the checkpoint's defaults (generation_config.json), a request's overrides.

Plain values, no torch: the API process validates them; the logits processing that applies them
is `logits.py` (the reference) and the engine's batched sampler.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ...errors import InvalidRequestError

MIN_NEW_TOKENS = 2  # the official generate() always bans EOS for the first two frames


@dataclass(frozen=True)
class SamplingParams:
    """A request's sampling, resolved; as a checkpoint's defaults (Qwen3TTSConfig.generation), what
    generation_config.json says, the official wrapper's hard defaults filling what it leaves out."""

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
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        """generation_config.json's sampling keys (a seed there is not a default: each request has its own)."""
        known = {f.name for f in fields(cls)} - {"seed"}
        return cls(**{k: v for k, v in data.items() if k in known and v is not None})

    @classmethod
    def from_defaults(cls, defaults: SamplingParams, **overrides) -> SamplingParams:
        """The checkpoint's defaults, then the caller's non-None overrides."""
        base = asdict(defaults)
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
