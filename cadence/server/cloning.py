"""Voice cloning in the API process (Base checkpoints): reference audio -> a cloned voice's prompt.

The voice encoders (speech-tokenizer encoder, speaker encoder) are small next to the talker and run
here, on the CPU by default, in worker threads so the event loop keeps serving; the engine only
ever receives prompts (codes and x-vector travel inside the request). A reference arrives inline
(`ref_audio`, base64, per request: decoded and encoded every time) or as a saved voice (encoded
once at upload, stored with its prompt: later requests pay nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..audio_input import AudioInputError, AudioLimits, AudioTooLargeError, decode_audio
from ..models.qwen3_tts.config import Qwen3TTSConfig
from ..models.qwen3_tts.voice_clone import VoiceClonePrompt, VoiceEncoder
from . import errors as E
from .voice_library import VoiceLibrary

if TYPE_CHECKING:
    from .state import ServerState

log = logging.getLogger("cadence.server")

DEFAULT_VOICES_DIR = "~/.cache/cadence/voices"
ENCODE_CONCURRENCY = 2  # reference encodes at once; more wait (each uses every CPU core it can get)


@dataclass
class CloningSettings:
    voices_dir: str = DEFAULT_VOICES_DIR
    max_audio_bytes: int = AudioLimits.max_bytes
    max_audio_seconds: float = AudioLimits.max_seconds
    device: str = "cpu"

    @property
    def limits(self) -> AudioLimits:
        return AudioLimits(self.max_audio_bytes, self.max_audio_seconds)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`cadence serve` options for Base checkpoints."""
    d = CloningSettings()
    g = parser.add_argument_group("voice cloning (base checkpoints; docs/api.md)")
    g.add_argument("--voices-dir", default=d.voices_dir, help=f"where saved voices live (default {d.voices_dir})")
    g.add_argument(
        "--max-ref-audio-bytes", type=int, default=d.max_audio_bytes, help="largest reference audio, then 413"
    )
    g.add_argument(
        "--max-ref-audio-seconds",
        type=float,
        default=d.max_audio_seconds,
        help=f"longest reference audio, then 413 (default {d.max_audio_seconds:g})",
    )
    g.add_argument("--voice-encoder-device", default=d.device, help="device of the voice encoders (default cpu)")


def attach(state: ServerState, args: argparse.Namespace, checkpoint: Path | None) -> None:
    """Give a Base server its voice encoders and saved voices (`cadence serve`)."""
    config = state.frontend.config
    if config.tts_model_type != "base":
        return
    state.cloning = VoiceCloning.load(config, checkpoint, settings_from(args))
    state.voices.library = state.cloning.library
    log.info(
        "voice cloning: encoders on %s, saved voices in %s",
        state.cloning.encoder.device,
        state.cloning.library.directory,
    )


def settings_from(args: argparse.Namespace) -> CloningSettings:
    d = CloningSettings()
    return CloningSettings(
        getattr(args, "voices_dir", None) or d.voices_dir,
        getattr(args, "max_ref_audio_bytes", None) or d.max_audio_bytes,
        getattr(args, "max_ref_audio_seconds", None) or d.max_audio_seconds,
        getattr(args, "voice_encoder_device", None) or d.device,
    )


class VoiceCloning:
    """A Base server's cloning: the voice encoders, the saved voices, the reference-audio limits."""

    def __init__(self, encoder: VoiceEncoder, library: VoiceLibrary, limits: AudioLimits):
        self.encoder = encoder
        self.library = library
        self.limits = limits
        self._slots = asyncio.Semaphore(ENCODE_CONCURRENCY)

    @classmethod
    def load(
        cls, config: Qwen3TTSConfig, checkpoint: Path | None, settings: CloningSettings, seed: int = 0
    ) -> VoiceCloning:
        """From the checkpoint's files, or random weights of its architecture (--dummy-weights)."""
        if checkpoint is not None:
            encoder = VoiceEncoder.from_pretrained(checkpoint, settings.device)
        else:
            encoder = VoiceEncoder.random(config, seed, settings.device)
        library = VoiceLibrary(settings.voices_dir, config.talker.hidden_size)
        return cls(encoder, library, settings.limits)

    @property
    def max_base64_chars(self) -> int:
        return 4 * -(-self.limits.max_bytes // 3) + 64  # base64 of the largest audio, and a data: prefix

    async def analyze(self, data: bytes, ref_text: str | None, param: str) -> VoiceClonePrompt:
        """Encoded audio -> the voice's prompt; a 400 or 413 naming `param` when the audio will not do."""
        async with self._slots:
            try:
                return await asyncio.to_thread(self._analyze, data, ref_text)
            except AudioTooLargeError as e:
                raise E.too_large(str(e), param) from None
            except AudioInputError as e:
                raise E.bad_request(str(e), param, "invalid_audio") from None

    def _analyze(self, data: bytes, ref_text: str | None) -> VoiceClonePrompt:
        wav = decode_audio(data, self.encoder.sample_rate, self.limits)
        return self.encoder.encode(wav, ref_text)


_DATA_URL = re.compile(r"^data:[\w/.+-]*(;[\w=.+-]+)*;base64,", re.IGNORECASE)


def decode_base64_audio(text: str, param: str, max_chars: int) -> bytes:
    """`ref_audio`: base64, or a data URL (data:audio/wav;base64,...). URLs are not fetched."""
    if len(text) > max_chars:
        raise E.too_large(f"{param} is {len(text)} characters of base64; the limit is {max_chars}", param)
    body = _DATA_URL.sub("", text.strip(), count=1)
    if body.startswith(("http://", "https://", "file:")):
        raise E.bad_request(f"{param} must be base64 audio (or a data: URL); URLs are not fetched", param)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise E.bad_request(f"{param} is not valid base64", param, "invalid_audio") from None
