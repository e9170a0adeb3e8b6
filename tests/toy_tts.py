"""A toy TTS model family: the smallest thing the engine's partition contract admits, to show that a
second family needs one package (this file) and one `register` line, and no change to the engine.

Its "text" is characters, one token each. Frame k of a stream is [k, f]: a counter and the
stream's pitch f (its first character's code point, in Hz); the frame after `frames` of them is
EOS. The codec turns a frame into 80 samples of a sine at f Hz that continues the stream's phase:
sample j of frame k is 0.5 sin(2 pi f (80 k + j) / 8000). `expected_pcm` is that closed form.
Everything runs on the CPU.

Its frontend is all the server needs (cadence/models/interfaces.py): one built-in voice, "sine";
a speech request gets a frame per character of its text.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from cadence.audio import to_int16
from cadence.engine.config import EngineConfig
from cadence.engine.kv_cache import PagedKVCache
from cadence.engine.partition import Admission, DecodeOutput, HostAudio
from cadence.engine.process_config import ModelSource
from cadence.engine.request import EngineRequest
from cadence.errors import InvalidRequestError
from cadence.models.interfaces import ModelCapabilities, Speech, Voices
from cadence.models.registry import ModelFamily

SAMPLE_RATE = 8000
SAMPLES_PER_FRAME = 80
EOS = -1  # a frame's counter is never negative
VOICE = "sine"  # the toy's one built-in voice
CAPABILITIES = ModelCapabilities(
    kind="toy", size="toy", size_label="toy", languages=("auto",), voices=(VOICE,), instructions=None,
    clones_voices=False,
)  # fmt: skip


@dataclass(frozen=True)
class ToyPrompt:
    tokens: tuple[int, ...]  # the text's code points
    frames: int  # frames before EOS
    trailing_text: tuple[int, ...] = ()

    @property
    def num_text_tokens(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class ToyParams:
    max_new_tokens: int = 100


@dataclass
class ToyRequest:
    """The toy's own request type: what its frontend validates."""

    text: str
    frames: int
    max_new_tokens: int = 100
    ignore_eos: bool = False
    request_id: str | None = None


def prepare(request: ToyRequest, max_input_tokens: int) -> EngineRequest[ToyPrompt, ToyParams]:
    if not request.text:
        raise InvalidRequestError("input text is empty", "input")
    if len(request.text) > max_input_tokens or request.frames < 1:
        raise InvalidRequestError("the toy speaks 1 to max_input_tokens characters, at least one frame", "input")
    prompt = ToyPrompt(tuple(ord(c) for c in request.text), request.frames)
    rid = request.request_id or uuid.uuid4().hex
    return EngineRequest(rid, prompt, ToyParams(request.max_new_tokens), request.ignore_eos)


def expected_frames(request: EngineRequest[ToyPrompt, ToyParams]) -> int:
    """Audio frames the toy gives a request: its `frames`, at most max_new_tokens."""
    if request.ignore_eos:
        return request.params.max_new_tokens
    return min(request.prompt.frames, request.params.max_new_tokens)


def expected_pcm(request: EngineRequest[ToyPrompt, ToyParams], frames: int) -> np.ndarray:
    """The int16 audio of a stream's first `frames` frames, in closed form."""
    pitch = request.prompt.tokens[0]
    t = np.arange(frames * SAMPLES_PER_FRAME, dtype=np.float64) / SAMPLE_RATE
    return to_int16((0.5 * np.sin(2 * math.pi * pitch * t)).astype(np.float32))


