"""WS /v1/audio/speech/stream: text in as it is written (an LLM's deltas), speech out sentence by sentence.

Client -> server, JSON text frames:
    {"type": "session.config", "voice": "ryan", "language": "english", "speed": 1.0, ...}   first
    {"type": "input.text", "text": "Hello, wor"}          a delta; any number
    {"type": "input.done"}                                flush: speak what is buffered; stays open
    {"type": "session.close"}                             flush, finish every segment, then close
Server -> client:
    {"type": "session.created", ...}                      the session's resolved settings
    {"type": "audio.start", "utterance_index", "sentence_index", "request_id", "text", ...}
    binary frames                                         the segment's audio: 24 kHz s16le mono PCM
    {"type": "audio.done", ..., "finish_reason", "usage"}
    {"type": "error", "error": {...}}                     a bad message or a failed segment
    {"type": "session.done", "usage"}                     after session.close

Segments of one session are synthesised in order on one voice. The next segment starts generating
while the current one is still being sent (one segment of lookahead), so sentences follow each
other without a gap the size of the time to first audio; their audio is sent strictly in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
from fastapi import WebSocket, WebSocketDisconnect

from ..engine.request import AudioChunk, FinishReason, QueueFullError
from . import errors as E
from .access import Outcome, record
from .audio_encoders import PcmEncoder
from .engine_client import EngineDeadError
from .schema import SpeechBody, SpeechJob, VoiceRef, new_request_id, validate_speech
from .segmenter import SentenceSegmenter

if TYPE_CHECKING:
    from .state import ServerState

log = logging.getLogger("cadence.server")

ROUTE = "/v1/audio/speech/stream"
LOOKAHEAD = 2  # segments of a session generating or buffered at once
MAX_SEGMENT_CHARS = 400


class SessionConfig(msgspec.Struct, kw_only=True):
    """session.config: the speech fields that apply to every segment (input comes later)."""

    voice: str | VoiceRef | None = None  # custom_voice: a preset; base: a saved voice; voice_design: none
    model: str | None = None
    instructions: str | None = None
    response_format: str = "pcm"
    speed: float = 1.0
    language: str | None = None
    seed: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    subtalker_temperature: float | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    subtalker_dosample: bool | None = None
    max_new_tokens: int | None = None
    ignore_eos: bool = False  # every segment exactly max_new_tokens frames (benchmarking)


class ClientMessage(msgspec.Struct):
    type: str
    text: str | None = None


@dataclass(eq=False)  # identity hash: segments live in a set
class Segment:
    job: SpeechJob
    utterance: int
    index: int
    outcome: Outcome
    queue: asyncio.Queue[AudioChunk | BaseException] = field(default_factory=asyncio.Queue)
    sent: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None


class SpeechSession:
    def __init__(self, state: ServerState, ws: WebSocket, config: SessionConfig):
        self.state = state
        self.ws = ws
        self.config = config
        self.segmenter = SentenceSegmenter(min(MAX_SEGMENT_CHARS, state.settings.max_input_chars))
        self.pending: asyncio.Queue[Segment | None] = asyncio.Queue()
        self.lookahead = asyncio.Semaphore(LOOKAHEAD)
        self.utterance = 0
        self.sentence = 0
        self.active: set[Segment] = set()  # generating or waiting to be sent
        self.totals = {"segments": 0, "failed": 0, "input_tokens": 0, "output_tokens": 0, "audio_seconds": 0.0}
        self.sender = asyncio.create_task(self._send_all(), name="cadence-ws-sender")

    # -- input ------------------------------------------------------------------------------------

    async def add_text(self, text: str) -> None:
        for sentence in self.segmenter.push(text):
            await self._enqueue(sentence)

    async def flush(self) -> None:
        if (rest := self.segmenter.flush()) is not None:
            await self._enqueue(rest)
        self.utterance += 1
        self.sentence = 0

    async def _enqueue(self, text: str) -> None:
        arrival = time.monotonic()
        body = SpeechBody(input=text, **_fields(self.config))
        try:
            job = validate_speech(body, self.state.frontend, self.state.voices, self.state.limits, new_request_id())
        except E.APIError as e:
            await self.ws.send_json({"type": "error", **e.body(), **self._where()})
            self.sentence += 1
            return
        outcome = Outcome(
            ROUTE, job.request_id, job.voice, len(job.text), job.input_tokens, "pcm", "websocket", arrival
        )
        seg = Segment(job, self.utterance, self.sentence, outcome)
        self.sentence += 1
        seg.task = asyncio.create_task(self._generate(seg))
        self.active.add(seg)
        self.pending.put_nowait(seg)

    def _where(self) -> dict[str, int]:
        return {"utterance_index": self.utterance, "sentence_index": self.sentence}

    # -- synthesis --------------------------------------------------------------------------------

    async def _generate(self, seg: Segment) -> None:
        """Run one segment through the engine into its queue (holding a lookahead slot until sent)."""
        async with self.lookahead:
            try:
                self.state.check_serving()
                async for chunk in self.state.engine.synthesize(seg.job.request):
                    seg.queue.put_nowait(chunk)
            except (E.APIError, QueueFullError, EngineDeadError, ValueError) as e:
                seg.queue.put_nowait(e)
            await seg.sent.wait()

    async def _send_all(self) -> None:
        while (seg := await self.pending.get()) is not None:
            try:
                await self._send_segment(seg)
            finally:
                seg.sent.set()
                self.active.discard(seg)

    async def _send_segment(self, seg: Segment) -> None:
        job = seg.job
        where = {"utterance_index": seg.utterance, "sentence_index": seg.index, "request_id": job.request_id}
        outcome = seg.outcome
        encoder = PcmEncoder(self.state.sample_rate, job.speed)
        await self.ws.send_json(
            {"type": "audio.start", **where, "text": job.text, "format": "pcm", "sample_rate": self.state.sample_rate}
        )
        while True:
            item = await seg.queue.get()
            if isinstance(item, BaseException):
                err = _api_error(item)
                self.totals["segments"] += 1
                self.totals["failed"] += 1
                record(self.state.metrics, outcome, err.status, err.message)
                await self.ws.send_json({"type": "error", **err.body(), **where})
                if isinstance(item, EngineDeadError):  # nothing more can be spoken: end the session
                    await self.ws.close(code=1011, reason="the engine process has exited")
                    raise item
                return
            if item.pcm.size and outcome.first_audio is None:
                outcome.first_audio = time.monotonic()
            if data := encoder.encode(item.pcm):
                await self.ws.send_bytes(data)
            if item.is_final:
                break
        if tail := encoder.finish():
            await self.ws.send_bytes(tail)
        outcome.frames = item.frame_end
        outcome.finish_reason = item.finish_reason.value if item.finish_reason else None
        outcome.runaway_cause = item.runaway_cause.value if item.runaway_cause else None
        outcome.audio_seconds = encoder.seconds
        usage = {
            "input_tokens": job.input_tokens,
            "output_tokens": item.frame_end,
            "audio_seconds": round(encoder.seconds, 3),
        }
        failed = item.finish_reason in (FinishReason.ERROR, FinishReason.CANCELLED)
        record(self.state.metrics, outcome, 500 if failed else 200, item.error)
        self.totals["segments"] += 1
        self.totals["failed"] += int(failed)
        self.totals["input_tokens"] += usage["input_tokens"]
        self.totals["output_tokens"] += usage["output_tokens"]
        self.totals["audio_seconds"] = round(self.totals["audio_seconds"] + encoder.seconds, 3)
        if failed:
            await self.ws.send_json(
                {"type": "error", **E.server_error(item.error or "synthesis failed").body(), **where}
            )
        cause = {"runaway_cause": outcome.runaway_cause} if outcome.runaway_cause else {}
        await self.ws.send_json(
            {"type": "audio.done", **where, "finish_reason": outcome.finish_reason, **cause, "usage": usage}
        )

    async def finish(self) -> None:
        """session.close: flush, wait for every segment to be sent."""
        await self.flush()
        self.pending.put_nowait(None)
        await self.sender
        await self.ws.send_json({"type": "session.done", "usage": self.totals})

    async def abort(self) -> None:
        """The client is gone (or the session failed): cancel everything still generating."""
        tasks = [self.sender, *(s.task for s in self.active if s.task)]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


def _api_error(e: BaseException) -> E.APIError:
    if isinstance(e, E.APIError):
        return e
    if isinstance(e, QueueFullError):
        return E.queue_full(f"the engine queue is full: {e}", e.retry_after)
    if isinstance(e, EngineDeadError):
        return E.unavailable("the engine process has exited", "engine_dead")
    return E.bad_request(str(e), "max_new_tokens")


async def speech_stream(state: ServerState, ws: WebSocket) -> None:
    from .api import check_api_key  # the route lives in api.py; the key check is shared

    try:
        check_api_key(state, ws.headers.get("authorization") or _query_key(ws))
        if state.engine.dead or state.draining or not state.engine.ready:
            state.check_serving()
    except E.APIError as e:
        record(state.metrics, Outcome(ROUTE), e.status, e.message)
        if "websocket.http.response" in ws.scope.get("extensions", {}):
            await ws.send_denial_response(e.response())  # the client sees the HTTP status and body
        else:
            await ws.close(code=1008 if e.status == 401 else 1013, reason=e.message[:120])
        return
    await ws.accept()
    session: SpeechSession | None = None
    try:
        session = await _configure(state, ws)
        if session is None:
            return
        await ws.send_json(
            {
                "type": "session.created",
                "voice": session.config.voice.id
                if isinstance(session.config.voice, VoiceRef)
                else session.config.voice,
                "language": session.config.language or "auto",
                "format": "pcm",
                "sample_rate": state.sample_rate,
                "model": state.settings.model_name,
            }
        )
        while True:
            msg = await _receive(ws)
            if msg is None:
                continue
            if msg.type == "input.text":
                await session.add_text(msg.text or "")
            elif msg.type == "input.done":
                await session.flush()
            elif msg.type == "session.close":
                await session.finish()
                await ws.close()
                return
            else:
                await _error(ws, f"unknown message type '{msg.type}'", "type")
            if session.sender.done():  # the engine died under it
                session.sender.result()
    except WebSocketDisconnect:
        pass
    except EngineDeadError:
        with contextlib.suppress(Exception):
            await ws.close(code=1011, reason="the engine process has exited")
    finally:
        if session is not None:
            await session.abort()


async def _configure(state: ServerState, ws: WebSocket) -> SpeechSession | None:
    raw = await _receive_text(ws)
    try:
        head = msgspec.json.decode(raw, type=ClientMessage)
        if head.type != "session.config":
            raise E.bad_request("the first message must be session.config", "type")
        config = msgspec.json.decode(raw, type=SessionConfig)
        if config.response_format.lower() != "pcm":
            raise E.bad_request("the WebSocket route sends pcm (24 kHz s16le mono); allowed: pcm", "response_format")
        # Validate the voice, language, speed and sampling fields once, with a stand-in input.
        probe = SpeechBody(input="probe", **_fields(config))
        validate_speech(probe, state.frontend, state.voices, state.limits, "probe")
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        await _error(ws, f"invalid session.config: {e}", None)
        await ws.close(code=1003)
        return None
    except E.APIError as e:
        await ws.send_json({"type": "error", **e.body()})
        await ws.close(code=1003)
        return None
    return SpeechSession(state, ws, config)


async def _receive_text(ws: WebSocket) -> str | bytes:
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    return message.get("text") or message.get("bytes") or b""


async def _receive(ws: WebSocket) -> ClientMessage | None:
    raw = await _receive_text(ws)
    try:
        msg = msgspec.json.decode(raw, type=ClientMessage)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        await _error(ws, f"invalid message: {e}", None)
        return None
    return msg


async def _error(ws: WebSocket, message: str, param: str | None) -> None:
    await ws.send_json({"type": "error", **E.bad_request(message, param).body()})


def _query_key(ws: WebSocket) -> str | None:
    """Browsers cannot set headers on a WebSocket: `?api_key=` is accepted there instead."""
    key = ws.query_params.get("api_key")
    return f"Bearer {key}" if key else None


def _fields(config: SessionConfig) -> dict[str, Any]:
    return {f: getattr(config, f) for f in SessionConfig.__struct_fields__}
