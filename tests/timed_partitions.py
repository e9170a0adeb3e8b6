"""Partitions whose walks take given times on a simulated device, in virtual time.

A GPU runs what the host queues on a stream one walk after another while the host goes on; the
engine core's scheduling decides how much is queued ahead of an arrival's prefill. These partitions
keep that queue in virtual time (a Clock the host's waits and the driver move forward), so a test
measures an arrival's wait in the schedule itself: deterministic, without a GPU and without the
wall clock. The Talker's walks (prefill, frame, advance) share one queue, its stream; the Codec's
chunks join that queue, or run on one of their own that starts a chunk only once the Talker's queue
has run what was queued before it (as a codec stream waits for the talker's).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch

from cadence.engine.core import EngineCore
from cadence.engine.kv_cache import PagedKVCache
from cadence.engine.partition import Admission, DecodeOutput, HostAudio
from cadence.engine.request import AudioChunk, EngineRequest
from tests.test_engine_schedule import NullTalker, RecordingCodec


@dataclass(frozen=True)
class WalkTimes:
    """Seconds each walk takes on the device, and the host's own time a step spends before its first
    launch (admission, inputs)."""

    prefill: float = 1.0e-3
    frame: float = 2.0e-3
    advance: float = 1.5e-3
    codec: float = 1.0e-3
    host: float = 0.2e-3

    @property
    def step(self) -> float:
        """One step's Talker walks on the device, a prefill included."""
        return self.prefill + self.frame + self.advance


@dataclass
class Clock:
    now: float = 0.0


@dataclass
class Job:
    name: str
    queued: float
    start: float
    end: float
    slots: tuple[int, ...]
    requests: tuple[str, ...] = ()  # a prefill's


@dataclass
class DeviceQueue:
    """One stream of the simulated device: jobs run in the order queued, each once the last is done."""

    clock: Clock
    free_at: float = 0.0
    jobs: list[Job] = field(default_factory=list)

    def run(
        self, name: str, seconds: float, slots: list[int], after: float = 0.0, requests: tuple[str, ...] = ()
    ) -> SimEvent:
        start = max(self.clock.now, self.free_at, after)
        self.free_at = start + seconds
        self.jobs.append(Job(name, self.clock.now, start, self.free_at, tuple(slots), requests))
        return SimEvent(self.clock, self.free_at)

    def busy(self) -> bool:
        return self.clock.now < self.free_at


@dataclass
class SimEvent:
    """A CUDA event's two calls: synchronize() is the host waiting for it (the clock moves on)."""

    clock: Clock
    at: float

    def query(self) -> bool:
        return self.clock.now >= self.at

    def synchronize(self) -> None:
        self.clock.now = max(self.clock.now, self.at)


class TimedTalker(NullTalker):
    """NullTalker's frames (random, never EOS), each walk a job of its given time on the Talker's
    queue. The frame walk's rest (advance) is kept back until the engine asks for it, as the fused
    walk does."""

    def __init__(self, max_slots: int, clock: Clock, times: WalkTimes):
        super().__init__(max_slots)
        self.kv = PagedKVCache(1, max_slots * 64 + 1, 16, 1, 1, torch.float32, torch.device("cpu"))
        self.queue = DeviceQueue(clock)
        self.times = times
        self._kept_back = False

    def prefill(self, admissions: list[Admission]) -> None:
        self.advance()
        ids = tuple(a.request.request_id for a in admissions)
        self.queue.run("prefill", self.times.prefill, [a.slot for a in admissions], requests=ids)

    def decode(self, slots: list[int]) -> DecodeOutput:
        self.advance()
        output = super().decode(slots)
        output.ready = self.queue.run("frame", self.times.frame, slots)
        self._kept_back = True
        return output

    def advance(self) -> None:
        if self._kept_back:
            self._kept_back = False
            self.queue.run("advance", self.times.advance, [])

    def busy(self) -> bool:
        return self.queue.busy()


class TimedCodec(RecordingCodec):
    """RecordingCodec's audio (a quiet tone of the right length), each chunk a job on the Talker's
    queue (one GPU's stream, as the codec runs colocated) or, `own_stream`, on a queue of its own,
    after what the Talker queued before it (its frames)."""

    def __init__(self, talker: TimedTalker, own_stream: bool = False):
        super().__init__()
        self.talker = talker
        self.queue = DeviceQueue(talker.queue.clock) if own_stream else talker.queue
        self._done: SimEvent | None = None

    def decode(self, slots: list[int], frames: torch.Tensor, finishing: bool = False) -> torch.Tensor:
        self._done = self.queue.run("codec", self.talker.times.codec, slots, after=self.talker.queue.free_at)
        return super().decode(slots, frames, finishing)

    def to_host(self, audio: torch.Tensor, codes: torch.Tensor | None = None) -> HostAudio:
        return HostAudio(audio, self._done, codes)


@dataclass
class Served:
    """What the driver saw of each request: when it came and when its first audio reached the host."""

    arrival: dict[str, float] = field(default_factory=dict)
    first_audio: dict[str, float] = field(default_factory=dict)
    step_starts: list[float] = field(default_factory=list)  # the host's, before its own part of the step

    def ttfa(self) -> dict[str, float]:
        return {rid: t - self.arrival[rid] for rid, t in self.first_audio.items()}


def serve(core: EngineCore, arrivals: list[tuple[float, EngineRequest]]) -> Served:
    """The engine process's loop (cadence/engine/process.py) in virtual time: each request taken in
    when it comes, a step whenever the core is ready, and while it is not the clock runs on to the
    device's end of work or the next arrival, whichever is first."""
    talker: TimedTalker = core.talker
    clock, times = talker.queue.clock, talker.times
    coming = deque(sorted(arrivals, key=lambda a: a[0]))
    served = Served()
    while coming or core.has_work():
        while coming and coming[0][0] <= clock.now:
            at, request = coming.popleft()
            core.add_request(request)
            served.arrival[request.request_id] = at
        next_arrival = coming[0][0] if coming else math.inf
        if not core.has_work():
            clock.now = next_arrival
        elif not core.ready():
            clock.now = min(talker.queue.free_at, next_arrival)
        else:
            served.step_starts.append(clock.now)
            clock.now += times.host
            _take(core.step(), clock, served)
    return served


def _take(chunks: list[AudioChunk], clock: Clock, served: Served) -> None:
    for chunk in chunks:
        if len(chunk.pcm) and chunk.request_id not in served.first_audio:
            served.first_audio[chunk.request_id] = clock.now
