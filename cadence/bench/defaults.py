"""Defaults and conventions shared by the bench's modules and shown by its --help.

Kept free of heavy imports so that building cadence's argument parser stays fast.
"""

from __future__ import annotations

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
DEFAULT_SAMPLE_RATE = 24000  # OpenAI's `pcm`: 24 kHz, 16-bit signed little-endian, mono
MEASURABLE_FORMATS = ("pcm", "wav")  # compressed formats would need a decoder to count samples and find onsets

# Audible onset, as Nari Labs' harness defines it (peers.md §5): 20 ms windows every 10 ms whose
# DC-removed RMS is at least -45 dBFS for 2 consecutive windows. Silence and dither sit far below it.
AUDIBLE_DBFS = -45.0
AUDIBLE_WINDOW_MS = 20.0
AUDIBLE_HOP_MS = 10.0
AUDIBLE_CONSECUTIVE = 2

# ISO 639-1 codes -> the language names Qwen3-TTS servers take (cadence matches them case-insensitively).
LANGUAGE_NAMES = {
    "en": "English",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "pt": "Portuguese",
    "ru": "Russian",
}
