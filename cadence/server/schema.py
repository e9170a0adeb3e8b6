"""POST /v1/audio/speech bodies: decoding (msgspec), validation, and the engine request they become.

Everything is checked here, in the API process, before anything reaches the engine: a bad value
is a 400 naming the field and the values it may take. Unknown fields are ignored, as OpenAI does.
The fields every model shares are checked here; the model's frontend (cadence/models/interfaces.py)
resolves the voice and checks the rest as it builds its request.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from ..engine.request import EngineRequest, RequestTooLargeError
from ..errors import InvalidRequestError
from ..models.interfaces import ClonedVoice, Frontend, ModelCapabilities, Speech
from ..sampling import SamplingOverrides
from . import errors as E
from .audio_encoders import FORMATS, SPEED_RANGE
from .long_form import Piece, piece_seed
from .segmenter import long_form_pieces
from .voices import OPENAI_VOICES, VoiceTable

OPENAI_VOICE_NAMES = frozenset(OPENAI_VOICES)

STREAM_FORMATS = ("audio", "sse")
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # accepted so unmodified OpenAI clients work


class VoiceRef(msgspec.Struct):
    """OpenAI's object form of `voice`: {"id": "..."}."""

    id: str


class SpeechBody(SamplingOverrides, kw_only=True):
    """OpenAI's speech request, with cadence's extensions; the sampling fields (seed, temperature,
    top_k, ..., max_new_tokens) are SamplingOverrides'."""

    input: str
    voice: str | VoiceRef | None = None  # required by custom_voice; base: a saved voice
    model: str | None = None
    instructions: str | None = None
    response_format: str = "mp3"  # OpenAI's default
    speed: float = 1.0
    stream_format: str = "audio"
    # Extensions.
    stream: bool = True  # false: answer once the whole utterance exists, with usage headers
    language: str | None = None
    ignore_eos: bool = False  # exactly max_new_tokens frames (benchmarking)
    # Voice cloning (base checkpoints): reference audio as base64 or a data: URL (or an uploaded
    # file: multipart), its transcript, and the mode (None: in-context when the transcript is known).
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None


@dataclass(frozen=True)
class Limits:
    max_input_chars: int
    max_input_tokens: int
    model_names: tuple[str, ...]  # what `model` may say (besides nothing)
    max_new_tokens: int = 12800  # the engine's max_seq_tokens: no request is longer
    piece_chars: int = 0  # a longer input is spoken as pieces of at most this many characters (0: never)


@dataclass
class SpeechJob:
    """A validated speech request: what to synthesise and how to deliver it."""

    request: EngineRequest
    text: str
    voice: str  # the preset, the saved voice's name, "ref_audio" (inline clone) or "designed"
    response_format: str
    speed: float
    stream_format: str
    stream: bool
    instructions_ignored: bool
    pieces: list[Piece] = field(default_factory=list)  # long-form input: its pieces, in order (else one request)
    prompt_parts: dict[str, int] = field(default_factory=dict)  # the first request's (Frontend.prompt_parts)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def input_tokens(self) -> int:
        if self.pieces:
            return sum(p.request.prompt.num_text_tokens for p in self.pieces)
        return self.request.prompt.num_text_tokens

    def too_large(self, e: RequestTooLargeError) -> E.APIError:
        """The engine's refusal of a request that can never fit its KV cache, naming what to shorten:
        the frame budget, or the largest part of a prompt that does not fit on its own."""
        if not e.prompt_too_long:
            return E.bad_request(f"{e}; lower max_new_tokens", "max_new_tokens")
        parts = self.prompt_parts or {"input": self.request.prompt.num_text_tokens}
        param = max(parts, key=parts.__getitem__)
        return E.too_large(f"{e}; shorten {param}", param)


_PATH = re.compile(r"at `\$\.([A-Za-z_][A-Za-z0-9_]*)")
_MISSING = re.compile(r"missing required field `([^`]+)`")


def decode_json(raw: bytes | str, type_: type[msgspec.Struct], what: str = "body") -> msgspec.Struct:
    """JSON -> the struct, or a 400 saying what was wrong and where (`what`: "body", "message")."""
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as e:
        text = str(e)
        missing = _MISSING.search(text)
        if missing:
            raise E.bad_request(
                f"missing required field '{missing.group(1)}'", missing.group(1), "missing_field"
            ) from None
        path = _PATH.search(text)
        raise E.bad_request(f"invalid {what}: {text}", path.group(1) if path else None, "invalid_type") from None
    except msgspec.DecodeError as e:
        raise E.bad_request(f"the {what} is not valid JSON: {e}", None, "invalid_json") from None
    except RecursionError:  # arrays or objects nested thousands deep, in any field
        raise E.bad_request(f"the {what} is nested too deeply", None, "invalid_json") from None


