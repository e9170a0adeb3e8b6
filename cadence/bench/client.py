"""One request to an OpenAI-compatible `/v1/audio/speech` server, timed from the client's side.

Two transports: raw streamed audio (`stream_format: audio`, body = PCM or a streaming WAV) and SSE
(`stream_format: sse`, `speech.audio.delta` events carrying base64 audio, then `speech.audio.done`).
Either way the body is turned into int16 PCM as it arrives, and each piece's arrival time (perf_counter,
monotonic) and sample count go into the request's Timeline. Audible-onset detection runs on the fly so
no request keeps its audio.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from .defaults import DEFAULT_MODEL, DEFAULT_SAMPLE_RATE, DEFAULT_URL, LANGUAGE_NAMES, MEASURABLE_FORMATS
from .metrics import AudibleRule, Chunk, OnsetDetector, Timeline
from .workload import PlannedRequest

ERROR_TEXT_LIMIT = 300


class ProtocolError(Exception):
    """The server answered 200 but the body is not what the requested transport/format promises."""


@dataclass
class ServerConfig:
    """Where to send requests and what to put in them (the same for every request of a run)."""

    base_url: str = DEFAULT_URL
    endpoint: str = "/v1/audio/speech"
    model: str = DEFAULT_MODEL
    api_key: str | None = None
    voice: str = "ryan"
    # `data`: each utterance's own language (Auto where unknown); `none`: leave the field out;
    # anything else is sent as given (e.g. Auto, English).
    language: str = "data"
    response_format: str = "pcm"
    stream_format: str = "audio"
    sample_rate: int = DEFAULT_SAMPLE_RATE  # of `pcm` bodies; a WAV header overrides it
    extra_fields: dict[str, Any] = field(default_factory=dict)  # merged last: can add or override anything
    timeout_s: float = 120.0  # whole request, connect to last byte

    def __post_init__(self) -> None:
        if self.response_format not in MEASURABLE_FORMATS:
            raise ValueError(
                f"response format {self.response_format!r} cannot be measured: the bench needs PCM samples "
                f"to time audio, so it takes {' or '.join(MEASURABLE_FORMATS)}"
            )
        if self.stream_format not in ("audio", "sse"):
            raise ValueError(f"stream format must be audio or sse, got {self.stream_format!r}")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/" + self.endpoint.lstrip("/")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def payload(self, planned: PlannedRequest) -> dict[str, Any]:
        """The JSON body for one request."""
        body: dict[str, Any] = {
            "model": self.model,
            "input": planned.utterance.text,
            "voice": self.voice,
            "response_format": self.response_format,
            "stream_format": self.stream_format,
        }
        if self.language == "data":
            body["language"] = LANGUAGE_NAMES.get(planned.utterance.language or "", "Auto")
        elif self.language != "none":
            body["language"] = self.language
        if planned.max_new_tokens is not None:
            # A random-weight model seldom ends on its own: force the length (see workload.py).
            body["max_new_tokens"] = planned.max_new_tokens
            body["ignore_eos"] = True
        body.update(self.extra_fields)
        return body


@dataclass
class Exchange:
    """How one request went: an outcome class and the timeline observed so far."""

    # ok, or why not: http_<status>, timeout, connect_error, transport_error, protocol_error, sse_error,
    # no_audio (200 without samples), client_error (an unexpected exception while reading the answer)
    outcome: str
    timeline: Timeline
    http_status: int | None = None
    request_id: str | None = None  # the server's X-Request-Id (cadence's access log names it)
    error: str | None = None
    finish_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


class PcmDecoder:
    """Bytes of a `pcm` or streaming `wav` body -> int16 samples, in whatever pieces they arrive."""

    def __init__(self, response_format: str, sample_rate: int):
        self.sample_rate = sample_rate
        self._need_header = response_format == "wav"
        self._buf = b""

    def feed(self, data: bytes) -> np.ndarray:
        self._buf += data
        if self._need_header and not self._parse_wav_header():
            return np.zeros(0, dtype=np.int16)
        usable = len(self._buf) - len(self._buf) % 2  # an odd trailing byte waits for its partner
        pcm = np.frombuffer(self._buf[:usable], dtype="<i2").astype(np.int16)
        self._buf = self._buf[usable:]
        return pcm

    def _parse_wav_header(self) -> bool:
        """Consume RIFF/WAVE chunks up to `data`; False while more bytes are needed."""
        buf = self._buf
        if len(buf) < 12:
            return False
        if buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
            raise ProtocolError(f"wav body does not start with a RIFF/WAVE header: {buf[:12]!r}")
        pos = 12
        while len(buf) >= pos + 8:
            chunk_id, size = buf[pos : pos + 4], struct.unpack("<I", buf[pos + 4 : pos + 8])[0]
            if chunk_id == b"data":  # size is 0 or 0xFFFFFFFF when streamed: read to the end instead
                self._buf, self._need_header = buf[pos + 8 :], False
                return True
            end = pos + 8 + size + size % 2
            if len(buf) < end:
                return False
            if chunk_id == b"fmt ":
                _, channels, rate, _, _, bits = struct.unpack("<HHIIHH", buf[pos + 8 : pos + 24])
                if channels != 1 or bits != 16:
                    raise ProtocolError(f"wav must be mono 16-bit, got {channels} channel(s) of {bits} bits")
                self.sample_rate = rate
            pos = end
        return False


class _Recorder:
    """Appends decoded pieces to a timeline and runs onset detection until it fires."""

    def __init__(self, timeline: Timeline, decoder: PcmDecoder, rule: AudibleRule, start: float):
        self.timeline, self.decoder, self.rule, self.start = timeline, decoder, rule, start
        self.onset: OnsetDetector | None = None

    def body_bytes(self, data: bytes, now: float) -> None:
        t = now - self.start
        if self.timeline.first_byte_s is None:
            self.timeline.first_byte_s = t
        self.audio(data, t)

    def audio(self, data: bytes, t: float) -> None:
        pcm = self.decoder.feed(data)
        if self.onset is None:  # the WAV header fixes the rate, so the detector starts with the first samples
            if len(pcm) == 0:
                self.timeline.chunks.append(Chunk(t, 0))
                return
            self.timeline.sample_rate = self.decoder.sample_rate
            self.timeline.audible_window_samples = self.rule.window_samples(self.decoder.sample_rate)
            self.onset = OnsetDetector(self.decoder.sample_rate, self.rule)
        self.timeline.chunks.append(Chunk(t, len(pcm)))
        if self.timeline.onset_sample is None:
            self.timeline.onset_sample = self.onset.feed(pcm)


async def send_request(
    client: httpx.AsyncClient, server: ServerConfig, planned: PlannedRequest, rule: AudibleRule
) -> Exchange:
    """Send one request and stream its answer; never raises for server or network trouble."""
    start = time.perf_counter()
    timeline = Timeline(sample_rate=server.sample_rate)
    exchange = Exchange("ok", timeline)
    try:
        async with asyncio.timeout(server.timeout_s):
            await _stream(client, server, planned, rule, start, exchange)
    except (TimeoutError, httpx.TimeoutException):
        exchange.outcome, exchange.error = "timeout", f"no complete answer within {server.timeout_s:g} s"
    except httpx.ConnectError as e:
        exchange.outcome, exchange.error = "connect_error", _short(repr(e))
    except httpx.TransportError as e:
        exchange.outcome, exchange.error = "transport_error", _short(repr(e))
    except ProtocolError as e:
        exchange.outcome, exchange.error = "protocol_error", _short(str(e))
    except Exception as e:  # anything else odd in a response must still be counted, not crash the run
        exchange.outcome, exchange.error = "client_error", _short(repr(e))
    if exchange.ok and not any(c.samples for c in timeline.chunks):
        exchange.outcome, exchange.error = "no_audio", exchange.error or "the response carried no audio samples"
    if not exchange.ok:
        timeline.end_s = None  # failed requests have no end-to-end latency
    return exchange


async def _stream(
    client: httpx.AsyncClient,
    server: ServerConfig,
    planned: PlannedRequest,
    rule: AudibleRule,
    start: float,
    exchange: Exchange,
) -> None:
    timeline = exchange.timeline
    request = client.build_request("POST", server.url, json=server.payload(planned), headers=server.headers())
    response = await client.send(request, stream=True)
    try:
        timeline.headers_s = time.perf_counter() - start
        exchange.http_status = response.status_code
        exchange.request_id = response.headers.get("x-request-id")
        if response.status_code != 200:
            exchange.outcome = f"http_{response.status_code}"
            exchange.error = _error_message(await response.aread())
            return
        content_type = response.headers.get("content-type", "")
        is_sse = content_type.startswith("text/event-stream")
        if is_sse != (server.stream_format == "sse"):
            expected = "text/event-stream" if server.stream_format == "sse" else "an audio body"
            raise ProtocolError(
                f"asked for stream_format={server.stream_format} ({expected}) but got content-type {content_type!r}"
            )
        recorder = _Recorder(timeline, PcmDecoder(server.response_format, server.sample_rate), rule, start)
        if is_sse:
            await _read_sse(response, recorder, exchange)
        else:
            async for data in response.aiter_bytes():
                if data:
                    recorder.body_bytes(data, time.perf_counter())
        timeline.end_s = time.perf_counter() - start
    finally:
        await response.aclose()


async def _read_sse(response: httpx.Response, recorder: _Recorder, exchange: Exchange) -> None:
    """Server-sent events: `data:` lines up to a blank line make one event (the WHATWG rules we need)."""
    data_lines: list[str] = []
    async for line in response.aiter_lines():
        now = time.perf_counter()
        if recorder.timeline.first_byte_s is None:
            recorder.timeline.first_byte_s = now - recorder.start
        if line.startswith("data:"):
            data_lines.append(line[5:].removeprefix(" "))
        elif line == "" and data_lines:
            _sse_event("\n".join(data_lines), now, recorder, exchange)
            data_lines = []
    if data_lines:
        _sse_event("\n".join(data_lines), time.perf_counter(), recorder, exchange)


def _sse_event(data: str, now: float, recorder: _Recorder, exchange: Exchange) -> None:
    if data == "[DONE]":
        return
    try:
        event = json.loads(data)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"SSE event is not JSON: {data[:80]!r}") from e
    if not isinstance(event, dict):
        raise ProtocolError(f"SSE event is not a JSON object: {data[:80]!r}")
    kind = event.get("type")
    if kind == "speech.audio.delta":
        try:
            audio = base64.b64decode(event.get("audio", ""), validate=True)
        except ValueError as e:
            raise ProtocolError("speech.audio.delta carries invalid base64") from e
        recorder.audio(audio, now - recorder.start)
    elif kind == "speech.audio.done":
        exchange.finish_reason = event.get("finish_reason")
    elif kind == "error" or "error" in event:
        exchange.outcome, exchange.error = "sse_error", _short(json.dumps(event.get("error", event)))


def _error_message(body: bytes) -> str:
    """The `error.message` (OpenAI) or `detail` (FastAPI) of an error body, else its start."""
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return _short(text)
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, dict) and "message" in err:
            return _short(str(err["message"]))
        if "detail" in parsed:
            return _short(str(parsed["detail"]))
    return _short(text)


def _short(text: str) -> str:
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 3] + "..."
