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

Every client's input is bounded: a message by `ws_max_message_bytes` (uvicorn closes the socket with
1009 past it), the text a session holds unspoken by `ws_max_buffered_chars` (a delta past it is
refused with an `error` event, and the session goes on). Segmentation is linear in the text, and a
large delta is segmented and tokenised in a worker thread, so one client never stalls the others.
A segment that fails for any reason ends with an `error` event and `audio.done` (finish_reason
`error`); a client that goes away, at any point, cancels everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import msgspec
from fastapi import WebSocket, WebSocketDisconnect

from ..engine.client import EngineDeadError
from ..engine.request import AudioChunk, QueueFullError, RequestTooLargeError
from ..sampling import SamplingOverrides
from . import errors as E
from .access import Outcome, record
from .audio_encoders import PcmEncoder
from .continuous import INLINE_DELTA_CHARS, INPUT_MODES, ContinuousInput
from .http import check_api_key, request_key
from .schema import SpeechBody, SpeechJob, VoiceRef, decode_json, new_request_id, validate_speech
from .segment import OpenUtterance, Segment
from .segmenter import SentenceSegmenter

if TYPE_CHECKING:
    from .state import ServerState

log = logging.getLogger("cadence.server")

ROUTE = "/v1/audio/speech/stream"
LOOKAHEAD = 2  # segments of a session generating or buffered at once
MAX_SEGMENT_CHARS = 400


class SessionConfig(SamplingOverrides, kw_only=True):
    """session.config: the speech fields that apply to every segment (input comes later), the
    sampling fields (SamplingOverrides) among them."""

    voice: str | VoiceRef | None = None  # custom_voice: a preset; base: a saved voice; voice_design: none
    model: str | None = None
    instructions: str | None = None
    response_format: str = "pcm"
    speed: float = 1.0
    language: str | None = None
    ignore_eos: bool = False  # every segment exactly max_new_tokens frames (benchmarking)
    input_mode: str = "sentence"  # sentence: each sentence spoken on its own; continuous: one utterance (continuous.py)


class ClientMessage(msgspec.Struct):
    type: str
    text: str | None = None