def validate_speech(
    body: SpeechBody,
    frontend: Frontend,
    voices: VoiceTable,
    limits: Limits,
    request_id: str | None = None,
    clone: ClonedVoice | None = None,
    tokens: Any = None,
    text_open: bool = False,
) -> SpeechJob:
    """Check every field; tokenise. Raises APIError (400, 404 unknown model, 413 input too long).
    `clone`: the analysed `ref_audio` of a request to a model that clones (the route decodes and
    encodes it first). `tokens`: `input`'s tokens, already known (text that arrives in pieces:
    TextInPieces.tokens); `text_open`: more of it follows (MoreTextNeeded while the prompt cannot
    be laid out yet)."""
    if body.model is not None and body.model not in limits.model_names:
        raise E.not_found(
            f"the model '{body.model}' does not exist; this server serves: {', '.join(limits.model_names)}",
            "model",
            "model_not_found",
        )
    text = body.input
    if not text.strip():
        raise E.bad_request("input is empty", "input", "empty_input")
    for name, value in (("input", text), ("instructions", body.instructions or "")):
        if len(value) > limits.max_input_chars:
            raise E.too_large(f"{name} is {len(value)} characters; the limit is {limits.max_input_chars}", name)
    response_format = body.response_format.lower()
    if response_format not in FORMATS:
        raise E.invalid(
            InvalidRequestError(f"unknown response_format '{body.response_format}'", "response_format", FORMATS)
        )
    stream_format = body.stream_format.lower()
    if stream_format not in STREAM_FORMATS:
        raise E.invalid(
            InvalidRequestError(f"unknown stream_format '{body.stream_format}'", "stream_format", STREAM_FORMATS)
        )
    lo, hi = SPEED_RANGE
    if not (lo <= body.speed <= hi):
        raise E.bad_request(f"speed must be between {lo} and {hi}, got {body.speed}", "speed")
    try:
        body.check_ranges(limits.max_new_tokens)
    except InvalidRequestError as e:
        raise E.invalid(e) from None
    if body.ignore_eos and body.max_new_tokens is None:
        raise E.bad_request("ignore_eos needs max_new_tokens (the number of frames to generate)", "max_new_tokens")
    capabilities = frontend.capabilities()
    speech = speech_of(body, capabilities, clone, request_id or new_request_id(), tokens, text_open)
    try:
        voice_name, voice = frontend.resolve_voice(speech, voices)
        request, pieces = engine_requests(speech, frontend, voice, limits)
    except InvalidRequestError as e:
        raise (E.too_large(e.message, e.param) if e.code == "request_too_large" else E.invalid(e)) from None
    return SpeechJob(
        request,
        text,
        voice_name,
        response_format,
        body.speed,
        stream_format,
        body.stream or stream_format == "sse",  # an event stream is a stream
        # instructions a model neither takes nor refused
        bool(body.instructions) and capabilities.instructions is None,
        pieces,
        frontend.prompt_parts(request.prompt),
    )


def speech_of(
    body: SpeechBody,
    capabilities: ModelCapabilities,
    clone: ClonedVoice | None,
    request_id: str,
    tokens: Any = None,
    text_open: bool = False,
) -> Speech:
    """The body as the model's frontend takes it (`tokens`, when given, stand for `input`)."""
    voice = body.voice.id if isinstance(body.voice, VoiceRef) else body.voice
    if voice and not capabilities.voices and not capabilities.clones_voices:
        # OpenAI clients must send a voice: a model without voices accepts their names and ignores them.
        voice = None if voice.strip().lower() in OPENAI_VOICE_NAMES else voice
    return Speech(
        body.input if tokens is None else tokens,
        voice=voice,
        clone=clone,
        ref_audio=body.ref_audio is not None,
        ref_text=body.ref_text,
        x_vector_only=body.x_vector_only_mode,
        language=body.language,
        instructions=body.instructions,
        sampling=body.overrides(),
        ignore_eos=body.ignore_eos,
        request_id=request_id,
        text_open=text_open,
    )


def engine_requests(
    speech: Speech, frontend: Frontend, voice: Any, limits: Limits
) -> tuple[EngineRequest, list[Piece]]:
    """The engine request of a validated speech in a resolved voice, or, for an input longer than
    `limits.piece_chars`, its pieces' (long_form.py) and the first piece's. Raises InvalidRequestError."""

    def prepared(text: Any, seed: int | None, rid: str) -> EngineRequest:
        piece = replace(speech, text=text, sampling={**speech.sampling, "seed": seed}, request_id=rid)
        return frontend.prepare(frontend.request(piece, voice), limits.max_input_tokens)

    seed, request_id = speech.sampling.get("seed"), speech.request_id
    if not isinstance(speech.text, str):  # tokens of text that arrives in pieces
        return prepared(speech.text, seed, request_id), []
    texts = long_form_pieces(speech.text, limits.piece_chars)
    if texts is None:
        return prepared(speech.text, seed, request_id), []
    pieces = [Piece(i, t, prepared(t, piece_seed(seed, i), f"{request_id}-{i}")) for i, t in enumerate(texts)]
    return pieces[0].request, pieces


def new_request_id() -> str:
    return f"speech-{uuid.uuid4().hex[:24]}"
