"""Metric math on synthetic signals and chunk timelines (no network, no clocks)."""

from __future__ import annotations

import numpy as np
import pytest

from cadence.bench.metrics import (
    AudibleRule,
    Chunk,
    OnsetDetector,
    Timeline,
    arrival_of_sample,
    audible_onset,
    audio_gaps,
    request_metrics,
    simulate_playback,
    summarize,
    window_levels_dbfs,
)

SR = 24000
FRAME = 1920  # one 80 ms frame at 24 kHz
WINDOW, HOP = 480, 240  # 20 ms / 10 ms at 24 kHz


def tone(n: int, dbfs: float, freq: float = 440.0) -> np.ndarray:
    """A sine whose RMS is `dbfs` relative to int16 full scale."""
    amplitude = 32768 * 10 ** (dbfs / 20) * np.sqrt(2)
    return np.round(amplitude * np.sin(2 * np.pi * freq * np.arange(n) / SR)).astype(np.int16)


# --- levels and audible onset ----------------------------------------------------------------------


def test_level_of_a_sine_is_its_rms_in_dbfs():
    levels = window_levels_dbfs(tone(SR // 10, -20.0), SR, 20, 10)
    assert len(levels) == (SR // 10 - WINDOW) // HOP + 1
    assert np.allclose(levels, -20.0, atol=0.1)


def test_onset_is_the_first_window_reaching_into_the_tone():
    start = 4800  # 200 ms of digital silence, then a loud tone
    pcm = np.concatenate([np.zeros(start, np.int16), tone(SR, -20.0)])
    # The window starting one hop earlier already holds 10 ms of tone (about -23 dBFS): audible.
    assert audible_onset(pcm, SR) == start - HOP


def test_quiet_noise_and_dc_offset_are_not_audible():
    rng = np.random.default_rng(0)
    hiss = np.round(rng.normal(0, 32768 * 10 ** (-60 / 20), SR)).astype(np.int16)  # -60 dBFS noise
    assert audible_onset(hiss, SR) is None
    dc = np.full(SR, 3000, np.int16)  # -21 dBFS if the mean were not removed
    assert audible_onset(dc, SR) is None
    assert audible_onset(np.zeros(SR, np.int16), SR) is None


def test_threshold_is_inclusive_and_configurable():
    pcm = tone(SR, -50.0)
    assert audible_onset(pcm, SR) is None
    assert audible_onset(pcm, SR, threshold_dbfs=-51.0) == 0


def test_consecutive_windows_reject_an_isolated_click():
    pcm = np.zeros(SR, np.int16)
    pcm[6000] = 32767  # one sample: loud in the two windows holding it, so 2 in a row but not 3
    assert audible_onset(pcm, SR, consecutive=2) == 6000 - HOP
    assert audible_onset(pcm, SR, consecutive=3) is None


def test_signal_shorter_than_a_window_has_no_onset():
    assert audible_onset(tone(WINDOW - 1, -10.0), SR) is None


@pytest.mark.parametrize("seed", range(6))
def test_streaming_detector_matches_the_whole_signal_answer(seed):
    rng = np.random.default_rng(seed)
    lead = int(rng.integers(0, 3 * SR // 10))
    quiet = np.round(rng.normal(0, 20, lead)).astype(np.int16)  # about -64 dBFS
    pcm = np.concatenate([quiet, tone(SR // 5, float(rng.uniform(-44, -10)))])
    cuts = np.sort(rng.integers(0, len(pcm), size=int(rng.integers(1, 40))))
    detector = OnsetDetector(SR, AudibleRule())
    for piece in np.split(pcm, cuts):
        detector.feed(piece)
    assert detector.onset == audible_onset(pcm, SR)
    assert detector.onset is not None


def test_streaming_detector_sees_runs_that_cross_feeds():
    pcm = np.zeros(SR, np.int16)
    pcm[6000] = 32767
    detector = OnsetDetector(SR, AudibleRule(consecutive=2))
    detector.feed(pcm[:6100])  # the first window holding the click ends after 6100: not judged yet
    assert detector.onset is None
    detector.feed(pcm[6100:])
    assert detector.onset == 6000 - HOP


# --- playback simulation ---------------------------------------------------------------------------


def test_real_time_arrivals_never_underrun():
    chunks = [Chunk(0.1 + 0.08 * i, FRAME) for i in range(10)]
    assert simulate_playback(chunks, SR).underruns == 0
    faster = [Chunk(0.1 + 0.01 * i, FRAME) for i in range(10)]
    assert simulate_playback(faster, SR).underruns == 0


def test_late_chunk_stalls_until_it_arrives():
    # Playback starts at 0.1 s; the first frame lasts until 0.18 s, the second arrives at 0.30 s.
    chunks = [Chunk(0.0, 0), Chunk(0.1, FRAME), Chunk(0.30, FRAME), Chunk(0.35, FRAME), Chunk(0.60, FRAME)]
    playback = simulate_playback(chunks, SR)
    # After the stall the second frame plays 0.30-0.38 and the third 0.38-0.46; the fourth (0.60) is late again.
    assert playback.underruns == 2
    assert playback.stall_s == pytest.approx((0.30 - 0.18) + (0.60 - 0.46))


def test_header_chunks_neither_start_playback_nor_stall():
    chunks = [Chunk(0.05, 0), Chunk(0.5, FRAME), Chunk(0.55, 0), Chunk(0.56, FRAME)]
    assert simulate_playback(chunks, SR).underruns == 0
    assert simulate_playback([Chunk(0.1, 0)], SR).underruns == 0


def test_gaps_skip_chunks_without_audio():
    chunks = [Chunk(0.05, 0), Chunk(0.1, FRAME), Chunk(0.15, 0), Chunk(0.25, FRAME), Chunk(0.3, FRAME)]
    assert audio_gaps(chunks) == pytest.approx([0.15, 0.05])


def test_arrival_of_sample_finds_the_chunk_that_carried_it():
    chunks = [Chunk(0.0, 0), Chunk(0.1, 100), Chunk(0.2, 100)]
    assert arrival_of_sample(chunks, 0) == 0.1
    assert arrival_of_sample(chunks, 99) == 0.1
    assert arrival_of_sample(chunks, 100) == 0.2
    assert arrival_of_sample(chunks, 200) is None


# --- per-request metrics ---------------------------------------------------------------------------


def timeline(onset: int | None) -> Timeline:
    chunks = [Chunk(0.05, 0)] + [Chunk(t, FRAME) for t in (0.10, 0.20, 0.30, 0.60)]
    return Timeline(
        SR,
        headers_s=0.04,
        first_byte_s=0.05,
        end_s=0.62,
        chunks=chunks,
        onset_sample=onset,
        audible_window_samples=WINDOW,
    )


def test_request_metrics_of_a_synthetic_timeline():
    m = request_metrics(timeline(onset=2000))
    assert m.ttfb_s == 0.05
    assert m.first_audio_s == 0.10
    assert m.ttfa_s == 0.20  # samples 2000..2479 arrived with the second frame
    assert m.leading_silence_s == pytest.approx(2000 / SR)
    assert m.e2e_s == 0.62
    assert m.audio_s == pytest.approx(4 * 0.08)
    assert m.rtf == pytest.approx(0.62 / 0.32)  # wall over audio: slower than real time here
    assert m.chunks == 4
    assert m.max_gap_s == pytest.approx(0.30)
    # Playback: 0.10-0.18, stall to 0.20, 0.20-0.28, stall to 0.30, 0.30-0.38, stall to 0.60.
    assert m.underruns == 3
    assert m.stall_s == pytest.approx(0.02 + 0.02 + 0.22)


def test_ttfa_waits_for_the_whole_audible_window():
    # The window starting at 1700 ends at 2179, past the first frame (0..1919): TTFA is the second frame.
    assert request_metrics(timeline(onset=1700)).ttfa_s == 0.20
    assert request_metrics(timeline(onset=1000)).ttfa_s == 0.10


def test_rtf_below_one_means_faster_than_real_time():
    tl = Timeline(SR, first_byte_s=0.1, end_s=1.0, chunks=[Chunk(0.1, SR), Chunk(1.0, SR)])
    assert request_metrics(tl).rtf == pytest.approx(0.5)


def test_never_audible_and_failed_requests_have_no_ttfa_or_rtf():
    m = request_metrics(timeline(onset=None))
    assert m.ttfa_s is None and m.leading_silence_s is None
    failed = Timeline(SR, first_byte_s=0.05, end_s=None, chunks=[Chunk(0.1, FRAME)])
    assert request_metrics(failed).rtf is None
    empty = request_metrics(Timeline(SR))
    assert empty.audio_s == 0 and empty.first_audio_s is None and empty.max_gap_s is None


# --- percentiles ----------------------------------------------------------------------------------


def test_summary_percentiles_interpolate_linearly():
    s = summarize([float(v) for v in range(1, 101)])
    assert s.n == 100
    assert (s.p50, s.p90, s.p95, s.p99, s.max) == pytest.approx((50.5, 90.1, 95.05, 99.01, 100.0))
    assert s.mean == pytest.approx(50.5)


def test_summary_skips_missing_values_and_handles_none_at_all():
    assert summarize([None, 2.0, None]).p99 == 2.0
    empty = summarize([None])
    assert empty.n == 0 and empty.p50 is None and empty.max is None
