"""Per-request accounting: the structured access-log line and the request metrics.

One JSON line per synthesis request on the `cadence.access` logger (HTTP requests and WebSocket
segments alike), e.g.

    {"id": "speech-…", "route": "/v1/audio/speech", "status": 200, "voice": "ryan", "chars": 42,
     "ttfa_ms": 61.2, "audio_s": 3.04, "frames": 38, "finish_reason": "stop", "duration_s": 1.21,
     "max_chunk_gap_ms": 95.3,
     "first_audio_ms": {"api": 0.9, "to_engine": 0.4, "queue": 3.1, "prefill": 4.0, "codec": 2.2, "to_api": 1.6}}

`first_audio_ms` splits the time to first audio into the stages of its path (FIRST_AUDIO_STAGES);
each stage is also a `cadence_first_audio_stage_seconds{stage}` histogram. `max_chunk_gap_ms` is
the longest wait between two of the request's audio chunks reaching the API process. The engine's
timestamps and the API's are taken on the same monotonic clock (one machine), so their differences
hold.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..engine.request import Timings
from .metrics import Metrics

access_log = logging.getLogger("cadence.access")

# The path of a request's first audio, stage by stage: what each covers.
FIRST_AUDIO_STAGES = {
    "api": "arrival in the API process to submission (reading, validation, tokenisation)",
    "to_engine": "submission to the engine taking the request in (messaging, and the step it waits for)",
    "queue": "waiting in the engine for a slot and the next step's admission",
    "prefill": "admission to the first frame's decode walk being launched (prefill, first frame)",
    "codec": "the first frame to its audio on the host (the first codec chunk)",
    "to_api": "that audio to the API process (the rest of the step, messaging)",
}


@dataclass
class Outcome:
    route: str
    request_id: str | None = None
    voice: str | None = None
    chars: int = 0
    input_tokens: int | None = None
    response_format: str | None = None
    stream: str | None = None  # audio, sse, none (whole file), websocket
    arrival: float = field(default_factory=time.monotonic)
    submitted: float | None = None  # handed to the engine
    first_audio: float | None = None
    last_audio: float | None = None
    # the longest wait between two of its audio chunks reaching this process: the server's side of a
    # playback gap (a client's longer wait for the same chunk was spent after it left the server)
    max_chunk_gap: float | None = None
    first_audio_path: dict[str, float] | None = None  # seconds a stage (FIRST_AUDIO_STAGES)
    audio_seconds: float = 0.0
    frames: int = 0
    finish_reason: str | None = None
    runaway_cause: str | None = None  # with finish_reason "runaway": the guard's check that stopped it

    @property
    def ttfa(self) -> float | None:
        return self.first_audio - self.arrival if self.first_audio is not None else None

    def audio_arrived(self, timings: Timings | None) -> None:
        """A chunk of audio is here: note when; for the first, what the engine says of its path."""
        now = time.monotonic()
        if self.last_audio is not None:
            self.max_chunk_gap = max(self.max_chunk_gap or 0.0, now - self.last_audio)
        self.last_audio = now
        if self.first_audio is not None:
            return
        self.first_audio = now
        t = timings
        if self.submitted is None or t is None or None in (t.admitted, t.first_frame, t.first_chunk):
            return
        marks = [self.arrival, self.submitted, t.arrival, t.admitted, t.first_frame, t.first_chunk, self.first_audio]
        self.first_audio_path = {
            stage: max(0.0, b - a) for stage, a, b in zip(FIRST_AUDIO_STAGES, marks[:-1], marks[1:], strict=True)
        }


def record(metrics: Metrics, outcome: Outcome, status: int, error: str | None = None) -> None:
    """Count the request and write its access-log line."""
    now = time.monotonic()
    metrics.requests.labels(outcome.route, str(status)).inc()
    if outcome.finish_reason:
        metrics.finished.labels(outcome.finish_reason).inc()
    if outcome.ttfa is not None:
        metrics.ttfa.observe(outcome.ttfa)
    for stage, seconds in (outcome.first_audio_path or {}).items():
        metrics.first_audio_stage.labels(stage).observe(seconds)
    if outcome.audio_seconds > 0:
        metrics.rtf.observe((now - outcome.arrival) / outcome.audio_seconds)
        metrics.audio_seconds.inc(outcome.audio_seconds)
    if status < 400:
        metrics.input_chars.inc(outcome.chars)
    line: dict[str, Any] = {"id": outcome.request_id, "route": outcome.route, "status": status}
    if outcome.request_id is not None:
        ttfa = outcome.ttfa
        line |= {
            "voice": outcome.voice,
            "chars": outcome.chars,
            "input_tokens": outcome.input_tokens,
            "format": outcome.response_format,
            "stream": outcome.stream,
            "ttfa_ms": round(ttfa * 1000, 1) if ttfa is not None else None,
            "audio_s": round(outcome.audio_seconds, 3),
            "frames": outcome.frames,
            "finish_reason": outcome.finish_reason,
        }
        if outcome.max_chunk_gap is not None:
            line["max_chunk_gap_ms"] = round(outcome.max_chunk_gap * 1000, 1)
        if outcome.first_audio_path is not None:
            line["first_audio_ms"] = {k: round(v * 1000, 2) for k, v in outcome.first_audio_path.items()}
        if outcome.runaway_cause:
            line["runaway_cause"] = outcome.runaway_cause
    line["duration_s"] = round(now - outcome.arrival, 3)
    if error:
        line["error"] = error
    access_log.info(json.dumps(line, ensure_ascii=False))
