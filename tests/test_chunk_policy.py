"""The chunk policy: growth, and the deadline that lets a stream short of audio skip the wait.

The engine test runs the tiny model on a fake clock that advances one frame's worth of playback
per step (a server whose steps take as long as a frame plays): without a deadline the chunks grow
1, 2, 4, 8 and the listener waits while each one fills; with one every step's frame goes out at
once. The audio is the same either way (to one int16 step of float rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_cases import NO_GUARD

import cadence.engine.core as core_module
from cadence.engine.config import ChunkPolicy, EngineConfig
from cadence.engine.engine import build_core
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request

FRAME = 0.08  # seconds of audio per frame


def test_growth_without_deadline_waits_for_the_whole_chunk():
    policy = ChunkPolicy(1, 2.0, 8, deadline=0.0)
    assert [policy.chunk_size(i) for i in range(6)] == [1, 2, 4, 8, 8, 8]
    assert policy.ready(pending=3, target=4, ahead=0.0, step=0.1) == 0  # no deadline: wait
    assert policy.ready(pending=4, target=4, ahead=0.0, step=0.1) == 4


@pytest.mark.parametrize("policy", [ChunkPolicy(1, 2.0, 8), ChunkPolicy(1, 1.01, 8), ChunkPolicy(3, 1.5, 7)])
def test_long_streams_keep_the_largest_chunk(policy):
    """Past ~1,000 chunks (a stream of an hour or so) growth**chunks would overflow a float."""
    assert policy.chunk_size(1024) == policy.chunk_size(10**6) == policy.max_chunk_frames


@pytest.mark.parametrize(
    ("pending", "target", "ahead", "step", "expected"),
    [
        (3, 4, 1.0, 0.05, 0),  # plenty of audio: keep growing
        (3, 4, 0.25, 0.1, 0),  # 0.25 - 1 step of 0.1 = 0.15 >= 0.1: safe to wait
        (3, 4, 0.15, 0.1, 2),  # would drop to 0.05: go now, snapped to the 2-frame bucket
        (7, 8, 0.0, 0.0, 4),  # already dry: the 4-frame bucket now, the rest next step
        (1, 8, 0.05, 0.02, 1),
        (5, 8, None, 0.1, 0),  # no first chunk yet: its size is the policy's first_chunk_frames
        (0, 2, 0.0, 0.1, 0),  # nothing to send
        (8, 8, 5.0, 0.1, 8),  # a full chunk always goes
    ],
)
def test_deadline_sends_early_only_what_keeps_playback_fed(pending, target, ahead, step, expected):
    assert ChunkPolicy(1, 2.0, 8, deadline=0.1).ready(pending, target, ahead, step) == expected


def test_deadline_must_not_be_negative():
    with pytest.raises(ValueError, match="deadline"):
        ChunkPolicy(deadline=-1)


class FakeClock:
    """time.monotonic for the engine core: advances only when told."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chunks_on_a_slow_server(tiny_model, monkeypatch, deadline: float) -> tuple[list[int], np.ndarray]:
    clock = FakeClock()
    monkeypatch.setattr(core_module.time, "monotonic", clock)
    policy = ChunkPolicy(1, 2.0, 8, deadline=deadline)
    core = build_core(tiny_model, EngineConfig(max_streams=2, chunk_policy=policy, runaway=NO_GUARD))
    req = SynthesisRequest("A slow server.", voice="ryan", greedy=True, max_new_tokens=24, ignore_eos=True)
    core.add_request(prepare_request(tiny_model, req, 4096))
    sizes, pcm = [], []
    while core.has_work():
        for chunk in core.step():
            if chunk.pcm.size:
                sizes.append(chunk.frame_end - chunk.frame_start)
                pcm.append(chunk.pcm)
        clock.now += FRAME  # each step takes as long as one frame plays
    return sizes, np.concatenate(pcm)


def test_deadline_feeds_a_stream_every_step_when_steps_are_as_slow_as_playback(tiny_model, monkeypatch):
    grown, audio = chunks_on_a_slow_server(tiny_model, monkeypatch, deadline=0.0)
    assert grown[:4] == [1, 2, 4, 8] and sum(grown) == 24
    early, same_audio = chunks_on_a_slow_server(tiny_model, monkeypatch, deadline=0.1)
    assert early == [1] * 24  # never more than a step behind playback
    # chunking does not change the audio: the same samples up to float rounding (1 int16 step)
    assert np.abs(same_audio.astype(np.int32) - audio.astype(np.int32)).max() <= 1


def test_deadline_defaults_to_on_for_a_gpu_and_off_for_a_cpu(tiny_model):
    """None is 'auto': build_core turns it off on a CPU (where it slows every step, and a fixed chunk
    schedule keeps a seeded request's audio identical from run to run); an explicit value is kept."""
    from cadence.engine.config import AUTO_DEADLINE, EngineConfig
    from cadence.engine.engine import build_core

    assert ChunkPolicy().deadline is None and AUTO_DEADLINE == 0.2
    auto = build_core(tiny_model, EngineConfig(max_streams=2, kv_cache_memory=0.01))
    assert auto.config.chunk_policy.deadline == 0.0  # tiny_model is on the CPU
    chosen = build_core(
        tiny_model, EngineConfig(max_streams=2, kv_cache_memory=0.01, chunk_policy=ChunkPolicy(deadline=0.3))
    )
    assert chosen.config.chunk_policy.deadline == 0.3
