"""The Python API's Engine: the in-process engine (cadence/engine/engine.py) that also loads a model
by name, through the model registry.

    engine = Engine.from_pretrained("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    utterance = engine.synthesize_blocking(SynthesisRequest("Hello!", voice="ryan"))
"""

from __future__ import annotations

import os

from .engine import engine
from .engine.config import EngineConfig
from .models import registry


class Engine(engine.Engine):
    @classmethod
    def from_pretrained(
        cls,
        model: str | os.PathLike,
        device: str | None = "auto",
        dtype: str | None = "auto",
        tokenizer_regex: str = "qwen2",
        config: EngineConfig | None = None,
    ) -> Engine:
        """A checkpoint directory or Hugging Face id (downloaded on first use), loaded by the model
        family that reads it, under an engine sized by `config`."""
        source = registry.model_source(
            str(model), device=device or "auto", dtype=dtype or "auto", tokenizer_regex=tokenizer_regex
        )
        return cls(registry.load_runtime(source), config)
