"""Qwen3-TTS 12 Hz (CustomVoice): config, Talker and Codec modules, prompts, reference generation."""

from .config import ConfigError, Qwen3TTSConfig, UnsupportedModelError
from .model import Qwen3TTS
from .prompt import Prompt, TextLayout
from .sampling import SamplingParams

__all__ = [
    "ConfigError",
    "Prompt",
    "Qwen3TTS",
    "Qwen3TTSConfig",
    "SamplingParams",
    "TextLayout",
    "UnsupportedModelError",
]
