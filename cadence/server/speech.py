"""One POST /v1/audio/speech from engine chunks to HTTP bytes: raw audio, SSE, or a whole file.

The status is chosen only once the first chunk exists (or the request failed), so a full queue, a
request too large for the KV cache or a dead engine still get their own status codes; the response
then streams each chunk through the format's encoder as it arrives. While waiting, a client that
goes away, or the per-request timeout, cancels the request in the engine.

After streaming has started, a failure can no longer change the status: an SSE stream ends with an
`error` event; a raw audio stream is cut off without its terminating chunk (AbortStream), so the
client sees an incomplete body rather than a short file that looks whole.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from ..engine.client import EngineDeadError
from ..engine.request import AudioChunk, QueueFullError, RequestTooLargeError
from . import errors as E
from .access import Outcome, record
from .audio_encoders import CONTENT_TYPES, make_encoder
from .http import AbortStream
from .long_form import PieceDone, piece_chunks
from .schema import SpeechJob

if TYPE_CHECKING:
    from .state import ServerState

log = logging.getLogger("cadence.server")

T = TypeVar("T")


class ClientGone(Exception):
    pass


class SpeechRun:
    """One request's trip through the engine, with its accounting (metrics and the access-log line)."""

    def __init__(self, state: ServerState, job: SpeechJob, request: Request, arrival: float, route: str):
        self.state = state
        self.job = job
        self.http = request
        self.deadline = arrival + state.settings.request_timeout
        self.chunks: AsyncIterator[AudioChunk] | None = None  # submitted at the first wait
        self.pieces_done: list[PieceDone] = []  # long-form input: the pieces whose audio is all out
        self.piece = 0  # long-form input: the piece whose audio is being read
        self.encoder = make_encoder(job.response_format, state.sample_rate, job.speed, streaming=job.stream)
        self.outcome = Outcome(
            route, job.request_id, job.voice, len(job.text), job.input_tokens, job.response_format,
            job.stream_format if job.stream else "none", arrival,
        )  # fmt: skip
        self._recorded = False

    # -- waiting on the engine --------------------------------------------------------------------

    async def next_chunk(self, watch_client: bool = False) -> AudioChunk:
        """The next chunk, within the deadline; maps engine refusals and failures to APIErrors.
        With `watch_client` (before a response exists, when nothing else would notice) a client
        that disconnects ends the wait with ClientGone."""
        try:
            if self.chunks is None:
                self.outcome.submitted = time.monotonic()
                self.chunks = self._submit()
            if watch_client:
                chunk = await self._race_client(anext(self.chunks))
            else:
                loop = asyncio.get_running_loop()
                async with asyncio.timeout_at(loop.time() + self.deadline - time.monotonic()):
                    chunk = await anext(self.chunks)
        except QueueFullError as e:
            raise E.queue_full(f"the engine queue is full: {e}", e.retry_after) from None
        except RequestTooLargeError as e:
            raise self.job.too_large(e) from None
        except EngineDeadError as e:
            raise E.unavailable(str(e), "engine_dead") from None
        except TimeoutError:
            raise E.timeout(
                f"no result within the request timeout ({self.state.settings.request_timeout:g} s)"
            ) from None
        except (ClientGone, E.APIError, asyncio.CancelledError):
            raise
        except Exception as e:  # an engine-client bug: this request fails, counted and logged, and no other
            log.exception("request %s failed", self.job.request_id)
            raise E.server_error(f"internal error: {type(e).__name__}") from None
        o = self.outcome
        o.frames = chunk.frame_end
        if chunk.pcm.size:
            o.audio_arrived(chunk.timings)
        if chunk.is_final:
            o.finish_reason = chunk.finish_reason.value if chunk.finish_reason else None
            o.runaway_cause = chunk.runaway_cause.value if chunk.runaway_cause else None
        return chunk

    def _submit(self) -> AsyncIterator[AudioChunk]:
        if not self.job.pieces:
            return self.state.engine.synthesize(self.job.request)
        settings = self.state.settings
        pause = round(settings.long_form_pause * self.state.sample_rate)
        return piece_chunks(self.state.engine, self.job.pieces, pause, self._piece_started, self.pieces_done.append)

    def _piece_started(self, index: int) -> None:
        """Each piece of a long-form request has the request timeout to itself."""
        self.piece = index
        if index:
            self.deadline = time.monotonic() + self.state.settings.request_timeout

    async def _race_client(self, awaitable: Awaitable[T]) -> T:
        task = asyncio.ensure_future(awaitable)
        gone = asyncio.ensure_future(_disconnected(self.http))
        try:
            done, _ = await asyncio.wait(
                {task, gone}, timeout=max(0.0, self.deadline - time.monotonic()), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            gone.cancel()
            if not task.done():
                task.cancel()  # the iterator's `finally` cancels the request in the engine
                await asyncio.wait([task])
        if task in done:
            return task.result()
        if gone in done:
            raise ClientGone()
        raise TimeoutError()

    async def close(self) -> None:
        """Cancel the request in the engine unless it has finished."""
        if self.chunks is None:
            return
        with contextlib.suppress(RuntimeError):  # still running in a task being cancelled: it cancels itself
            await self.chunks.aclose()

    # -- accounting -------------------------------------------------------------------------------

    def record(self, status: int, error: str | None = None) -> None:
        """Metrics and the access-log line, once per request."""
        if not self._recorded:
            self._recorded = True
            self.outcome.audio_seconds = self.encoder.seconds
            record(self.state.metrics, self.outcome, status, error)

    def record_cut(self) -> None:
        """The response was cut off: the client went away, or the drain timeout ran out."""
        if self.state.drain_expired:
            self.record(503, "cut off: the server shut down before the request finished (--drain-timeout)")
        else:
            self.record(499, "client disconnected")

    def failure(self, chunk: AudioChunk) -> E.APIError | None:
        """The error a final chunk that ends the request abnormally means for the client, or None."""
        return E.chunk_error(chunk, self.state.drain_expired)

    @property
    def where(self) -> dict[str, int]:
        """Long-form input: the piece whose audio is being sent (for SSE events); else nothing."""
        return {"piece": self.piece} if self.job.pieces else {}

    @property
    def finish_reason(self) -> str | None:
        return self.outcome.finish_reason

    def finish(self) -> dict[str, str]:
        """The finish reason, and with `runaway` the check of the runaway guard that stopped it."""
        out = {"finish_reason": self.outcome.finish_reason or ""}
        if self.outcome.runaway_cause:
            out["runaway_cause"] = self.outcome.runaway_cause
        return out

    def usage(self) -> dict[str, Any]:
        frames = self.outcome.frames
        return {
            "input_tokens": self.job.input_tokens,
            "output_tokens": frames,  # audio frames, 80 ms each
            "total_tokens": self.job.input_tokens + frames,
            "audio_seconds": round(self.encoder.seconds, 3),
        }


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def respond(state: ServerState, job: SpeechJob, request: Request, arrival: float, route: str) -> Response:
    """The HTTP answer to a validated speech request."""
    run = SpeechRun(state, job, request, arrival, route)
    headers = {"X-Request-Id": job.request_id, "X-Usage-Input-Tokens": str(job.input_tokens)}
    if job.instructions_ignored:
        size = state.frontend.capabilities().size_label
        headers["Warning"] = f'299 cadence "instructions are ignored: the {size} model does not take them"'
    try:
        first = await run.next_chunk(watch_client=True)
        if (error := run.failure(first)) is not None:
            raise error
        if not job.stream:
            return await _whole(run, first, headers)
    except ClientGone:
        run.record(499, "client disconnected while queued")
        return Response(status_code=499)
    except E.APIError as e:
        await run.close()
        run.record(e.status, e.message)
        if e.status >= 500:
            log.error("request %s: %s", job.request_id, e.message)
        return e.response(headers)
    if job.stream_format == "sse":
        return StreamingResponse(_sse_body(run, first), media_type="text/event-stream", headers=headers)
    return StreamingResponse(_audio_body(run, first), media_type=CONTENT_TYPES[job.response_format], headers=headers)


async def _whole(run: SpeechRun, first: AudioChunk, headers: dict[str, str]) -> Response:
    """stream: false — the whole file, with the finish reason and usage in headers."""
    parts = [run.encoder.encode(first.pcm)]
    chunk = first
    while not chunk.is_final:
        chunk = await run.next_chunk(watch_client=True)
        parts.append(run.encoder.encode(chunk.pcm))
    if (error := run.failure(chunk)) is not None:
        raise error
    parts.append(run.encoder.finish())
    usage = run.usage()
    headers = {
        **headers,
        "X-Finish-Reason": run.finish_reason or "",
        **({"X-Runaway-Cause": run.outcome.runaway_cause} if run.outcome.runaway_cause else {}),
        "X-Usage-Output-Tokens": str(usage["output_tokens"]),
        "X-Usage-Total-Tokens": str(usage["total_tokens"]),
        "X-Audio-Seconds": f"{usage['audio_seconds']:.3f}",
    }
    run.record(200)
    return Response(b"".join(parts), media_type=CONTENT_TYPES[run.job.response_format], headers=headers)


async def _chunks(run: SpeechRun, first: AudioChunk) -> AsyncIterator[AudioChunk]:
    """The request's chunks; a final chunk that ends it abnormally raises its APIError."""
    chunk = first
    while True:
        if chunk.is_final and (error := run.failure(chunk)) is not None:
            raise error
        yield chunk
        if chunk.is_final:
            return
        chunk = await run.next_chunk()


async def _audio_body(run: SpeechRun, first: AudioChunk) -> AsyncIterator[bytes]:
    error: E.APIError | None = None
    try:
        try:
            async for chunk in _chunks(run, first):
                if data := run.encoder.encode(chunk.pcm):
                    yield data
            if tail := run.encoder.finish():
                yield tail
        except E.APIError as e:
            error = e
    except (asyncio.CancelledError, GeneratorExit):
        await run.close()
        run.record_cut()
        raise
    await run.close()
    if error is None:
        run.record(200)
        return
    log.error("request %s failed after streaming started: %s", run.job.request_id, error.message)
    run.record(error.status, error.message)
    raise AbortStream(error.message)


async def _sse_body(run: SpeechRun, first: AudioChunk) -> AsyncIterator[bytes]:
    error: E.APIError | None = None
    try:
        try:
            reported = 0
            async for chunk in _chunks(run, first):
                if data := run.encoder.encode(chunk.pcm):
                    yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode(), **run.where})
                for done in run.pieces_done[reported:]:  # long-form input: each piece as it ends
                    yield _event({"type": "speech.piece.done", **asdict(done)})
                reported = len(run.pieces_done)
            if tail := run.encoder.finish():
                yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(tail).decode(), **run.where})
            done_event = {"type": "speech.audio.done", "usage": run.usage(), **run.finish()}
            yield _event(done_event | ({"pieces": len(run.job.pieces)} if run.job.pieces else {}))
        except E.APIError as e:
            error = e
            log.error("request %s failed after streaming started: %s", run.job.request_id, e.message)
            yield _event({"type": "error", **e.body(), **run.where})
    except (asyncio.CancelledError, GeneratorExit):
        await run.close()
        run.record_cut()
        raise
    await run.close()
    run.record(error.status if error else 200, error.message if error else None)


def _event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()
