"""From request records to the numbers a report shows: counts, rates and distributions per load point.

Latency distributions cover completed requests only (failures are counted by class instead). The
measuring window ends at the last measured request's finish and starts at the first measured send
(closed loop) or at the end of warm-up (open loop; see Trial.window_s), so requests/s and audio seconds
per wall second are what the server delivered while under the load. Seeds of one load point are
pooled: requests are merged and windows added.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .load import Trial
from .metrics import RequestMetrics, Summary, audio_gaps, request_metrics, summarize


@dataclass(frozen=True)
class Aggregate:
    mode: str  # closed | open
    load: float  # concurrency (closed) or offered rate in requests/s (open)
    seeds: list[int]
    # accounting: sent == completed + failed, warm-up kept apart
    sent: int
    completed: int
    failed: int
    failures: dict[str, int]  # outcome class -> count, e.g. {"http_429": 3, "timeout": 1}
    warmup_sent: int
    warmup_failed: int
    inaudible: int  # completed, but no window ever reached the audible threshold (no TTFA)
    peak_inflight: int
    # throughput over the measuring window
    window_s: float
    requests_per_s: float | None
    audio_s_per_wall_s: float | None
    # distributions over completed requests, seconds unless noted
    ttfb_s: Summary
    first_audio_s: Summary
    ttfa_s: Summary
    e2e_s: Summary
    audio_s: Summary
    rtf: Summary  # wall / audio, per request: < 1 is faster than real time
    leading_silence_s: Summary
    chunk_gap_s: Summary  # every gap between consecutive audio chunks, all requests pooled
    max_chunk_gap_s: Summary  # each request's longest gap
    scheduling_lag_s: Summary  # open loop: actual send minus planned arrival (client-side queueing)
    client_loop_lag_s: Summary  # how late the client's event loop woke: its own load, all trials pooled
    requests_with_underruns: int
    underruns: int
    stall_s: Summary  # each completed request's total playback stall (0 when it never stalled)


def aggregate(trials: list[Trial]) -> Aggregate:
    """Pool the measured requests of trials that share one load point."""
    point = trials[0].point
    if any(t.point != point for t in trials):
        raise ValueError("aggregate() pools trials of one load point only")
    measured = [r for t in trials for r in t.measured]
    warmup = [r for t in trials for r in t.records if r.warmup]
    done = [r for r in measured if r.ok]
    per_request: list[RequestMetrics] = [request_metrics(r.exchange.timeline) for r in done]
    wall = sum(t.window_s() for t in trials)
    audio_total = sum(m.audio_s for m in per_request)
    gaps = [g for r in done for g in audio_gaps(r.exchange.timeline.chunks)]
    lags = [r.sent_s - r.scheduled_s for r in measured if r.scheduled_s is not None]

    def dist(name: str) -> Summary:
        return summarize([getattr(m, name) for m in per_request])

    return Aggregate(
        mode=point.mode,
        load=point.value,
        seeds=[t.seed for t in trials],
        sent=len(measured),
        completed=len(done),
        failed=len(measured) - len(done),
        failures=dict(sorted(Counter(r.exchange.outcome for r in measured if not r.ok).items())),
        warmup_sent=len(warmup),
        warmup_failed=sum(not r.ok for r in warmup),
        inaudible=sum(m.ttfa_s is None for m in per_request),
        peak_inflight=max(t.peak_inflight for t in trials),
        window_s=wall,
        requests_per_s=len(done) / wall if wall > 0 else None,
        audio_s_per_wall_s=audio_total / wall if wall > 0 else None,
        ttfb_s=dist("ttfb_s"),
        first_audio_s=dist("first_audio_s"),
        ttfa_s=dist("ttfa_s"),
        e2e_s=dist("e2e_s"),
        audio_s=dist("audio_s"),
        rtf=dist("rtf"),
        leading_silence_s=dist("leading_silence_s"),
        chunk_gap_s=summarize(gaps),
        max_chunk_gap_s=dist("max_gap_s"),
        scheduling_lag_s=summarize(lags),
        client_loop_lag_s=summarize([lag for t in trials for lag in t.loop_lag_s]),
        requests_with_underruns=sum(m.underruns > 0 for m in per_request),
        underruns=sum(m.underruns for m in per_request),
        stall_s=dist("stall_s"),
    )


def by_point(trials: list[Trial]) -> list[list[Trial]]:
    """Trials grouped by load point, in the order the points were first run."""
    groups: dict[tuple[str, float], list[Trial]] = {}
    for trial in trials:
        groups.setdefault((trial.point.mode, trial.point.value), []).append(trial)
    return list(groups.values())
