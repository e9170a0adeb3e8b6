"""cadence: a streaming text-to-speech server for the Qwen3-TTS 12 Hz models.

The Python API (docs/python.md):

    from cadence import Engine, SynthesisRequest

    engine = Engine.from_pretrained("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    utterance = engine.synthesize_blocking(SynthesisRequest("Hello!", voice="ryan"))

The names below are imported on first use, so `import cadence` (and `cadence --help`) loads
neither torch nor the model code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_EXPORTS = {
    "Engine": "cadence.pretrained",
    "SynthesisRequest": "cadence.models.qwen3_tts.frontend",
    "Utterance": "cadence.engine.engine",
    "EngineConfig": "cadence.engine.config",
    "ChunkPolicy": "cadence.engine.config",
    "RunawayGuard": "cadence.engine.config",
    "KernelConfig": "cadence.kernels.config",
    "AudioChunk": "cadence.engine.request",
    "FinishReason": "cadence.engine.request",
    "RunawayCause": "cadence.engine.request",
    "QueueFullError": "cadence.engine.request",
    "InvalidRequestError": "cadence.errors",
    "Qwen3TTS": "cadence.models.qwen3_tts.runtime",
    "VoiceEncoder": "cadence.models.qwen3_tts.voice_encoder",
    "write_wav": "cadence.audio",
}

__all__ = [
    "AudioChunk",
    "ChunkPolicy",
    "Engine",
    "EngineConfig",
    "FinishReason",
    "InvalidRequestError",
    "KernelConfig",
    "QueueFullError",
    "Qwen3TTS",
    "RunawayCause",
    "RunawayGuard",
    "SynthesisRequest",
    "Utterance",
    "VoiceEncoder",
    "__version__",
    "write_wav",
]

if TYPE_CHECKING:
    from .audio import write_wav
    from .engine.config import ChunkPolicy, EngineConfig, RunawayGuard
    from .engine.engine import Utterance
    from .engine.request import AudioChunk, FinishReason, QueueFullError, RunawayCause
    from .errors import InvalidRequestError
    from .kernels.config import KernelConfig
    from .models.qwen3_tts.frontend import SynthesisRequest
    from .models.qwen3_tts.runtime import Qwen3TTS
    from .models.qwen3_tts.voice_encoder import VoiceEncoder
    from .pretrained import Engine


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cadence' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
