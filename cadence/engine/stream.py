"""A request's life inside the engine core (Stream), and the walks the core has in flight."""

from __future__ import annotations

from dataclasses import dataclass, field

from .partition import DecodeOutput, HostAudio
from .request import EngineRequest, FinishReason, RunawayCause, Timings


@dataclass
class Stream:
    """One request's life inside the core."""

    request: EngineRequest
    timings: Timings
    max_frames: int  # min(max_new_tokens, runaway frame budget)
    budget_is_runaway: bool  # hitting max_frames means "runaway", not "length"
    slot: int = -1
    pages: list[int] = field(default_factory=list)
    walks: int = 0  # decode walks launched: frame k of the stream sits at ring position k % depth
    frames: int = 0  # frames read back as audio (EOS frame excluded)
    decoded: int = 0  # frames through the codec
    end: int | None = None  # once stopped: the frames that are audio (later ones are dropped)
    chunks: int = 0
    silent_samples: int = 0
    finish: FinishReason | None = None
    runaway_cause: RunawayCause | None = None
    error: str | None = None
    # Text still arriving (request.text_open): the trailing text tokens the Talker has, whether
    # they are all, the text tokens so far (the runaway frame budget follows them), and what
    # arrived before the stream had a slot.
    text_len: int = 0
    text_done: bool = True
    text_tokens: int = 0
    held_text: list[int] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.request.request_id

    def waits_for_text(self) -> bool:
        """Running, and its next decode walk reads trailing text that has not arrived yet."""
        return self.finish is None and not self.text_done and self.walks >= self.text_len

    def audio_frames(self, eos_free: int) -> int:
        """Frames the codec may take: those read back, and any not yet read back that cannot be EOS
        (the first `eos_free` of a stream; all with ignore_eos)."""
        if self.end is not None:
            return self.end
        unread_ok = self.walks if self.request.ignore_eos else min(self.walks, eos_free)
        return max(self.frames, min(unread_ok, self.max_frames))

    def pending(self, eos_free: int) -> int:
        """Frames not yet through the codec."""
        return max(0, self.audio_frames(eos_free) - self.decoded)

    def stop(self, reason: FinishReason, keep_pending: bool = True, cause: RunawayCause | None = None) -> None:
        """Finish with the frames read back so far (or, keep_pending False, those decoded so far)."""
        self.finish = reason
        self.runaway_cause = cause
        self.end = self.frames if keep_pending else self.decoded

    def stop_at_max_frames(self) -> None:
        """max_frames reached: max_new_tokens, or the runaway guard's frame budget when that is lower."""
        if self.budget_is_runaway:
            self.stop(FinishReason.RUNAWAY, cause=RunawayCause.FRAME_BUDGET)
        else:
            self.stop(FinishReason.LENGTH)


@dataclass
class Walk:
    """A decode walk in flight: its streams (row order) and outputs, read back one step later."""

    streams: list[Stream]
    output: DecodeOutput


@dataclass
class CodecLaunch:
    """A codec walk in flight: `size` frames of each of `streams`; its audio on the way to the host."""

    size: int
    streams: list[Stream]
    audio: HostAudio  # with the codec's input frames when EngineConfig.return_codes
