"""POST /v1/audio/speech bodies: decoding (msgspec), validation, and the engine request they become.

Everything is checked here, in the API process, before anything reaches the engine: a bad value
is a 400 naming the field and the values it may take. Unknown fields are ignored, as OpenAI does.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

import msgspec

from ..engine.request import EngineRequest, RequestTooLargeError
from ..errors import InvalidRequestError
from ..models.qwen3_tts.frontend import Qwen3TTSFrontend, SynthesisRequest, prepare_request
from ..models.qwen3_tts.prompt import TextTokens
from ..models.qwen3_tts.voice_prompt import VoiceClonePrompt
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


# The fields only some variants use, and the variant that does.
VARIANT_FIELDS = {"ref_audio": "base", "ref_text": "base", "x_vector_only_mode": "base"}


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
        prompt = self.request.prompt
        parts = {
            "input": prompt.num_text_tokens,
            "ref_audio": len(prompt.ref_codes),
            "instructions": len(prompt) - prompt.num_text_tokens - len(prompt.ref_codes),
        }
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
    frontend: Qwen3TTSFrontend,
    voices: VoiceTable,
    limits: Limits,
    request_id: str | None = None,
    clone: VoiceClonePrompt | None = None,
    tokens: TextTokens | None = None,
    text_open: bool = False,
) -> SpeechJob:
    """Check every field; tokenise. Raises APIError (400, 404 unknown model, 413 input too long).
    `clone`: the analysed `ref_audio` of a Base request (the route decodes and encodes it first).
    `tokens`: `input`'s tokens, already known (text that arrives in pieces); `text_open`: more of it
    follows (the streaming layout; MoreTextNeeded while the prompt cannot be laid out yet)."""
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
    request_id = request_id or new_request_id()
    try:
        voice, preset, clone = resolve_voice(body, frontend, voices, clone)
        request, pieces = engine_requests(body, frontend, limits, preset, clone, request_id, tokens, text_open)
    except InvalidRequestError as e:
        raise (E.too_large(e.message, e.param) if e.code == "request_too_large" else E.invalid(e)) from None
    return SpeechJob(
        request,
        text,
        voice,
        response_format,
        body.speed,
        stream_format,
        body.stream or stream_format == "sse",  # an event stream is a stream
        frontend.instruct_ignored(body.instructions),
        pieces,
    )


def engine_requests(
    body: SpeechBody,
    frontend: Qwen3TTSFrontend,
    limits: Limits,
    preset: str | None,
    clone: VoiceClonePrompt | None,
    request_id: str,
    tokens: TextTokens | None = None,
    text_open: bool = False,
) -> tuple[EngineRequest, list[Piece]]:
    """The engine request of a validated body, or, for an input longer than `limits.piece_chars`,
    its pieces' (long_form.py) and the first piece's. Raises InvalidRequestError."""

    def prepared(text: str | TextTokens, seed: int | None, rid: str) -> EngineRequest:
        synthesis = SynthesisRequest(
            text, voice=preset, clone=clone, x_vector_only=body.x_vector_only_mode, language=body.language or "auto",
            instruct=body.instructions or None, **{**body.overrides(), "seed": seed}, ignore_eos=body.ignore_eos,
            request_id=rid, layout="streaming" if tokens is not None else None, text_open=text_open,
        )  # fmt: skip
        return prepare_request(frontend, synthesis, limits.max_input_tokens)

    if tokens is not None:
        return prepared(tokens, body.seed, request_id), []
    texts = long_form_pieces(body.input, limits.piece_chars)
    if texts is None:
        return prepared(body.input, body.seed, request_id), []
    pieces = [Piece(i, t, prepared(t, piece_seed(body.seed, i), f"{request_id}-{i}")) for i, t in enumerate(texts)]
    return pieces[0].request, pieces


def resolve_voice(
    body: SpeechBody, frontend: Qwen3TTSFrontend, voices: VoiceTable, clone: VoiceClonePrompt | None
) -> tuple[str, str | None, VoiceClonePrompt | None]:
    """(name for logs, preset, cloned voice) as the checkpoint's variant takes a voice. Raises
    InvalidRequestError naming the field and, for a field this variant cannot use, the one that can."""
    kind = frontend.config.tts_model_type
    name = body.voice.id if isinstance(body.voice, VoiceRef) else body.voice
    for variant_field, needs in VARIANT_FIELDS.items():
        if kind != needs and getattr(body, variant_field) is not None:
            raise InvalidRequestError(
                f"{variant_field} needs a {needs} checkpoint (voice cloning); this is {kind}", variant_field
            )
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
