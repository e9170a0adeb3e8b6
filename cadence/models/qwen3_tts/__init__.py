"""Qwen3-TTS 12 Hz (CustomVoice, Base, VoiceDesign): config, tokenizer, prompts, Talker and Codec
modules and partitions, reference generation.

Importing the package loads no torch: the API process uses its frontend (config, tokenizer,
prompts, sampling parameters). `Qwen3TTS`, the model the engine runs, is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import ConfigError, Qwen3TTSConfig, UnsupportedModelError
from .prompt import Prompt, TextLayout
from .sampling import SamplingParams

if TYPE_CHECKING:
    from .runtime import Qwen3TTS

__all__ = [
    "ConfigError",
    "Prompt",
    "Qwen3TTS",
    "Qwen3TTSConfig",
    "SamplingParams",
    "TextLayout",
    "UnsupportedModelError",
]


def __getattr__(name: str) -> Any:
    if name == "Qwen3TTS":
        return importlib.import_module(".runtime", __name__).Qwen3TTS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
