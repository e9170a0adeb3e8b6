"""Per-request accounting: the structured access-log line and the request metrics.

One JSON line per synthesis request on the `cadence.access` logger (HTTP requests and WebSocket
segments alike), e.g.

    {"id": "speech-…", "route": "/v1/audio/speech", "status": 200, "voice": "ryan", "chars": 42,
     "ttfa_ms": 61.2, "audio_s": 3.04, "frames": 38, "finish_reason": "stop", "duration_s": 1.21, …}
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from .metrics import Metrics

access_log = logging.getLogger("cadence.access")


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
    first_audio: float | None = None
    audio_seconds: float = 0.0
    frames: int = 0
    finish_reason: str | None = None
    runaway_cause: str | None = None  # with finish_reason "runaway": the guard's check that stopped it

    @property
    def ttfa(self) -> float | None:
        return self.first_audio - self.arrival if self.first_audio is not None else None


def record(metrics: Metrics, outcome: Outcome, status: int, error: str | None = None) -> None:
    """Count the request and write its access-log line."""
    now = time.monotonic()
    metrics.requests.labels(outcome.route, str(status)).inc()
    if outcome.finish_reason:
        metrics.finished.labels(outcome.finish_reason).inc()
    if outcome.ttfa is not None:
        metrics.ttfa.observe(outcome.ttfa)
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
        if outcome.runaway_cause:
            line["runaway_cause"] = outcome.runaway_cause
    line["duration_s"] = round(now - outcome.arrival, 3)
    if error:
        line["error"] = error
    access_log.info(json.dumps(line, ensure_ascii=False))
