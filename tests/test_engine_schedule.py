"""benchmarks/engine_schedule.py: the real engine core over partitions that only sleep, used to study
how the chunk policy groups codec work without a GPU. Here with zero device times, so it is quick."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import engine_schedule  # noqa: E402


@pytest.fixture
def instant_times():
    times = engine_schedule.DeviceTimes(engine_schedule.MEASURED)  # the shapes of a real measurement
    times.decode = {n: 0.0 for n in times.decode}
    times.codec = {n: {f: 0.0 for f in by_frames} for n, by_frames in times.codec.items()}
    times.prefill_per_token = 0.0
    return times


def test_every_frame_is_decoded_once_in_growing_chunks(instant_times):
    r = engine_schedule.simulate(instant_times, 8, 40, 10, stagger=1, deadline=0.0, buckets=(1, 2, 4, 8))
    assert r["audio_seconds"] == pytest.approx(8 * 10 * 0.08)
    # growth alone (1, 2, 4, then 8 frames) for streams admitted together: one call per chunk size,
    # the last 3 frames flushed when the streams finish
    assert r["frames_per_call"] == {1: 1, 2: 1, 3: 1, 4: 1}
    assert r["steps_with_codec_work"] == 4


def test_streams_over_the_largest_bucket_are_split_into_calls(instant_times):
    # 80 ten-token prompts fit one step's prefill budget: their 80 one-frame chunks fall due together
    r = engine_schedule.simulate(instant_times, 80, 10, 1, stagger=1, deadline=0.0, buckets=(1, 2, 4, 8, 16, 32, 64))
    assert r["codec_calls"] == 2  # pieces of 64 and 16
    r = engine_schedule.simulate(instant_times, 80, 40, 1, stagger=1, deadline=0.0, buckets=(1, 2, 4, 8, 16, 32, 64))
    assert r["steps_with_codec_work"] == 2  # 40-token prompts: 51 admitted in the first step, 29 in the next
