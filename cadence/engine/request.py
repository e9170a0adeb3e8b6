"""What flows through the engine: requests in, audio chunks out."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from ..models.qwen3_tts.prompt import Prompt
from ..models.qwen3_tts.sampling import SamplingParams


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


@dataclass(frozen=True)
class EngineRequest:
    """A validated, tokenised request as the engine core receives it."""

    request_id: str
    prompt: Prompt
    params: SamplingParams  # seed always set: unseeded requests get a random one at submission
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
    frame_start: int  # first frame in this chunk (80 ms frames)
    frame_end: int  # one past the last
    is_final: bool = False
    finish_reason: FinishReason | None = None
    error: str | None = None
    timings: Timings | None = None
    prompt_tokens: int = 0
    codes: np.ndarray | None = None  # [frames, 16] when EngineConfig.return_codes
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
