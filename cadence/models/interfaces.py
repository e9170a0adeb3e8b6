"""What the API process knows of a model: the `Frontend` protocol and the family-agnostic types it
speaks. No torch.

The server (cadence/server/) reaches a model only through these: it validates the HTTP fields every
model shares, asks the frontend what the model can do (`capabilities`), hands it a `Speech` to turn
into the family's own request, and feeds it text that arrives in pieces. Everything a family alone
knows (its variants, which voice each takes, its prompts and their errors) stays in its package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..engine.request import EngineRequest


@dataclass(frozen=True)
class ModelCapabilities:
    """What a loaded model can do, as the server's routes report and check it."""

    kind: str  # the model's variant, as GET /v1/models names it (Qwen3-TTS: custom_voice, base, voice_design)
    size: str  # its size as its config writes it ("0b6")
    size_label: str  # as people write it ("0.6B")
    languages: tuple[str, ...]  # what a request's `language` may name
    voices: tuple[str, ...]  # its built-in voices, by name (a request may also name an alias of one)
    instructions: str | None  # what `instructions` does ("style", "voice description"); None: not taken
    clones_voices: bool  # speaks in a voice cloned from reference audio, and keeps saved voices


class ClonedVoice(Protocol):
    """A voice cloned from reference audio, as the family's requests take it; a saved voice is one
    file of it."""

    @property
    def ref_text(self) -> str | None:
        """The reference audio's transcript, if known."""
        ...

    @property
    def seconds(self) -> float:
        """The reference audio's length."""
        ...

    @property
    def width(self) -> int:
        """The model width it was made for: a saved voice of another width does not fit the model."""
        ...

    def save(self, path: Path) -> None: ...


class VoiceEncoder(Protocol):
    """Reference audio -> a cloned voice, in the API process of a model that clones voices (it may
    use torch: only such a server loads it, ModelFamily.load_voice_encoder)."""

    @property
    def sample_rate(self) -> int:
        """Of the audio `encode` takes."""
        ...

    @property
    def device(self) -> Any: ...

    @property
    def width(self) -> int:
        """ClonedVoice.width of the voices it makes."""
        ...

    def encode(self, wav: np.ndarray, ref_text: str | None = None) -> ClonedVoice:
        """Mono float samples at `sample_rate` (and their transcript) -> the voice."""
        ...

    def load_voice(self, path: Path) -> ClonedVoice:
        """A voice `ClonedVoice.save` wrote. Raises OSError, ValueError or KeyError."""
        ...


class Voices(Protocol):
    """The server's voices, as a family resolves a request's voice against them (server/voices.py)."""

    def resolve(self, name: str) -> str:
        """A built-in voice or an alias of one -> the built-in voice. Raises InvalidRequestError."""
        ...

    def saved(self, name: str) -> tuple[str, ClonedVoice]:
        """A saved voice by id or name -> (its name, the voice). Raises InvalidRequestError."""
        ...


class MoreTextNeeded(ValueError):
    """Text that is still arriving is too short yet for the model to lay out its prompt."""


class TextInPieces(Protocol):
    """Text that arrives in pieces (an LLM's deltas), tokenised exactly as the whole text will be:
    a token is committed once no later text can change it."""

    ids: list[int]  # committed so far

    @property
    def tokens(self) -> Any:
        """What is committed, as `Speech.text` takes it (once `ids` is not empty)."""
        ...

    def push(self, delta: str) -> list[int]:
        """Add a delta; the ids it made final."""
        ...

    def finish(self) -> list[int]:
        """The end of the text: the ids not committed yet."""
        ...


@dataclass(frozen=True)
class Speech:
    """One utterance as the server asks a model for it: the request's fields, checked for type and
    range by the server; the family checks what only it knows (Frontend.resolve_voice, `request`)."""

    text: Any  # a string, or its tokens (TextInPieces.tokens) when the text arrives in pieces
    voice: str | None = None  # as the client named it: a built-in voice, an alias of one or a saved voice
    clone: ClonedVoice | None = None  # reference audio sent with the request, analysed (VoiceEncoder)
    ref_audio: bool = False  # the request carries reference audio (analysed only by a model that clones)
    ref_text: str | None = None  # the reference audio's transcript
    x_vector_only: bool | None = None  # the clone's mode: its speaker vector alone (None: the family's default)
    language: str | None = None
    instructions: str | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)  # cadence.sampling.SamplingOverrides' fields
    ignore_eos: bool = False  # exactly max_new_tokens frames (benchmarking)
    request_id: str | None = None
    text_open: bool = False  # more text follows (EngineCore.append_text); `text` is then tokens


class Frontend(Protocol):
    """A model's API-process side: what validating and tokenising its requests needs, no weights."""

    @property
    def sample_rate(self) -> int: ...

    def capabilities(self) -> ModelCapabilities: ...

    def resolve_voice(self, speech: Speech, voices: Voices) -> tuple[str, Any]:
        """The request's voice: (its name for logs, the voice as `request` takes it). Raises
        InvalidRequestError naming the field (and the model that could use a field this one cannot)."""
        ...

    def request(self, speech: Speech, voice: Any) -> Any:
        """The family's request (what `prepare` takes) for `speech` in a resolved voice."""
        ...

    def prepare(self, request: Any, max_input_tokens: int) -> EngineRequest:
        """The model's request type -> the engine's request. Raises InvalidRequestError (and
        MoreTextNeeded while text that is still arriving is too short for the prompt)."""
        ...

    def prompt_parts(self, prompt: Any) -> dict[str, int]:
        """A prepared prompt's tokens by the request field they come from ("input", ...): what to
        shorten when a prompt can never fit the engine's cache."""
        ...

    def count_tokens(self, text: str) -> int: ...

    def text_in_pieces(self) -> TextInPieces:
        """A new text that arrives in pieces (the WebSocket route's continuous input)."""
        ...

    def end_of_text(self) -> list[int]:
        """The ids that end text which arrived in pieces (EngineCore.append_text)."""
        ...
