"""What flows through the engine: requests in, audio chunks out.

A request's prompt and sampling parameters are the model's own types: the engine reads only what
`PromptLike` and `ParamsLike` declare, and the model's partitions read the rest. No torch here:
the API process builds requests and reads chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

import numpy as np


class RunawayCause(StrEnum):
    """Which check of the runaway guard (EngineConfig.runaway) stopped a request."""

    FRAME_BUDGET = "frame_budget"  # more frames than its text can need (min_frames + frames_per_token per token)
    LOOP = "loop"  # its last code0s repeat with a short period
    SILENCE = "silence"  # seconds of audio below the silence level


class FinishReason(StrEnum):
    STOP = "stop"  # the model emitted EOS
    LENGTH = "length"  # max_new_tokens frames
    RUNAWAY = "runaway"  # the runaway guard (frame budget, code loop, silence) stopped it
    CANCELLED = "cancelled"  # the client went away or cancel() was called
    ERROR = "error"  # this request failed; others are unaffected


class PromptLike(Protocol):
    """What the engine core reads of a model's prompt."""

    @property
    def num_text_tokens(self) -> int:
        """Text tokens of the request (the runaway guard's frame budget follows them)."""
        ...

    @property
    def trailing_text(self) -> Sequence[int]:
        """Ids the decode walks read one per frame (text that arrives later extends them)."""
        ...

    def __len__(self) -> int:
        """Prompt tokens: the prefill's length in the KV cache."""
        ...


class ParamsLike(Protocol):
    """What the engine core reads of a model's sampling parameters."""

    @property
    def max_new_tokens(self) -> int:
        """The most frames the request may generate."""
        ...


PromptT = TypeVar("PromptT", bound=PromptLike)
ParamsT = TypeVar("ParamsT", bound=ParamsLike)


@dataclass(frozen=True)
class EngineRequest(Generic[PromptT, ParamsT]):
    """A validated, tokenised request as the engine core receives it: the model's prompt and
    sampling parameters (a model's frontend makes it; the wire format is these fields)."""

    request_id: str
    prompt: PromptT
    params: ParamsT  # seeded models: the seed always set (an unseeded request gets a random one)
    ignore_eos: bool = False
    # The text is still arriving: the prompt's trailing text is what has arrived so far, and the
    # rest comes through EngineCore.append_text. A stream that has used up its text waits.
    text_open: bool = False


@dataclass
class Timings:
    """Monotonic timestamps (time.monotonic()) of a request's milestones; None until reached."""

    arrival: float
    admitted: float | None = None
    first_frame: float | None = None
    first_chunk: float | None = None
    finished: float | None = None


@dataclass
class AudioChunk:
    """A piece of one request's audio: int16 mono PCM at the model's sample rate."""

    request_id: str
    pcm: np.ndarray
    frame_start: int  # first frame in this chunk
    frame_end: int  # one past the last
    is_final: bool = False
    finish_reason: FinishReason | None = None
    error: str | None = None
    timings: Timings | None = None
    prompt_tokens: int = 0
    codes: np.ndarray | None = None  # [frames, codes a frame] when EngineConfig.return_codes
    runaway_cause: RunawayCause | None = None  # with finish_reason RUNAWAY: the check that stopped it

    @property
    def num_frames(self) -> int:
        return self.frame_end - self.frame_start


@dataclass
class EngineStats:
    running: int = 0
    waiting: int = 0
    kv_pages_used: int = 0
    kv_pages_total: int = 0
    steps: int = 0
    last_step_seconds: float = 0.0
    finished: dict[str, int] = field(default_factory=dict)
    # Codec work since start: batched calls launched and (stream, frame) pairs they decoded; how
    # chunks group into calls is what the chunk policy trades (larger calls are cheaper per frame).
    codec_calls: int = 0
    codec_frames: int = 0
    # The engine process's garbage collections since start (cadence/gc_pauses.py): a long one stops
    # every stream at once.
    gc_collections: int = 0
    gc_seconds: float = 0.0
    gc_longest_seconds: float = 0.0


class QueueFullError(RuntimeError):
    """The waiting queue is at its bound; retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = retry_after


class RequestTooLargeError(ValueError):
    """The request can never run: its prompt and frame budget need more KV tokens than one sequence
    may hold or the whole cache has. `prompt_too_long`: the prompt alone does not fit."""

    def __init__(self, message: str, prompt_too_long: bool = False):
        super().__init__(message)
        self.prompt_too_long = prompt_too_long
