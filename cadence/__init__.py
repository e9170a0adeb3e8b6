"""cadence: a streaming text-to-speech server for the Qwen3-TTS 12 Hz models."""

__version__ = "0.1.0"
