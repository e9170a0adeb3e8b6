"""Voice cloning in the API process (models that clone, such as Qwen3-TTS Base): reference audio ->
a cloned voice.

The model family's voice encoder (Qwen3-TTS: speech-tokenizer encoder and speaker encoder) is small
next to the model and runs here, on the CPU by default, in worker threads so the event loop keeps
serving; the engine only ever receives prompts (the cloned voice travels inside the request). A
reference arrives inline (`ref_audio`, base64, per request: decoded and encoded every time) or as a
saved voice (encoded once at upload, stored with its prompt: later requests pay nothing).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from ..audio_input import AudioInputError, AudioLimits, AudioTooLargeError, decode_audio
from ..models.interfaces import ClonedVoice, VoiceEncoder
from . import errors as E
from .voice_library import VoiceLibrary

log = logging.getLogger("cadence.server")

DEFAULT_VOICES_DIR = "~/.cache/cadence/voices"
ENCODE_CONCURRENCY = 2  # reference encodes at once; more wait (each uses every CPU core it can get)
CHARS_PER_TOKEN_BOUND = 8  # a transcript longer than this many characters a token is refused untokenised


@dataclass
class CloningSettings:
    voices_dir: str = DEFAULT_VOICES_DIR
    max_audio_bytes: int = AudioLimits.max_bytes
    max_audio_seconds: float = AudioLimits.max_seconds
    device: str = "cpu"
    # A transcript of 30 s of speech is ~100 tokens; the in-context prompt carries it on every request.
    max_ref_text_tokens: int = 512

    @property
    def limits(self) -> AudioLimits:
        return AudioLimits(self.max_audio_bytes, self.max_audio_seconds)


class VoiceCloning:
    """A cloning server's cloning: the voice encoder, the saved voices, the reference-audio limits."""

    def __init__(
        self, encoder: VoiceEncoder, library: VoiceLibrary, limits: AudioLimits, max_ref_text_tokens: int = 512
    ):
        self.encoder = encoder
        self.library = library
        self.limits = limits
        self.max_ref_text_tokens = max_ref_text_tokens
        # The model's tokenizer (`cadence serve` sets it: Frontend.count_tokens), for the transcript's
        # length in tokens.
        self.count_tokens: Callable[[str], int] = len
        # Requests carrying reference audio, from their first byte read to their analysis: each may
        # hold its audio in memory, so only so many at once; the rest wait unread on their socket.
        self.uploads = asyncio.Semaphore(4)
        self._slots = asyncio.Semaphore(ENCODE_CONCURRENCY)

    @classmethod
    def create(cls, encoder: VoiceEncoder, settings: CloningSettings) -> VoiceCloning:
        """With the saved voices of `settings.voices_dir` that fit the encoder's model."""
        library = VoiceLibrary(settings.voices_dir, encoder.width, encoder.load_voice)
        return cls(encoder, library, settings.limits, settings.max_ref_text_tokens)

    @property
    def max_base64_chars(self) -> int:
        return 4 * -(-self.limits.max_bytes // 3) + 64  # base64 of the largest audio, and a data: prefix

    @contextlib.asynccontextmanager
    async def upload_slot(self) -> AsyncIterator[None]:
        """Hold one of the concurrent-upload places while a reference is read and analysed."""
        async with self.uploads:
            yield

    async def analyze(self, data: bytes, ref_text: str | None, param: str) -> ClonedVoice:
        """Encoded audio -> the voice's prompt; a 400 or 413 naming `param` when the audio will not do,
        or `ref_text` when the transcript is too long. Decoding, encoding and tokenising run in a
        worker thread."""
        self._check_ref_text_chars(ref_text)
        async with self._slots:
            try:
                return await asyncio.to_thread(self._analyze, data, ref_text)
            except AudioTooLargeError as e:
                raise E.too_large(str(e), param) from None
            except AudioInputError as e:
                raise E.bad_request(str(e), param, "invalid_audio") from None

    def _check_ref_text_chars(self, ref_text: str | None) -> None:
        limit = self.max_ref_text_tokens * CHARS_PER_TOKEN_BOUND
        if ref_text is not None and len(ref_text) > limit:
            raise E.too_large(
                f"ref_text is {len(ref_text)} characters; the limit is {self.max_ref_text_tokens} tokens "
                f"(at most {limit} characters)",
                "ref_text",
            )

    def _analyze(self, data: bytes, ref_text: str | None) -> ClonedVoice:
        if ref_text is not None and (tokens := self.count_tokens(ref_text)) > self.max_ref_text_tokens:
            raise E.too_large(f"ref_text is {tokens} tokens; the limit is {self.max_ref_text_tokens}", "ref_text")
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
