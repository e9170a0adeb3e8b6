"""Long-form text in one request: a book chapter spoken as pieces, one after another, as one stream.

A text longer than `--long-form-chars` is cut at paragraph breaks and sentence ends into pieces the
model speaks reliably (segmenter.split_long_text); each piece is a request of its own, in the same
voice, with the request's seed plus the piece's index when the request is seeded. The next piece is
submitted when the current one starts, so its prefill and first frames are ready by the time the
current one's audio ends: the stream has no pause at a join but `--long-form-pause` seconds of
silence. The pieces' chunks come out as one request's: frame numbers run on across pieces, and only
the last piece's final chunk (or a failing piece's) is final.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from ..engine.request import AudioChunk, EngineRequest, FinishReason, QueueFullError

RETRY_S = 0.5  # how soon a piece refused by a full engine is offered again


@dataclass(frozen=True)
class Piece:
    """One piece of a long-form request."""

    index: int
    text: str
    request: EngineRequest


@dataclass(frozen=True)
class PieceDone:
    """A piece that has all of its audio out: what an SSE stream reports of it."""

    index: int
    text: str
    frames: int
    finish_reason: str | None


class Engine(Protocol):
    def synthesize(self, request: EngineRequest) -> AsyncIterator[AudioChunk]: ...


async def piece_chunks(
    engine: Engine,
    pieces: list[Piece],
    pause_samples: int,
    on_start: Callable[[int], None],
    on_done: Callable[[PieceDone], None],
) -> AsyncIterator[AudioChunk]:
    """The pieces' chunks as one request's, `pause_samples` of silence between pieces. `on_start(i)`
    when piece i's audio begins to be read, `on_done` when it is all out. Closing the iterator early
    cancels the pieces in the engine."""
    offset = 0
    current: AsyncIterator[AudioChunk] | None = None
    ahead: AsyncIterator[AudioChunk] | None = None
    try:
        for i, piece in enumerate(pieces):
            on_start(i)
            current, ahead = await _started(engine, piece.request, ahead, retry=i > 0), None
            last = i + 1 == len(pieces)
            if not last:  # the next piece is prefilled and generates while this one is heard
                ahead = engine.synthesize(pieces[i + 1].request)
            async for chunk in current:
                moved = replace(chunk, frame_start=chunk.frame_start + offset, frame_end=chunk.frame_end + offset)
                if not chunk.is_final:
                    yield moved
                    continue
                failed = chunk.finish_reason in (FinishReason.ERROR, FinishReason.CANCELLED)
                on_done(PieceDone(i, piece.text, chunk.frame_end, chunk.finish_reason))
                yield replace(moved, is_final=last or failed)
                if failed:
                    return
                offset = moved.frame_end
            if not last:
                silence = np.zeros(pause_samples, dtype=np.int16)
                yield AudioChunk(piece.request.request_id, silence, offset, offset)
    finally:
        for iterator in (current, ahead):
            if iterator is not None:
                await iterator.aclose()


async def _started(
    engine: Engine, request: EngineRequest, submitted: AsyncIterator[AudioChunk] | None, retry: bool
) -> AsyncIterator[AudioChunk]:
    """A piece's chunks once its first is there, from `submitted` or a new submission. With `retry`
    it is offered again while a full engine refuses it: a long-form request that has begun never
    fails for a busy moment between two of its pieces (its first piece is refused as any request)."""
    chunks = submitted if submitted is not None else engine.synthesize(request)
    while True:
        try:
            first = await anext(chunks)
        except QueueFullError as e:
            if not retry:
                raise
            await asyncio.sleep(min(RETRY_S, e.retry_after))
            chunks = engine.synthesize(request)
            continue
        return _prepend(first, chunks)


async def _prepend(first: AudioChunk, rest: AsyncIterator[AudioChunk]) -> AsyncIterator[AudioChunk]:
    try:
        yield first
        if not first.is_final:
            async for chunk in rest:
                yield chunk
    finally:
        await rest.aclose()


def piece_seed(seed: int | None, index: int) -> int | None:
    """A seeded long-form request's piece `index` is seeded `seed + index` (wrapping past 2^63 - 1):
    the same request gives the same audio, and no two pieces sample alike."""
    return None if seed is None else (seed + index) % (2**63)
