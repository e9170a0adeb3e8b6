"""What a WebSocket session keeps of the speech it is producing: its segments (one engine request
each, their audio on the way to the client, in order) and the utterance whose text is still arriving
(continuous input, continuous.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ..engine.request import AudioChunk
from ..models.interfaces import TextInPieces
from .access import Outcome
from .schema import SpeechJob


@dataclass(eq=False)  # identity hash: segments live in a set
class Segment:
    """One engine request of a session: a sentence, or a continuous utterance; its audio waits in
    `queue` until the segments before it are sent."""

    job: SpeechJob
    utterance: int
    index: int
    outcome: Outcome
    queue: asyncio.Queue[AudioChunk | BaseException] = field(default_factory=asyncio.Queue)
    sent: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    chars: int = 0  # its text, as counted against the session's buffer
    open: OpenUtterance | None = None  # continuous input: the utterance it speaks

    @property
    def where(self) -> dict[str, Any]:
        return {"utterance_index": self.utterance, "sentence_index": self.index, "request_id": self.job.request_id}


@dataclass(eq=False)
class OpenUtterance:
    """The utterance whose text is still arriving."""

    text: TextInPieces
    index: int  # its utterance_index
    received: str = ""  # the text so far
    arrival: float = field(default_factory=time.monotonic)  # its first delta
    last_input: float = field(default_factory=time.monotonic)
    segment: Segment | None = None  # once its engine request exists
    submitted: bool = False  # the engine has the request: text goes straight to it
    held: list[tuple[list[int], bool]] = field(default_factory=list)  # (ids, done) for the engine before that

    @property
    def committed(self) -> int:
        """Text tokens committed so far."""
        return len(self.text.ids)
