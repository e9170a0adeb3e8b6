"""EngineConfig.step_on_idle: the real EngineCore over partitions whose walks take given times on a
simulated device (tests/timed_partitions.py), so an arrival's wait is read from the schedule in
virtual time. With the policy an arrival's prefill waits for at most the step that was on the
device when it came; without it, also for the step the host queued behind that one."""

from __future__ import annotations

import numpy as np
import pytest

from cadence.engine.config import EngineConfig
from cadence.engine.core import EngineCore
from cadence.engine.request import EngineRequest
from cadence.models.qwen3_tts.prompt import Prompt
from cadence.models.qwen3_tts.sampling import SamplingParams
from tests.timed_partitions import Clock, Job, Served, TimedCodec, TimedTalker, WalkTimes, serve

TIMES = WalkTimes(prefill=1.0e-3, frame=2.0e-3, advance=1.5e-3, codec=1.0e-3, host=0.2e-3)


def request(i: int, frames: int) -> EngineRequest:
    prompt = Prompt(text_track=tuple(range(40)), codec_track=(None,) * 40, trailing_text=(1, 2, 3), num_text_tokens=30)
    return EngineRequest(f"r{i}", prompt, SamplingParams(max_new_tokens=frames), ignore_eos=True)


def poisson(rate: float, seconds: float, frames: int, seed: int = 0) -> list[tuple[float, EngineRequest]]:
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=int(rate * seconds * 2) + 10)
    times = np.cumsum(gaps)
    return [(float(t), request(i, frames)) for i, t in enumerate(times[times < seconds])]


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
    arrivals = [(0.0, request(i, 40)) for i in range(8)]
    _, talker, served = run(True, arrivals)
    jobs = talker.queue.jobs
    idle = [b.start - a.end for a, b in zip(jobs, jobs[1:], strict=False) if b.start > a.end]
    assert max(idle, default=0.0) <= TIMES.host + 1e-12
    assert len(served.first_audio) == 8
