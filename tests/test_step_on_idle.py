"""EngineConfig.step_on_idle: the real EngineCore over partitions whose walks take given times on a
simulated device (tests/timed_partitions.py), so an arrival's wait is read from the schedule in
virtual time. With the policy an arrival's prefill waits for at most the step that was on the
device when it came; without it, also for the step the host queued behind that one."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import torch
import zmq

from cadence.engine import protocol as P
from cadence.engine.config import EngineConfig
from cadence.engine.core import EngineCore
from cadence.engine.kv_cache import PagedKVCache
from cadence.engine.process import EngineLoop
from cadence.engine.request import EngineRequest
from cadence.models.qwen3_tts.prompt import Prompt
from cadence.models.qwen3_tts.sampling import SamplingParams
from tests.test_engine_schedule import NullTalker, RecordingCodec, request
from tests.timed_partitions import Clock, Job, Served, TimedCodec, TimedTalker, WalkTimes, serve

PROMPT_TOKENS = 40
TIMES = WalkTimes(prefill=1.0e-3, frame=2.0e-3, advance=1.5e-3, codec=1.0e-3, host=0.2e-3)


def poisson(rate: float, seconds: float, frames: int, seed: int = 0) -> list[tuple[float, EngineRequest]]:
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=int(rate * seconds * 2) + 10)
    times = np.cumsum(gaps)
    return [(float(t), request(i, frames, PROMPT_TOKENS)) for i, t in enumerate(times[times < seconds])]


def run(step_on_idle: bool, arrivals: list[tuple[float, EngineRequest]], codec_stream: bool = False):
    talker = TimedTalker(64, Clock(), TIMES)
    config = EngineConfig(step_on_idle=step_on_idle, pipeline_codec=codec_stream)
    core = EngineCore(talker, TimedCodec(talker, own_stream=codec_stream), config)
    return core, talker, serve(core, arrivals)


def prefills(talker: TimedTalker) -> list[Job]:
    return [job for job in talker.queue.jobs if job.name == "prefill"]


def prefill_waits(talker: TimedTalker, served: Served) -> list[float]:
    """Each request's wait from its arrival to its prefill starting on the device."""
    return [job.start - served.arrival[rid] for job in prefills(talker) for rid in job.requests]


@pytest.mark.parametrize("codec_stream", [False, True], ids=["colocated", "codec-stream"])
@pytest.mark.parametrize("rate", [20.0, 100.0])
def test_an_arrival_is_prefilled_by_the_next_step_on_an_idle_device(rate: float, codec_stream: bool):
    arrivals = poisson(rate, 1.0, frames=30)
    _, talker, served = run(True, arrivals, codec_stream)
    assert len(served.first_audio) == len(arrivals)  # everyone got audio
    assert sorted(rid for job in prefills(talker) for rid in job.requests) == sorted(served.arrival)
    starts = np.array(served.step_starts)
    for job in prefills(talker):
        assert job.start == job.queued  # nothing was queued ahead of it
        for rid in job.requests:  # by the first step to begin after the request came
            first = np.searchsorted(starts, served.arrival[rid])
            assert starts[first] <= job.queued and (first + 1 == len(starts) or job.queued < starts[first + 1])


@pytest.mark.parametrize("codec_stream", [False, True], ids=["colocated", "codec-stream"])
def test_without_it_an_arrival_also_waits_for_the_step_queued_behind(codec_stream: bool):
    arrivals = poisson(100.0, 1.0, frames=30)
    _, talker_on, on = run(True, arrivals, codec_stream)
    _, talker_off, off = run(False, arrivals, codec_stream)
    assert any(job.start > job.queued for job in prefills(talker_off))  # queued behind the next step
    assert max(prefill_waits(talker_off, off)) > max(prefill_waits(talker_on, on))
    ttfa_on, ttfa_off = on.ttfa(), off.ttfa()
    assert np.mean(list(ttfa_on.values())) < np.mean(list(ttfa_off.values()))
    assert np.percentile(list(ttfa_on.values()), 95) < np.percentile(list(ttfa_off.values()), 95)


def test_the_device_idles_only_for_the_hosts_launch_of_each_step():
    """Streams admitted together and run to their end: between one step's Talker walks and the next
    the device waits for no more than the host's part of a step."""
    arrivals = [(0.0, request(i, 40, PROMPT_TOKENS)) for i in range(8)]
    _, talker, served = run(True, arrivals)
    jobs = talker.queue.jobs
    idle = [b.start - a.end for a, b in zip(jobs, jobs[1:], strict=False) if b.start > a.end]
    assert max(idle, default=0.0) <= TIMES.host + 1e-12
    assert len(served.first_audio) == 8


class HeldTalker(NullTalker):
    """A Talker whose device is busy while `held` is set; counts the loop's questions."""

    def __init__(self, max_slots: int):
        super().__init__(max_slots)
        self.kv = PagedKVCache(1, 1024, 16, 1, 1, torch.float32, torch.device("cpu"))  # a long stream fits
        self.held = threading.Event()
        self.asked = 0

    def busy(self) -> bool:
        self.asked += 1
        return self.held.is_set()


def test_the_engine_loop_takes_requests_in_while_the_device_runs_the_last_step():
    """The engine process's loop over real ZMQ sockets: while the device is busy it steps no more, yet
    a request sent meanwhile reaches the core at once, and is admitted by the step that follows."""
    ctx = zmq.Context()
    send, inbox = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    outbox, receive = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    inbox.bind("inproc://engine-in")
    send.connect("inproc://engine-in")
    receive.bind("inproc://engine-out")
    outbox.connect("inproc://engine-out")
    talker = HeldTalker(4)
    core = EngineCore(talker, RecordingCodec(), EngineConfig())
    loop = EngineLoop(core, inbox, outbox, os.getppid(), P.input_decoder(Prompt, SamplingParams))
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        send.send(P.encode(P.Submit(request(0, 10_000, PROMPT_TOKENS))))
        assert _first_audio(receive, "r0")
        talker.held.set()
        asked = talker.asked
        _until(lambda: talker.asked >= asked + 2)  # the loop is asking again and again: held
        steps = core.stats.steps
        send.send(P.encode(P.Submit(request(1, 20, PROMPT_TOKENS))))
        _until(lambda: "r1" in core.streams)
        assert core.stats.steps == steps and [s.id for s in core.waiting] == ["r1"]
        talker.held.clear()
        assert _first_audio(receive, "r1")
    finally:
        send.send(P.encode(P.Shutdown()))
        thread.join(timeout=30)
        loop.gc_pauses.uninstall()
        for socket in (send, inbox, outbox, receive):
            socket.close(linger=0)
        ctx.term()
    assert not thread.is_alive()


def _first_audio(receive: zmq.Socket, request_id: str) -> bool:
    while receive.poll(30_000):
        msg = P.output_decoder.decode(receive.recv())
        if isinstance(msg, P.StepOutput) and any(c.request_id == request_id and c.pcm for c in msg.chunks):
            return True
    return False


def _until(condition) -> None:
    for _ in range(30_000):
        if condition():
            return
        time.sleep(0.001)
    raise AssertionError("the engine loop did not get there")
