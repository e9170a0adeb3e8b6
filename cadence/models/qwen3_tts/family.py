"""Qwen3-TTS as a registered model family (cadence/models/registry.py). No torch: the runtime loader
imports the model only when the engine process calls it, the voice encoder's only when a Base
server calls it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...checkpoints import resolve_checkpoint
from ...engine.process_config import ModelSource
from ..registry import ModelFamily
from .builtin import find_architecture
from .config import SUPPORTED_MODEL_TYPES
from .frontend import CHECKPOINT_PATTERNS, Qwen3TTSFrontend

if TYPE_CHECKING:
    from .runtime import Qwen3TTS
    from .voice_encoder import VoiceEncoder

NAME = "qwen3_tts"


def accepts(config: dict[str, Any]) -> bool:
    """A Qwen3-TTS checkpoint's config.json."""
    return config.get("model_type") == NAME or config.get("tts_model_type") in SUPPORTED_MODEL_TYPES


def locate(model: str, random_preset: str | None) -> ModelSource:
    """A checkpoint directory (a hub id's files downloaded once, with a progress bar), or with
    `random_preset` the architecture of `model` shrunk by it (builtin.find_architecture: the
    released names work offline)."""
    if random_preset is not None:
        return ModelSource(NAME, model, random=find_architecture(model).shrink(random_preset))
    return ModelSource(NAME, model, checkpoint=str(resolve_checkpoint(model, CHECKPOINT_PATTERNS)))


def load_frontend(source: ModelSource) -> Qwen3TTSFrontend:
    if source.random is not None:
        return source.random.frontend(source.tokenizer_regex)
    return Qwen3TTSFrontend.from_pretrained(source.checkpoint, source.tokenizer_regex)


def load_runtime(source: ModelSource) -> Qwen3TTS:
    if source.random is not None:
        return source.random.random_model(source.device, source.dtype, source.tokenizer_regex, source.seed)
    from .runtime import Qwen3TTS  # torch: the engine process only

    return Qwen3TTS.from_pretrained(source.checkpoint, source.device, source.dtype, source.tokenizer_regex)


def load_voice_encoder(source: ModelSource, device: str) -> VoiceEncoder:
    """A Base checkpoint's voice encoders, or random ones of its architecture (--dummy-weights)."""
    from .voice_encoder import VoiceEncoder  # torch: only a Base server loads it

    if source.random is not None:
        return VoiceEncoder.random(source.random.parse(), source.seed, device)
    return VoiceEncoder.from_pretrained(source.checkpoint, device)


QWEN3_TTS = ModelFamily(NAME, accepts, locate, load_frontend, load_runtime, load_voice_encoder)
