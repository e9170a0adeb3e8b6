"""POST /v1/audio/speech bodies: decoding (msgspec), validation, and the engine request they become.

Everything is checked here, in the API process, before anything reaches the engine: a bad value
is a 400 naming the field and the values it may take. Unknown fields are ignored, as OpenAI does.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import msgspec

from ..engine.engine import SynthesisRequest, prepare_request
from ..engine.request import EngineRequest
from ..errors import InvalidRequestError
from ..models.qwen3_tts.model import Qwen3TTSFrontend
from ..models.qwen3_tts.voice_clone import VoiceClonePrompt
from . import errors as E
from .audio_encoders import FORMATS, SPEED_RANGE
from .voices import OPENAI_VOICES, VoiceTable

OPENAI_VOICE_NAMES = frozenset(OPENAI_VOICES)

STREAM_FORMATS = ("audio", "sse")
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # accepted so unmodified OpenAI clients work
MAX_SEED = 2**63 - 1


class VoiceRef(msgspec.Struct):
    """OpenAI's object form of `voice`: {"id": "..."}."""

    id: str


class SpeechBody(msgspec.Struct, kw_only=True):
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
    seed: int | None = None
    temperature: float | None = None  # 0: greedy (every codebook unless subtalker_* say otherwise)
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    # The code predictor's sampling (codebooks 1-15), named as in the official package.
    subtalker_temperature: float | None = None  # 0: greedy
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    subtalker_dosample: bool | None = None
    max_new_tokens: int | None = None  # audio frames of 80 ms
    ignore_eos: bool = False  # exactly max_new_tokens frames (benchmarking)
    # Voice cloning (base checkpoints): reference audio as base64 or a data: URL (or an uploaded
    # file: multipart), its transcript, and the mode (None: in-context when the transcript is known).
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None


# The fields only some variants use, and the variant that does.
VARIANT_FIELDS = {"ref_audio": "base", "ref_text": "base", "x_vector_only_mode": "base"}


@dataclass(frozen=True)
class Limits:
    max_input_chars: int
    max_input_tokens: int
    model_names: tuple[str, ...]  # what `model` may say (besides nothing)


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

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def input_tokens(self) -> int:
        return self.request.prompt.num_text_tokens


_PATH = re.compile(r"at `\$\.([A-Za-z_][A-Za-z0-9_]*)")
_MISSING = re.compile(r"missing required field `([^`]+)`")


def decode_body(raw: bytes, type_: type[msgspec.Struct]) -> msgspec.Struct:
    """JSON bytes -> the struct, or a 400 saying what was wrong and where."""
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
        raise E.bad_request(f"invalid body: {text}", path.group(1) if path else None, "invalid_type") from None
    except msgspec.DecodeError as e:
        raise E.bad_request(f"the body is not valid JSON: {e}", None, "invalid_json") from None