class SpeechSession(ContinuousInput):
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
        self.queued_chars = 0  # text of the active segments
        self.continuous = config.input_mode == "continuous"
        self.open: OpenUtterance | None = None  # continuous input: the utterance whose text is arriving
        self.totals = {"segments": 0, "failed": 0, "input_tokens": 0, "output_tokens": 0, "audio_seconds": 0.0}
        self.sender = asyncio.create_task(self._send_all(), name="cadence-ws-sender")

    # -- input ------------------------------------------------------------------------------------

    @property
    def buffered_chars(self) -> int:
        """Text taken in and not yet spoken: the unfinished sentence (or open utterance) and the
        segments not yet sent."""
        unfinished = len(self.open.received) if self.open is not None else self.segmenter.pending_chars
        return unfinished + self.queued_chars

    async def add_text(self, text: str) -> None:
        limit = self.state.settings.ws_max_buffered_chars
        if self.buffered_chars + len(text) > limit:
            err = E.too_large(
                f"this delta of {len(text)} characters would make the text waiting to be spoken "
                f"{self.buffered_chars + len(text)} characters; the limit is {limit}: the delta was dropped, "
                "send it again once audio has been received",
                "text",
            )
            await self._send_error(err)
            return
        if self.continuous:
            await self._continue(text)
            return
        arrival = time.monotonic()
        if len(text) > INLINE_DELTA_CHARS:
            prepared = await asyncio.to_thread(self._prepare, text)
        else:
            prepared = self._prepare(text)
        for sentence, job in prepared:
            await self._enqueue(sentence, job, arrival)

    async def flush(self) -> None:
        if self.continuous:
            await self._end_open()
        elif (rest := self.segmenter.flush()) is not None:
            await self._enqueue(rest, self._validate(rest), time.monotonic())
        self.utterance += 1
        self.sentence = 0

    def _prepare(self, text: str) -> list[tuple[str, SpeechJob | E.APIError]]:
        """Segment a delta and validate (tokenise) the sentences it completes; may run in a thread
        (one delta of a session at a time)."""
        return [(sentence, self._validate(sentence)) for sentence in self.segmenter.push(text)]

    def _validate(self, text: str, tokens: Any = None, text_open: bool = False) -> SpeechJob | E.APIError:
        body = SpeechBody(input=text, **_fields(self.config))
        try:
            state = self.state
            return validate_speech(
                body, state.frontend, state.voices, state.limits, new_request_id(), tokens=tokens, text_open=text_open
            )
        except E.APIError as e:
            return e

    async def _enqueue(
        self, text: str, job: SpeechJob | E.APIError, arrival: float, open: OpenUtterance | None = None
    ) -> Segment | None:
        if isinstance(job, E.APIError):
            await self._send_error(job, utterance_index=self.utterance, sentence_index=self.sentence)
            self.sentence += 1
            return None
        outcome = Outcome(
            ROUTE, job.request_id, job.voice, len(job.text), job.input_tokens, "pcm", "websocket", arrival
        )
        seg = Segment(job, self.utterance, self.sentence, outcome, chars=0 if open else len(text), open=open)
        self.sentence += 1
        seg.task = asyncio.create_task(self._generate(seg))
        self.active.add(seg)
        self.queued_chars += seg.chars
        self.pending.put_nowait(seg)
        return seg

    # -- synthesis --------------------------------------------------------------------------------

    async def _generate(self, seg: Segment) -> None:
        """Run one segment through the engine into its queue (holding a lookahead slot until sent).
        Whatever goes wrong reaches the sender as the segment's failure."""
        async with self.lookahead:
            try:
                self.state.check_serving()
                seg.outcome.submitted = time.monotonic()
                chunks = self.state.engine.synthesize(seg.job.request)
                if (utt := seg.open) is not None:  # its text so far, then straight to the engine
                    utt.submitted = True
                    for ids, done in utt.held:
                        self.state.engine.append_text(seg.job.request_id, ids, done, utt.committed)
                    utt.held.clear()
                async for chunk in chunks:
                    seg.queue.put_nowait(chunk)
            except Exception as e:
                if not isinstance(e, (E.APIError, QueueFullError, EngineDeadError, RequestTooLargeError)):
                    log.exception("request %s failed", seg.job.request_id)
                seg.queue.put_nowait(e)
            await seg.sent.wait()

    async def _send_all(self) -> None:
        while (seg := await self.pending.get()) is not None:
            try:
                await self._send_segment(seg)
            finally:
                seg.sent.set()
                self.active.discard(seg)
                self.queued_chars -= seg.chars

    async def _send_segment(self, seg: Segment) -> None:
        job, outcome = seg.job, seg.outcome
        encoder = PcmEncoder(self.state.sample_rate, job.speed)
        await self.ws.send_json(
            {
                "type": "audio.start",
                **seg.where,
                "text": job.text,
                "format": "pcm",
                "sample_rate": self.state.sample_rate,
            }
        )
        error: E.APIError | None = None
        item: AudioChunk | BaseException
        while True:
            item = await seg.queue.get()
            if isinstance(item, BaseException):
                error = _api_error(item, job)
                break
            if item.pcm.size:
                outcome.audio_arrived(item.timings)
            if data := encoder.encode(item.pcm):
                await self.ws.send_bytes(data)
            outcome.frames = item.frame_end
            if item.is_final:
                outcome.finish_reason = item.finish_reason.value if item.finish_reason else None
                outcome.runaway_cause = item.runaway_cause.value if item.runaway_cause else None
                error = E.chunk_error(item, self.state.drain_expired)
                break
        if error is None and (tail := encoder.finish()):
            await self.ws.send_bytes(tail)
        outcome.audio_seconds = encoder.seconds
        if error is not None:
            outcome.finish_reason = "error"
            await self.ws.send_json({"type": "error", **error.body(), **seg.where})
        record(self.state.metrics, outcome, error.status if error else 200, error.message if error else None)
        usage = {
            "input_tokens": job.input_tokens,
            "output_tokens": outcome.frames,
            "audio_seconds": round(encoder.seconds, 3),
        }
        self._count(usage, failed=error is not None)
        cause = {"runaway_cause": outcome.runaway_cause} if outcome.runaway_cause else {}
        done = {"type": "audio.done", **seg.where, "finish_reason": outcome.finish_reason, **cause, "usage": usage}
        if seg.open is not None:
            done["text"] = seg.open.received  # continuous input: the whole text it spoke
        await self.ws.send_json(done)
        if isinstance(item, EngineDeadError):  # nothing more can be spoken: end the session
            await self.ws.close(code=1011, reason="the engine process has exited")
            raise item

    def _count(self, usage: dict[str, Any], failed: bool) -> None:
        t = self.totals
        t["segments"] += 1
        t["failed"] += int(failed)
        t["input_tokens"] += usage["input_tokens"]
        t["output_tokens"] += usage["output_tokens"]
        t["audio_seconds"] = round(t["audio_seconds"] + usage["audio_seconds"], 3)

    async def _send_error(self, error: E.APIError, **where: int) -> None:
        await self.ws.send_json({"type": "error", **error.body(), **where})

    # -- the end ----------------------------------------------------------------------------------

    async def finish(self) -> None:
        """session.close: flush, wait for every segment to be sent (or the client to leave)."""
        await self.flush()
        self.pending.put_nowait(None)
        watcher = asyncio.ensure_future(self._refuse_input_until_disconnect())
        try:
            await asyncio.wait({self.sender, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if not self.sender.done():
            raise WebSocketDisconnect(1001)  # the client left before the last segment was sent
        self.sender.result()
        await self.ws.send_json({"type": "session.done", "usage": self.totals})

    async def _refuse_input_until_disconnect(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            await self._send_error(E.bad_request("the session is closing (session.close): no more input is taken"))

    async def abort(self) -> None:
        """The client is gone (or the session failed): cancel everything still generating."""
        tasks = [self.sender, *(s.task for s in self.active if s.task)]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def next_message(self) -> ClientMessage | None:
        """The client's next message, or the sender's failure if that comes first (the client's
        socket broke while audio was being sent, or the engine process died). An open continuous
        utterance whose text stops coming times out meanwhile (None is returned then)."""
        receive = asyncio.ensure_future(_receive(self.ws))
        deadline = self.input_deadline()
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            await asyncio.wait({receive, self.sender}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not receive.done():
                receive.cancel()
        if receive.done():
            return receive.result()
        if not self.sender.done():
            await self.input_timed_out()
            return None
        self.sender.result()  # raises what ended it
        raise RuntimeError("the session's sender ended before session.close")


def _api_error(e: BaseException, job: SpeechJob) -> E.APIError:
    if isinstance(e, E.APIError):
        return e
    if isinstance(e, QueueFullError):
        return E.queue_full(f"the engine queue is full: {e}", e.retry_after)
    if isinstance(e, EngineDeadError):
        return E.unavailable("the engine process has exited", "engine_dead")
    if isinstance(e, RequestTooLargeError):
        return job.too_large(e)
    return E.server_error(f"internal error: {type(e).__name__}")


async def speech_stream(state: ServerState, ws: WebSocket) -> None:
    try:
        check_api_key(state.settings.api_key, request_key(ws.headers, ws.query_params))
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
        if session is not None:
            await _serve(session)
    except WebSocketDisconnect:
        pass
    except EngineDeadError:
        with contextlib.suppress(Exception):
            await ws.close(code=1011, reason="the engine process has exited")
    except Exception:
        log.exception("WebSocket session failed")
        with contextlib.suppress(Exception):
            await ws.close(code=1011, reason="internal error")
    finally:
        if session is not None:
            await session.abort()


async def _serve(session: SpeechSession) -> None:
    ws = session.ws
    await ws.send_json(
        {
            "type": "session.created",
            "voice": session.config.voice.id if isinstance(session.config.voice, VoiceRef) else session.config.voice,
            "language": session.config.language or "auto",
            "format": "pcm",
            "sample_rate": session.state.sample_rate,
            "model": session.state.settings.model_name,
            "input_mode": session.config.input_mode,
        }
    )
    while True:
        msg = await session.next_message()
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


async def _configure(state: ServerState, ws: WebSocket) -> SpeechSession | None:
    raw = await _receive_text(ws)
    try:
        head = decode_json(raw, ClientMessage)
        if head.type != "session.config":
            raise E.bad_request("the first message must be session.config", "type")
        config = decode_json(raw, SessionConfig)
        if config.response_format.lower() != "pcm":
            raise E.bad_request("the WebSocket route sends pcm (24 kHz s16le mono); allowed: pcm", "response_format")
        if config.input_mode not in INPUT_MODES:
            raise E.bad_request(
                f"unknown input_mode '{config.input_mode}'; allowed: {', '.join(INPUT_MODES)}", "input_mode"
            )
        # Validate the voice, language, speed and sampling fields once, with a stand-in input.
        probe = SpeechBody(input="probe", **_fields(config))
        validate_speech(probe, state.frontend, state.voices, state.limits, "probe")
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
        return decode_json(raw, ClientMessage)
    except E.APIError as e:
        await ws.send_json({"type": "error", **e.body()})
        return None


async def _error(ws: WebSocket, message: str, param: str | None) -> None:
    await ws.send_json({"type": "error", **E.bad_request(message, param).body()})


def _fields(config: SessionConfig) -> dict[str, Any]:
    """The speech fields of a session's config (those a SpeechBody has)."""
    return {f: getattr(config, f) for f in SessionConfig.__struct_fields__ if f in SpeechBody.__struct_fields__}
