"""Model packages. Each declares its config, modules (named like checkpoint keys), partitions and a
frontend, and registers itself here: one line per family (registry.py says what a family gives)."""

from .qwen3_tts.family import QWEN3_TTS
from .registry import register

register(QWEN3_TTS)