def validate_speech(
    body: SpeechBody,
    frontend: Qwen3TTSFrontend,
    voices: VoiceTable,
    limits: Limits,
    request_id: str | None = None,
    clone: VoiceClonePrompt | None = None,
) -> SpeechJob:
    """Check every field; tokenise. Raises APIError (400, 404 unknown model, 413 input too long).
    `clone`: the analysed `ref_audio` of a Base request (the route decodes and encodes it first)."""
    if body.model is not None and body.model not in limits.model_names:
        raise E.not_found(
            f"the model '{body.model}' does not exist; this server serves: {', '.join(limits.model_names)}",
            "model",
            "model_not_found",
        )
    text = body.input
    if not text.strip():
        raise E.bad_request("input is empty", "input", "empty_input")
    if len(text) > limits.max_input_chars:
        raise E.too_large(f"input is {len(text)} characters; the limit is {limits.max_input_chars}", "input")
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
    if body.seed is not None and not (0 <= body.seed <= MAX_SEED):
        raise E.bad_request(f"seed must be between 0 and {MAX_SEED}, got {body.seed}", "seed")
    if body.max_new_tokens is not None and body.max_new_tokens < 1:
        raise E.bad_request(f"max_new_tokens must be >= 1, got {body.max_new_tokens}", "max_new_tokens")
    if body.ignore_eos and body.max_new_tokens is None:
        raise E.bad_request("ignore_eos needs max_new_tokens (the number of frames to generate)", "max_new_tokens")
    try:
        voice, preset, clone = resolve_voice(body, frontend, voices, clone)
        synthesis = SynthesisRequest(
            text,
            voice=preset,
            clone=clone,
            x_vector_only=body.x_vector_only_mode,
            language=body.language or "auto",
            instruct=body.instructions or None,
            temperature=body.temperature,
            top_k=body.top_k,
            top_p=body.top_p,
            repetition_penalty=body.repetition_penalty,
            subtalker_temperature=body.subtalker_temperature,
            subtalker_top_k=body.subtalker_top_k,
            subtalker_top_p=body.subtalker_top_p,
            subtalker_dosample=body.subtalker_dosample,
            max_new_tokens=body.max_new_tokens,
            seed=body.seed,
            ignore_eos=body.ignore_eos,
            request_id=request_id or new_request_id(),
        )
        # The token limit is checked below, as a 413 like the character limit.
        request = prepare_request(frontend, synthesis, max_input_tokens=1 << 62)
    except InvalidRequestError as e:
        raise E.invalid(e) from None
    tokens = request.prompt.num_text_tokens
    if tokens > limits.max_input_tokens:
        raise E.too_large(f"input is {tokens} tokens; the limit is {limits.max_input_tokens}", "input")
    return SpeechJob(
        request,
        text,
        voice,
        response_format,
        body.speed,
        stream_format,
        body.stream or stream_format == "sse",  # an event stream is a stream
        frontend.instruct_ignored(body.instructions),
    )


def resolve_voice(
    body: SpeechBody, frontend: Qwen3TTSFrontend, voices: VoiceTable, clone: VoiceClonePrompt | None
) -> tuple[str, str | None, VoiceClonePrompt | None]:
    """(name for logs, preset, cloned voice) as the checkpoint's variant takes a voice. Raises
    InvalidRequestError naming the field and, for a field this variant cannot use, the one that can."""
    kind = frontend.config.tts_model_type
    name = body.voice.id if isinstance(body.voice, VoiceRef) else body.voice
    for field, needs in VARIANT_FIELDS.items():
        if kind != needs and getattr(body, field) is not None:
            raise InvalidRequestError(f"{field} needs a {needs} checkpoint (voice cloning); this is {kind}", field)
    if kind == "custom_voice":
        if name is None:
            raise InvalidRequestError("missing required field 'voice'", "voice", code="missing_field")
        preset = voices.resolve(name)
        return preset, preset, None
    if kind == "voice_design":
        # OpenAI clients must send a voice; their names are accepted and ignored, anything else is
        # a preset this checkpoint does not have.
        if name and name.strip().lower() not in OPENAI_VOICE_NAMES:
            raise InvalidRequestError(
                f"a voice_design checkpoint has no voice '{name}': describe the voice in `instructions` "
                "(preset voices need a custom_voice checkpoint, cloned ones a base checkpoint)",
                "voice",
            )
        return "designed", None, None
    if body.ref_text is not None and body.ref_audio is None and clone is None:
        raise InvalidRequestError("ref_text goes with ref_audio; a saved voice has its own transcript", "ref_text")
    if clone is not None:
        if name:
            raise InvalidRequestError("give either ref_audio or a saved voice, not both", "voice")
        return "ref_audio", None, clone
    if not name:
        raise InvalidRequestError(
            "a base checkpoint speaks in a cloned voice: send ref_audio (and ref_text), or name a saved voice "
            "(POST /v1/audio/voices)",
            "voice",
        )
    saved = voices.saved(name)
    return saved.name, None, saved.prompt


def new_request_id() -> str:
    return f"speech-{uuid.uuid4().hex[:24]}"
