"""The engine core: one synchronous step at a time over the Talker and Codec partitions.

It is also the *conductor*: it owns each request's life (queue, admission, walk transitions, stop,
cancellation, delivery of audio chunks). It knows nothing of HTTP or asyncio; `engine.py` drives it
from a thread, the server from its own process.

One step:
1. cancellations;
2. admission: while a slot and enough KV pages are free, under the prefill token budget;
3. talker_prefill for the admitted, then talker_decode for every running stream (the admitted
   included), so a new request gets its first frame in the step that admits it;
4. the previous step's decode walk read back (its host copies landed while this step's walk was
   queued: the host never waits inside a decode walk) and its stop checks: EOS (the EOS frame is
   not audio), max_new_tokens, runaway guard. A stop is thus acted on one step late: the stream's
   extra frame is dropped;
5. codec_chunk for every stream whose chunk policy is satisfied, batched by chunk size. Frames go
   to the codec from a ring on the Talker's device; a stream's first frames, which cannot be EOS,
   go before their read-back, and its first chunk is collected at the end of the step that admits
   it, so first audio waits for no extra step (later chunks are collected in the next step);
6. finished streams: final chunk, KV pages, slot and codec state freed.

With `step_on_idle` a step is queued on the Talker's device only once the last one has run there
(ready()); the caller takes requests in while it waits, so an arrival waits for at most the step
in flight before its prefill runs, never for another queued behind it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import torch

from ..audio import to_int16
from .config import EngineConfig
from .partition import Admission, CodecPartition, TalkerPartition
from .request import (
    AudioChunk,
    EngineRequest,
    EngineStats,
    FinishReason,
    QueueFullError,
    RequestTooLargeError,
    RunawayCause,
    Timings,
)
from .runaway import LoopDetector, dbfs
from .stream import CodecLaunch, Stream, Walk
from .transfer import to_device

log = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, talker: TalkerPartition, codec: CodecPartition, config: EngineConfig):
        self.talker = talker
        self.codec = codec
        self.config = config
        self.waiting: deque[Stream] = deque()
        self.running: dict[int, Stream] = {}
        self.free_slots = list(range(talker.max_slots - 1, -1, -1))
        self.streams: dict[str, Stream] = {}
        self.loops = LoopDetector(talker.max_slots, config.runaway)
        self._cancelled: set[str] = set()
        self.stats = EngineStats(kv_pages_total=talker.kv.num_pages)
        # Frames not yet through the codec, kept on the Talker's device ([slot, frame % depth, codes])
        # so that they reach the Codec's device in one copy; allocated at the first decode walk.
        self._ring: torch.Tensor | None = None
        # > the most frames ever pending: a full chunk waiting, one more step's, and two unread walks
        self._ring_depth = 2 * config.chunk_policy.max_chunk_frames + 4
        self._walk: Walk | None = None  # the last decode walk, read back in the next step
        self._codec_in_flight: list[CodecLaunch] = []  # the last step's codec walks, collected in the next
        self._eos_free = talker.eos_free_frames
        self._step_seconds = 0.0  # a moving average of loaded steps' duration (the deadline chunk policy)
        self._held_since: float | None = None  # when ready() first held the coming step back

    # -- requests in ------------------------------------------------------------------------------

    def add_request(self, request: EngineRequest, arrival: float | None = None) -> None:
        if request.request_id in self.streams:
            raise ValueError(f"duplicate request id {request.request_id}")
        if len(self.waiting) >= self.config.max_queue + len(self.free_slots):
            raise QueueFullError(
                f"queue full ({len(self.waiting)} waiting for {len(self.free_slots)} free slots)",
                retry_after=self._retry_after(),
            )
        guard = self.config.runaway
        budget = request.params.max_new_tokens
        runaway = False
        if guard.enabled and not request.ignore_eos:
            # Text still arriving may grow to max_input_tokens: its pages are reserved for that, and
            # its frame budget follows the text as it comes (append_text).
            tokens = self.config.max_input_tokens if request.text_open else request.prompt.num_text_tokens
            text_budget = guard.frame_budget(tokens)
            runaway = text_budget < budget and not request.text_open
            budget = min(budget, text_budget)
        stream = Stream(request, Timings(arrival or time.monotonic()), budget, runaway)
        stream.text_len, stream.text_done = len(request.prompt.trailing_text), not request.text_open
        stream.text_tokens = request.prompt.num_text_tokens
        tokens = self.talker.tokens_to_reserve(request, budget)
        if not self.talker.fits(tokens):
            raise RequestTooLargeError(
                f"the request needs {tokens} KV tokens (a {len(request.prompt)}-token prompt and up to {budget} "
                "frames): more than one sequence may hold or the whole cache",
                prompt_too_long=not self.talker.fits(self.talker.tokens_to_reserve(request, 1)),
            )
        self.streams[request.request_id] = stream
        self.waiting.append(stream)

    def cancel(self, request_id: str) -> None:
        self._cancelled.add(request_id)

    def append_text(self, request_id: str, ids: list[int], done: bool, text_tokens: int) -> None:
        """More trailing text of a request whose text is still arriving (and, `done`, the last of it,
        ending with the model's end of text). `text_tokens`: the request's text tokens so far. A
        request that has finished or is unknown (cancelled, failed) ignores it."""
        stream = self.streams.get(request_id)
        if stream is None or stream.finish is not None:
            return
        if stream.text_done:
            raise ValueError(f"request {request_id} has all of its text already")
        if stream.slot >= 0:
            try:
                self.talker.append_text(stream.slot, stream.text_len, ids)
            except ValueError as e:
                self._fail(stream, e)
                return
        else:
            stream.held_text += ids
        stream.text_len += len(ids)
        stream.text_tokens = text_tokens
        if done:
            stream.text_done = True
            guard = self.config.runaway
            text_budget = guard.frame_budget(text_tokens)
            if guard.enabled and not stream.request.ignore_eos and text_budget < stream.max_frames:
                stream.max_frames = max(stream.walks, text_budget)
                stream.budget_is_runaway = True

    def has_work(self) -> bool:
        """Anything to step: streams to admit, cancel, decode, read back or decode audio for. A
        stream waiting for text it does not have yet is none of these."""
        if self.waiting or self._cancelled or self._walk or self._codec_in_flight:
            return True
        return any(not s.waits_for_text() or s.pending(self._eos_free) for s in self.running.values())

    def ready(self) -> bool:
        """Whether to step now. With step_on_idle the next step waits while the Talker's device
        still runs the last one, and the caller takes requests in meanwhile: the step then admits
        them onto an idle device, so an arrival's prefill and first frame wait for at most the step
        that was running when it came. The device is only idle for the host's launch of the next
        step, since each step's host work (read-back, codec collection, chunk delivery) overlaps
        its own walks."""
        if not self.config.step_on_idle or not self.talker.busy():
            return True
        if self._held_since is None:
            self._held_since = time.monotonic()
        return False

    def _retry_after(self) -> float:
        """A hint for 429 answers: seconds until a queue place is likely to free up."""
        return max(1.0, round(self.stats.last_step_seconds * 50, 1))

    # -- one step ---------------------------------------------------------------------------------

    def step(self) -> list[AudioChunk]:
        start = time.monotonic()
        # A step's time counts from when ready() first held it back: the wait for the device that
        # the step would otherwise have spent inside (the deadline policy's step, the step metric).
        began = self._held_since if self._held_since is not None else start
        self._held_since = None
        out: list[AudioChunk] = []
        self._apply_cancellations(out)
        # Pipelined: chunks after a stream's first are launched before the talker runs, on the frames
        # of earlier steps, so codec and talker work at once (on their own CUDA streams or devices;
        # launches are asynchronous and each partition waits only for its own). First chunks and
        # final flushes wait for this step's frames: pipelining never delays first audio.
        pipelined = bool(self.config.pipeline_codec)
        if pipelined:
            self._collect_codec(out)  # first: the early launches select streams by what was decoded
        launches = self._launch_codec(lambda s: s.chunks > 0 and s.finish is None) if pipelined else []
        admitted = self._admit(start)
        if admitted:
            self._prefill(admitted)
        previous, self._walk = self._walk, self._decode()
        # The last step's codec walks, their audio queued for the host behind them: waited for only
        # now, with the walk just launched queued behind, the device stays busy while the host turns
        # the audio into chunks (and, in the server, sends them). Then the next ones launch.
        self._collect_codec(out)
        if previous is not None:
            self._read_back(previous)
        in_flight = {id(s) for launch in launches for s in launch.streams}
        launches += self._launch_codec(lambda s: id(s) not in in_flight)
        self._codec_in_flight = launches
        self._advance()
        # A stream's first chunk is its time to first audio: waited for in the step that launched
        # it, with the talker's advance queued behind it, rather than a whole step later as the
        # other chunks are (they overlap the next step's launches).
        if first := [launch for launch in launches if any(s.chunks == 0 for s in launch.streams)]:
            self._collect_codec(out, first)
        self._finish(out)
        self.stats.steps += 1
        self.stats.last_step_seconds = time.monotonic() - began
        if self.running:  # idle steps say nothing about how long a loaded one takes
            self._step_seconds += 0.2 * (self.stats.last_step_seconds - self._step_seconds)
        self.stats.running = len(self.running)
        self.stats.waiting = len(self.waiting)
        self.stats.kv_pages_used = self.talker.kv.used_pages
        return out

    def _apply_cancellations(self, out: list[AudioChunk]) -> None:
        for rid in self._cancelled:
            stream = self.streams.get(rid)
            if stream is None or stream.finish is not None:
                continue
            stream.stop(FinishReason.CANCELLED, keep_pending=False)
            if stream.slot < 0:  # still waiting: nothing allocated
                self.waiting.remove(stream)
                self._close(stream, out)
        self._cancelled.clear()

    def _admit(self, now: float) -> list[Admission]:
        admitted: list[Admission] = []
        budget = self.config.prefill_token_budget
        while self.waiting and self.free_slots:
            stream = self.waiting[0]
            prompt_len = len(stream.request.prompt)
            if admitted and prompt_len > budget:
                break  # the rest waits for the next step: running streams stall at most one budget
            pages = self.talker.kv.allocate(
                self.talker.kv.pages_for(self.talker.tokens_to_reserve(stream.request, stream.max_frames))
            )
            if pages is None:
                break  # FIFO: the head waits for pages rather than being overtaken
            self.waiting.popleft()
            budget -= prompt_len
            stream.slot, stream.pages = self.free_slots.pop(), pages
            stream.timings.admitted = now
            self.running[stream.slot] = stream
            self.loops.reset(stream.slot)
            admitted.append(Admission(stream.slot, stream.request, pages))
        return admitted

    def _prefill(self, admitted: list[Admission]) -> None:
        try:
            self.talker.prefill(admitted)
            self.codec.reset([a.slot for a in admitted], [a.request for a in admitted])
        except Exception:
            log.exception("batched prefill failed; retrying requests one by one")
            for a in admitted:  # isolate the culprit: one bad request must not fail the others
                try:
                    self.talker.prefill([a])
                    self.codec.reset([a.slot], [a.request])
                except Exception as e:
                    log.exception("prefill of request %s failed", a.request.request_id)
                    self._fail(self.running[a.slot], e)
        for a in admitted:  # text that arrived while the request waited for its slot
            stream = self.running[a.slot]
            if stream.held_text and stream.finish is None:
                held, stream.held_text = stream.held_text, []
                try:
                    self.talker.append_text(a.slot, len(a.request.prompt.trailing_text), held)
                except ValueError as e:
                    self._fail(stream, e)

    def _decode(self) -> Walk | None:
        """Launch talker_decode for every running stream with frames to go; returns without waiting."""
        streams = [
            s for s in self.running.values() if s.finish is None and s.walks < s.max_frames and not s.waits_for_text()
        ]
        if not streams:
            return None
        try:
            output = self.talker.decode([s.slot for s in streams])
            self._keep_on_device(streams, output.device_frames)
        except Exception as e:
            # A batched walk has no per-request culprit; fail this step's streams, keep the engine.
            log.exception("talker decode failed for %d streams", len(streams))
            for s in streams:
                self._fail(s, e)
            return None
        now = time.monotonic()
        for s in streams:
            s.walks += 1
            if s.timings.first_frame is None:
                s.timings.first_frame = now  # queued; the codec may take it at once (never EOS)
            if s.request.ignore_eos and s.walks == s.max_frames:
                # Nothing its read-back could change (no EOS, no loop watch): it ends now, so its last
                # frames go out in this step's final chunk rather than an empty one a step later.
                s.frames = s.walks
                s.stop_at_max_frames()
        return Walk(streams, output)

    def _advance(self) -> None:
        """The rest of this step's decode walk (what only the next walk needs), queued after its
        frames' codec chunks so that first audio does not wait for it."""
        try:
            self.talker.advance()
        except Exception as e:
            log.exception("talker decode failed")
            for s in self._walk.streams if self._walk is not None else []:
                self._fail(s, e)

    def _read_back(self, walk: Walk) -> None:
        """A walk's frames and EOS flags on the host: stops acted on (one step late) and the loop
        detector fed. Rows of streams stopped meanwhile (a late stop, cancelled, failed) are dropped."""
        try:
            walk.output.wait()
        except Exception as e:  # an asynchronous device error surfaces here
            log.exception("talker decode failed for %d streams", len(walk.streams))
            for s in walk.streams:
                self._fail(s, e)
            return
        eos = walk.output.eos.numpy()
        frames = walk.output.frames.numpy()
        watched: list[int] = []  # rows whose code0 the loop detector sees
        for i, stream in enumerate(walk.streams):
            if stream.finish is not None:
                continue
            if eos[i]:
                stream.stop(FinishReason.STOP)
                continue
            stream.frames += 1
            if stream.frames >= stream.max_frames:
                stream.stop_at_max_frames()
            elif not stream.request.ignore_eos:
                watched.append(i)
        if watched:
            live = np.array([walk.streams[i].slot for i in watched], dtype=np.int64)
            self.loops.push(live, frames[watched, 0].astype(np.int64))
            for row in np.flatnonzero(self.loops.looping(live)):
                stream = walk.streams[watched[row]]
                log.warning("request %s: code0 loop detected, stopping (runaway)", stream.id)
                stream.stop(FinishReason.RUNAWAY, cause=RunawayCause.LOOP)

    def _keep_on_device(self, streams: list[Stream], frames: torch.Tensor) -> None:
        """Write this walk's frames into the ring, at each stream's next frame index (an EOS frame or
        a dropped extra frame is written too, past the stream's audio: it is never read)."""
        if self._ring is None:
            shape = (self.talker.max_slots, self._ring_depth, frames.shape[1])
            self._ring = torch.zeros(shape, dtype=frames.dtype, device=frames.device)
        if max(s.walks - s.decoded for s in streams) >= self._ring_depth:
            raise RuntimeError("more frames pending than the frame ring holds")  # an engine bug
        dev = frames.device
        slots = to_device([s.slot for s in streams], dev)
        positions = to_device([s.walks % self._ring_depth for s in streams], dev)
        self._ring[slots, positions] = frames

    def _codec_input(self, streams: list[Stream], size: int) -> torch.Tensor:
        """The next `size` frames of each stream, [B, size, codes], on the Codec's device: gathered
        from the ring and copied device to device."""
        dev = self._ring.device
        slots = to_device([s.slot for s in streams], dev)[:, None]
        first = to_device([s.decoded for s in streams], dev)[:, None]
        positions = (first + torch.arange(size, device=dev)) % self._ring_depth
        return self._ring[slots, positions].to(self.codec.device, non_blocking=True)

    def _launch_codec(self, select: Callable[[Stream], bool] = lambda s: True) -> list[CodecLaunch]:
        """codec_chunk for every selected stream whose chunk policy is met, batched by chunk size; the
        audio stays on the Codec's device until _collect_codec."""
        groups: dict[tuple[int, bool], list[Stream]] = {}
        policy, now = self.config.chunk_policy, time.monotonic()
        for stream in self.running.values():
            n = stream.pending(self._eos_free)
            if n == 0 or not select(stream):
                continue
            if stream.finish is not None:
                size = n  # finishing: flush what is left
            elif stream.waits_for_text():
                size = min(1 << (n.bit_length() - 1), policy.max_chunk_frames)  # its audio now, in graph sizes
            elif n >= (target := policy.chunk_size(stream.chunks)):
                size = target
            elif policy.deadline and stream.timings.first_chunk is not None:
                size = policy.ready(n, target, self._audio_ahead(stream, now), self._step_seconds)
            else:
                continue
            if size == 0:
                continue
            groups.setdefault((size, stream.finish is not None), []).append(stream)
        launches = []
        # Groups holding a stream's first chunk (time to first audio) go first: queued behind larger
        # chunks of other streams, a first chunk would wait for their decode too.
        order = sorted(groups.items(), key=lambda item: not any(s.chunks == 0 for s in item[1]))
        for (size, finishing), streams in order:
            try:
                frames = self._codec_input(streams, size)
                audio = self.codec.decode([s.slot for s in streams], frames, finishing)
            except Exception as e:
                log.exception("codec chunk failed for %d streams", len(streams))
                for s in streams:
                    self._fail(s, e)
                continue
            codes = frames if self.config.return_codes else None
            launches.append(CodecLaunch(size, streams, self.codec.to_host(audio, codes)))
            self.stats.codec_calls += 1
            self.stats.codec_frames += size * len(streams)
        return launches

    def _audio_ahead(self, stream: Stream, now: float) -> float:
        """Seconds of the stream's audio not yet played, if playback began with its first chunk."""
        frame_seconds = self.codec.samples_per_frame / self.codec.sample_rate
        return stream.decoded * frame_seconds - (now - stream.timings.first_chunk)

    def _collect_codec(self, out: list[AudioChunk], launches: list[CodecLaunch] | None = None) -> None:
        """Audio chunks of the codec walks in flight, or of `launches` among them (waits for their
        copies to the host)."""
        if launches is None:
            launches, self._codec_in_flight = self._codec_in_flight, []
        else:
            taken = {id(launch) for launch in launches}
            self._codec_in_flight = [launch for launch in self._codec_in_flight if id(launch) not in taken]
        for launch in launches:
            size, streams = launch.size, launch.streams
            try:
                audio = launch.audio.wait()
            except Exception as e:  # an asynchronous device error surfaces here
                log.exception("codec chunk failed for %d streams", len(streams))
                for s in streams:
                    self._fail(s, e)
                continue
            now = time.monotonic()
            pcm = to_int16(audio)  # the whole batch at once
            codes = launch.audio.codes.numpy() if launch.audio.codes is not None else None
            for i, (stream, wav) in enumerate(zip(streams, audio, strict=True)):
                if stream.finish in (FinishReason.ERROR, FinishReason.CANCELLED):
                    continue  # failed or cancelled while its chunk was in flight: no more audio
                start = stream.decoded
                stream.decoded += size
                stream.chunks += 1
                if stream.timings.first_chunk is None:
                    stream.timings.first_chunk = now
                self._check_silence(stream, wav)
                out.append(
                    AudioChunk(stream.id, pcm[i], start, stream.decoded, timings=stream.timings,
                               prompt_tokens=len(stream.request.prompt), codes=None if codes is None else codes[i])
                )  # fmt: skip

    def _check_silence(self, stream: Stream, wav: np.ndarray) -> None:
        guard = self.config.runaway
        if not guard.enabled or guard.silence_seconds <= 0 or stream.request.ignore_eos:
            return
        if dbfs(wav) < guard.silence_dbfs:
            stream.silent_samples += wav.size
        else:
            stream.silent_samples = 0
        if stream.finish is None and stream.silent_samples >= guard.silence_seconds * self.codec.sample_rate:
            log.warning("request %s: %.1f s of silence, stopping (runaway)", stream.id, guard.silence_seconds)
            stream.stop(FinishReason.RUNAWAY, keep_pending=False, cause=RunawayCause.SILENCE)

    def _fail(self, stream: Stream, error: Exception) -> None:
        stream.stop(FinishReason.ERROR, keep_pending=False)
        stream.error = f"{type(error).__name__}: {error}"

    def _finish(self, out: list[AudioChunk]) -> None:
        done = [s for s in self.running.values() if s.finish is not None and not s.pending(self._eos_free)]
        for stream in done:
            del self.running[stream.slot]
            self.talker.kv.release(stream.pages)
            self.talker.release(stream.slot)
            self.free_slots.append(stream.slot)
            self._close(stream, out)

    def _close(self, stream: Stream, out: list[AudioChunk]) -> None:
        """Mark the stream's last chunk final (or send an empty final chunk) and forget it."""
        stream.timings.finished = time.monotonic()
        last = next((c for c in reversed(out) if c.request_id == stream.id), None)
        if last is None:
            last = AudioChunk(stream.id, np.zeros(0, dtype=np.int16), stream.decoded, stream.decoded,
                              timings=stream.timings, prompt_tokens=len(stream.request.prompt))  # fmt: skip
            out.append(last)
        last.is_final = True
        last.finish_reason = stream.finish
        last.runaway_cause = stream.runaway_cause
        last.error = stream.error
        self.stats.finished[stream.finish.value] = self.stats.finished.get(stream.finish.value, 0) + 1
        del self.streams[stream.id]