class ToyTalker:
    """Talker partition: per-slot counters; one decode walk makes one frame a slot."""

    eos_free_frames = 1  # a prompt has at least one frame before EOS

    def __init__(self, max_slots: int, kv_bytes: int, page_size: int, max_positions: int):
        self.max_slots = max_slots
        self.bytes_per_token = ToyRuntime.kv_bytes_per_token
        self.kv = PagedKVCache(1, kv_bytes // (self.bytes_per_token * page_size), page_size, 1, 4, torch.float32, "cpu")
        self.max_positions = max_positions
        self.step = torch.zeros(max_slots, dtype=torch.long)
        self.pitch = torch.zeros(max_slots, dtype=torch.long)
        self.eos_at = torch.zeros(max_slots, dtype=torch.long)  # -1: never (ignore_eos)

    def tokens_to_reserve(self, request: EngineRequest, max_frames: int) -> int:
        return len(request.prompt) + max_frames

    def fits(self, tokens: int) -> bool:
        return tokens <= self.max_positions and self.kv.pages_for(tokens) <= self.kv.num_pages

    def prefill(self, admissions: list[Admission]) -> None:
        for a in admissions:
            self.step[a.slot] = 0
            self.pitch[a.slot] = a.request.prompt.tokens[0]
            self.eos_at[a.slot] = -1 if a.request.ignore_eos else a.request.prompt.frames

    def decode(self, slots: list[int]) -> DecodeOutput:
        idx = torch.tensor(slots)
        step = self.step[idx]
        eos = step == self.eos_at[idx]
        frames = torch.stack([torch.where(eos, EOS, step), self.pitch[idx]], dim=1)
        self.step[idx] = step + 1
        return DecodeOutput(frames.clone(), eos.clone(), frames)

    def advance(self) -> None:
        pass

    def busy(self) -> bool:
        return False

    def append_text(self, slot: int, start: int, ids: list[int]) -> None:
        pass  # the toy speaks only its prompt

    def release(self, slot: int) -> None:
        self.step[slot] = 0


class ToyCodec:
    """Codec partition: a frame's sine, 80 samples; no state (the phase is the frame's counter)."""

    samples_per_frame = SAMPLES_PER_FRAME
    sample_rate = SAMPLE_RATE
    device = torch.device("cpu")
    bytes_per_stream = 0

    def reset(self, slots: list[int], requests: list[EngineRequest] | None = None) -> None:
        pass

    def decode(self, slots: list[int], frames: torch.Tensor, finishing: bool = False) -> torch.Tensor:
        assert (frames[:, :, 0] >= 0).all(), "an EOS frame reached the codec"
        sample = frames[:, :, :1].double() * SAMPLES_PER_FRAME + torch.arange(SAMPLES_PER_FRAME)
        audio = 0.5 * torch.sin(2 * math.pi * frames[:, :, 1:2].double() * sample / SAMPLE_RATE)
        return audio.float().flatten(1)

    def to_host(self, audio: torch.Tensor, codes: torch.Tensor | None = None) -> HostAudio:
        return HostAudio(audio, codes=codes)


class ToyRuntime:
    """The loaded toy (ModelRuntime): no weights at all."""

    device = torch.device("cpu")
    dtype = torch.float32
    sample_rate = SAMPLE_RATE
    prompt_type: ClassVar[type] = ToyPrompt
    params_type: ClassVar[type] = ToyParams

    kv_bytes_per_token = PagedKVCache.bytes_per_token(1, 1, 4, torch.float32)

    def describe(self) -> str:
        return "toy"

    def prepare(self, request: ToyRequest, max_input_tokens: int) -> EngineRequest[ToyPrompt, ToyParams]:
        return prepare(request, max_input_tokens)

    def warmup_request(self, frames: int, max_input_tokens: int) -> EngineRequest[ToyPrompt, ToyParams]:
        return prepare(ToyRequest("A", 1, frames, ignore_eos=True, request_id="toy-warmup"), max_input_tokens)

    def move_codec(self, device: torch.device) -> None:
        raise ValueError("the toy's codec runs where its talker does")

    def build_codec(self, config: EngineConfig, device: torch.device, use_graphs: bool, own_stream: bool) -> ToyCodec:
        return ToyCodec()

    def build_talker(self, config: EngineConfig, kv_bytes: int, backend: str) -> ToyTalker:
        return ToyTalker(config.max_streams, kv_bytes, config.page_size, config.max_seq_tokens)


class ToyText:
    """Text in pieces: a character is a token, final as soon as it arrives."""

    def __init__(self):
        self.ids: list[int] = []

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self.ids)

    def push(self, delta: str) -> list[int]:
        new = [ord(c) for c in delta]
        self.ids += new
        return new

    def finish(self) -> list[int]:
        return []


class ToyFrontend:
    """The toy's Frontend: it takes no reference audio, no text that is still arriving, and only
    the language "auto"; its instructions are ignored."""

    sample_rate = SAMPLE_RATE

    def capabilities(self) -> ModelCapabilities:
        return CAPABILITIES

    def resolve_voice(self, speech: Speech, voices: Voices) -> tuple[str, str]:
        if speech.ref_audio or speech.clone is not None:
            raise InvalidRequestError("the toy clones no voices", "ref_audio")
        voice = voices.resolve(speech.voice or VOICE)
        return voice, voice

    def request(self, speech: Speech, voice: str) -> ToyRequest:
        if speech.text_open:
            raise InvalidRequestError("the toy speaks whole texts only", "input")
        if (speech.language or "auto") != "auto":
            raise InvalidRequestError(f"unknown language '{speech.language}'", "language", ["auto"])
        text = speech.text if isinstance(speech.text, str) else "".join(map(chr, speech.text))
        max_new_tokens = speech.sampling.get("max_new_tokens") or ToyParams.max_new_tokens
        return ToyRequest(text, len(text), max_new_tokens, speech.ignore_eos, speech.request_id)

    def prepare(self, request: ToyRequest, max_input_tokens: int) -> EngineRequest[ToyPrompt, ToyParams]:
        return prepare(request, max_input_tokens)

    def prompt_parts(self, prompt: ToyPrompt) -> dict[str, int]:
        return {"input": len(prompt)}

    def count_tokens(self, text: str) -> int:
        return len(text)

    def text_in_pieces(self) -> ToyText:
        return ToyText()

    def end_of_text(self) -> list[int]:
        return []


def accepts(config: dict[str, Any]) -> bool:
    return config.get("model_type") == "toy"


def locate(model: str, random_preset: str | None) -> ModelSource:
    return ModelSource("toy", model)


def load_frontend(source: ModelSource) -> ToyFrontend:
    return ToyFrontend()


def load_runtime(source: ModelSource) -> ToyRuntime:
    return ToyRuntime()


TOY = ModelFamily("toy", accepts, locate, load_frontend, load_runtime)
