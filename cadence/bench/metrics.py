"""Metric math over client-side chunk timelines: pure functions, no I/O, no clocks.

A request's timeline is what the client saw: when the response body's first byte arrived and, for each
piece of audio, when it arrived and how many PCM samples it carried. Every time here is in seconds since
the client started sending the request (a monotonic clock), so nothing depends on server clocks.

Conventions (the report and docs repeat them):
- RTF is wall time over audio time (end-to-end latency / audio duration): below 1 is faster than real time.
- Percentiles are numpy's linear interpolation between closest ranks.
- Levels are dBFS of the DC-removed RMS relative to int16 full scale (32768); a full-scale square wave is 0 dBFS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .defaults import AUDIBLE_CONSECUTIVE, AUDIBLE_DBFS, AUDIBLE_HOP_MS, AUDIBLE_WINDOW_MS

# Two chunks arriving on time can differ from the ideal schedule by float rounding alone; a stall
# shorter than a microsecond is not a stall anyone hears.
STALL_TOLERANCE_S = 1e-6


@dataclass(frozen=True)
class Chunk:
    """One piece of the response body: arrival time (s since send) and PCM samples it carried (0 for a header)."""

    t: float
    samples: int


@dataclass
class Timeline:
    """Everything the client observed for one request, in seconds since it started sending."""

    sample_rate: int
    headers_s: float | None = None  # response status line and headers received
    first_byte_s: float | None = None  # first byte of the response body
    end_s: float | None = None  # response body complete (None: the request failed or timed out)
    chunks: list[Chunk] = field(default_factory=list)
    onset_sample: int | None = None  # first sample of the first audible window (None: never audible)
    audible_window_samples: int = 0  # length of that window, to know when the client held all of it


@dataclass(frozen=True)
class Playback:
    """Result of playing the stream as it arrives: starts at the first audio, no jitter buffer."""

    underruns: int  # times the player ran dry and had to wait
    stall_s: float  # total time spent waiting


@dataclass(frozen=True)
class RequestMetrics:
    """Per-request metrics; None where the timeline cannot define one (no audio, never audible, failed)."""

    ttfb_s: float | None  # first response-body byte
    first_audio_s: float | None  # first chunk holding at least one PCM sample ("first playable")
    ttfa_s: float | None  # the client holds the whole first audible window
    e2e_s: float | None  # body complete
    audio_s: float  # audio received, from the sample count
    rtf: float | None  # e2e_s / audio_s (wall over audio; < 1 is faster than real time)
    leading_silence_s: float | None  # audio time before the first audible window
    chunks: int  # chunks holding audio
    max_gap_s: float | None  # longest wait between consecutive audio chunks
    underruns: int
    stall_s: float


@dataclass(frozen=True)
class Summary:
    """Distribution of one metric over requests; all None when there were no values."""

    n: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None


# --- audible onset ------------------------------------------------------------------------------


def window_levels_dbfs(pcm: np.ndarray, sample_rate: int, window_ms: float, hop_ms: float) -> np.ndarray:
    """Level in dBFS of every full window (start = k * hop) of int16 `pcm`; -inf for digital silence."""
    window, hop = _window_hop(sample_rate, window_ms, hop_ms)
    if len(pcm) < window:
        return np.zeros(0)
    frames = np.lib.stride_tricks.sliding_window_view(np.asarray(pcm, dtype=np.float64), window)[::hop]
    centred = frames - frames.mean(axis=1, keepdims=True)
    rms = np.sqrt(np.mean(centred * centred, axis=1))
    with np.errstate(divide="ignore"):
        return 20.0 * np.log10(rms / 32768.0)


def first_audible_window(levels: np.ndarray, threshold_dbfs: float, consecutive: int) -> int | None:
    """Index of the first window that starts a run of `consecutive` windows at or above the threshold."""
    run = 0
    for i, audible in enumerate(levels >= threshold_dbfs):
        run = run + 1 if audible else 0
        if run >= consecutive:
            return i - consecutive + 1
    return None


def audible_onset(
    pcm: np.ndarray,
    sample_rate: int,
    threshold_dbfs: float = AUDIBLE_DBFS,
    window_ms: float = AUDIBLE_WINDOW_MS,
    hop_ms: float = AUDIBLE_HOP_MS,
    consecutive: int = AUDIBLE_CONSECUTIVE,
) -> int | None:
    """First sample of the first audible window of a whole int16 signal, or None if it is never audible."""
    _, hop = _window_hop(sample_rate, window_ms, hop_ms)
    index = first_audible_window(window_levels_dbfs(pcm, sample_rate, window_ms, hop_ms), threshold_dbfs, consecutive)
    return None if index is None else index * hop


@dataclass(frozen=True)
class AudibleRule:
    """When audio counts as audible: `consecutive` windows of `window_ms` every `hop_ms` at >= `threshold_dbfs`."""

    threshold_dbfs: float = AUDIBLE_DBFS
    window_ms: float = AUDIBLE_WINDOW_MS
    hop_ms: float = AUDIBLE_HOP_MS
    consecutive: int = AUDIBLE_CONSECUTIVE

    def onset(self, pcm: np.ndarray, sample_rate: int) -> int | None:
        """`audible_onset` under this rule."""
        return audible_onset(pcm, sample_rate, self.threshold_dbfs, self.window_ms, self.hop_ms, self.consecutive)

    def window_samples(self, sample_rate: int) -> int:
        return _window_hop(sample_rate, self.window_ms, self.hop_ms)[0]


class OnsetDetector:
    """`audible_onset` over a stream fed chunk by chunk, keeping only the samples not yet judged.

    The client feeds every chunk until an onset is found and then stops, so a long request never holds
    its whole audio in memory. Gives the same answer as `audible_onset` on the concatenated signal.
    """

    def __init__(self, sample_rate: int, rule: AudibleRule | None = None):
        self.sample_rate, self.rule = sample_rate, rule or AudibleRule()
        self.window, self.hop = _window_hop(sample_rate, self.rule.window_ms, self.rule.hop_ms)
        self.onset: int | None = None
        self._pending = np.zeros(0, dtype=np.int16)  # samples from absolute index self._base on
        self._base = 0
        self._run = 0  # audible windows in a row so far, ending just before self._base

    def feed(self, pcm: np.ndarray) -> int | None:
        """Add samples; returns the onset sample once known (and keeps returning it)."""
        if self.onset is not None or len(pcm) == 0:
            return self.onset
        rule = self.rule
        self._pending = np.concatenate([self._pending, pcm])
        levels = window_levels_dbfs(self._pending, self.sample_rate, rule.window_ms, rule.hop_ms)
        for i, audible in enumerate(levels >= rule.threshold_dbfs):
            self._run = self._run + 1 if audible else 0
            if self._run >= rule.consecutive:
                self.onset = self._base + (i - rule.consecutive + 1) * self.hop
                self._pending = np.zeros(0, dtype=np.int16)
                return self.onset
        judged = len(levels) * self.hop  # the next window starts here
        self._pending = self._pending[judged:]
        self._base += judged
        return None


def _window_hop(sample_rate: int, window_ms: float, hop_ms: float) -> tuple[int, int]:
    window, hop = round(sample_rate * window_ms / 1000), round(sample_rate * hop_ms / 1000)
    if window < 1 or hop < 1:
        raise ValueError(f"window {window_ms} ms and hop {hop_ms} ms must each hold at least one sample")
    return window, hop


# --- playback, gaps, per-request metrics ----------------------------------------------------------


def simulate_playback(chunks: Sequence[Chunk], sample_rate: int) -> Playback:
    """Play audio as it arrives: start at the first audio chunk, no jitter buffer.

    The player's buffer runs dry at `clock` (wall time). A chunk arriving after that is an underrun: the
    player stalls until it arrives. Chunks without samples (headers) play nothing and cannot stall.
    """
    audio = [c for c in chunks if c.samples > 0]
    if not audio:
        return Playback(0, 0.0)
    clock = audio[0].t
    underruns, stall = 0, 0.0
    for chunk in audio:
        late = chunk.t - clock
        if late > STALL_TOLERANCE_S:
            underruns += 1
            stall += late
            clock = chunk.t
        clock += chunk.samples / sample_rate
    return Playback(underruns, stall)


def audio_gaps(chunks: Sequence[Chunk]) -> list[float]:
    """Waits between consecutive audio-bearing chunks, in arrival order."""
    times = [c.t for c in chunks if c.samples > 0]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def arrival_of_sample(chunks: Sequence[Chunk], sample_index: int) -> float | None:
    """When the chunk carrying sample `sample_index` (0-based) arrived; None if it never did."""
    received = 0
    for chunk in chunks:
        received += chunk.samples
        if received > sample_index:
            return chunk.t
    return None


def request_metrics(timeline: Timeline) -> RequestMetrics:
    """Everything the report shows for one request, from its timeline alone."""
    sr = timeline.sample_rate
    total = sum(c.samples for c in timeline.chunks)
    audio_s = total / sr
    first_audio = next((c.t for c in timeline.chunks if c.samples > 0), None)
    ttfa = leading = None
    if timeline.onset_sample is not None:
        last_sample_of_window = timeline.onset_sample + max(timeline.audible_window_samples, 1) - 1
        ttfa = arrival_of_sample(timeline.chunks, min(last_sample_of_window, total - 1))
        leading = timeline.onset_sample / sr
    e2e = timeline.end_s
    gaps = audio_gaps(timeline.chunks)
    playback = simulate_playback(timeline.chunks, sr)
    return RequestMetrics(
        ttfb_s=timeline.first_byte_s,
        first_audio_s=first_audio,
        ttfa_s=ttfa,
        e2e_s=e2e,
        audio_s=audio_s,
        rtf=e2e / audio_s if e2e is not None and audio_s > 0 else None,
        leading_silence_s=leading,
        chunks=sum(1 for c in timeline.chunks if c.samples > 0),
        max_gap_s=max(gaps) if gaps else None,
        underruns=playback.underruns,
        stall_s=playback.stall_s,
    )


# --- distributions --------------------------------------------------------------------------------


def summarize(values: Sequence[float | None]) -> Summary:
    """p50/p90/p95/p99/max/mean of the values that exist (None entries are skipped)."""
    data = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if data.size == 0:
        return Summary(0, None, None, None, None, None, None)
    p50, p90, p95, p99 = (float(x) for x in np.percentile(data, [50, 90, 95, 99]))
    return Summary(int(data.size), float(data.mean()), p50, p90, p95, p99, float(data.max()))
