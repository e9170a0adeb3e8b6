"""Outputs of a run: results.json (config, environment, aggregates), requests.csv, the terminal summary."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .aggregate import Aggregate, aggregate, by_point
from .load import Trial
from .metrics import request_metrics

SCHEMA = "cadence-bench/1"
LAG_WARNING_S = 0.010  # open loop: sends this late mean the offered load was not the Poisson schedule
LOOP_LAG_WARNING_S = 0.005  # a client event loop this late adds as much to the latencies it measures

# Written into results.json so a published file explains itself.
DEFINITIONS = {
    "clock": "client side, monotonic (time.perf_counter); every latency is measured from the moment the client "
    "starts sending the request",
    "ttfb_s": "time to the first byte of the response body",
    "first_audio_s": "time to the first body piece holding at least one PCM sample",
    "ttfa_s": "time to first audible audio: when the client holds the whole first audible window (20 ms windows "
    "every 10 ms, DC-removed RMS >= threshold dBFS for N consecutive windows; see config.audible)",
    "e2e_s": "time to the last byte of the response",
    "audio_s": "audio received, from the PCM sample count",
    "rtf": "real-time factor = e2e_s / audio_s (wall over audio): below 1 is faster than real time",
    "leading_silence_s": "audio time before the first audible window",
    "chunk_gap_s": "wait between consecutive audio-bearing body pieces (all requests pooled)",
    "underruns": "playback simulation: start playing at the first audio piece with no jitter buffer; each piece "
    "arriving after the audio before it has finished playing is one underrun, its lateness a stall",
    "scheduling_lag_s": "open loop: actual send time minus the planned Poisson arrival (client-side queueing)",
    "client_loop_lag_s": "how late a 5 ms ticker on the client's event loop woke up; large values mean the client "
    "was too busy to timestamp promptly, inflating every latency (every client process's ticks pooled)",
    "client_processes": "open loop: the processes a trial's arrivals were dealt over, round robin in arrival order, "
    "all counting time from one shared start",
    "window_s": "measuring window, summed over seeds: from the first measured send (closed loop) or the end of "
    "warm-up (open loop) to the last measured finish, and for open loop at least the arrival window",
    "requests_per_s": "completed requests / window_s",
    "audio_s_per_wall_s": "audio seconds delivered by completed requests / window_s",
    "percentiles": "numpy linear interpolation; distributions cover completed requests only",
}

CSV_COLUMNS = [
    "mode", "load", "seed", "index", "utterance_id", "language", "text_chars", "max_new_tokens", "warmup",
    "scheduled_s", "sent_s", "finished_s", "outcome", "http_status", "request_id", "error", "finish_reason",
    "sample_rate", "headers_s", "ttfb_s", "first_audio_s", "ttfa_s", "e2e_s", "audio_s", "rtf", "leading_silence_s",
    "chunks", "max_gap_s", "underruns", "stall_s",
]  # fmt: skip


@dataclass
class BenchResult:
    config: dict[str, Any]  # JSON-able, secrets redacted
    environment: dict[str, Any]
    trials: list[Trial]
    label: str | None = None
    files: list[Path] = field(default_factory=list)  # what write_outputs wrote

    def points(self) -> list[Aggregate]:
        """One aggregate per load point, seeds pooled, in run order."""
        return [aggregate(group) for group in by_point(self.trials)]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "label": self.label,
            "config": self.config,
            "environment": self.environment,
            "definitions": DEFINITIONS,
            "points": [asdict(a) for a in self.points()],
            "trials": [
                {
                    "seed": t.seed,
                    "started_at": t.started_at,
                    "wall_s": t.wall_s,
                    "client_processes": t.client_processes,
                    **asdict(aggregate([t])),
                }
                for t in self.trials
            ],
        }


def write_results_json(result: BenchResult, path: Path) -> Path:
    path.write_text(json.dumps(_finite(result.to_json()), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def write_requests_csv(trials: list[Trial], path: Path) -> Path:
    """One row per request sent, warm-up included (flagged), in trial then request order."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for trial in trials:
            for r in trial.records:
                ex, m = r.exchange, request_metrics(r.exchange.timeline)
                row = {
                    "mode": trial.point.mode, "load": trial.point.value, "seed": trial.seed, "index": r.index,
                    "utterance_id": r.utterance_id, "language": r.language, "text_chars": r.text_chars,
                    "max_new_tokens": r.max_new_tokens, "warmup": r.warmup, "scheduled_s": r.scheduled_s,
                    "sent_s": r.sent_s, "finished_s": r.finished_s, "outcome": ex.outcome,
                    "http_status": ex.http_status, "request_id": ex.request_id, "error": ex.error,
                    "finish_reason": ex.finish_reason,
                    "sample_rate": ex.timeline.sample_rate, "headers_s": ex.timeline.headers_s,
                    "ttfb_s": m.ttfb_s, "first_audio_s": m.first_audio_s, "ttfa_s": m.ttfa_s, "e2e_s": m.e2e_s,
                    "audio_s": m.audio_s, "rtf": m.rtf, "leading_silence_s": m.leading_silence_s,
                    "chunks": m.chunks, "max_gap_s": m.max_gap_s, "underruns": m.underruns, "stall_s": m.stall_s,
                }  # fmt: skip
                writer.writerow({k: "" if v is None else _csv_value(v) for k, v in row.items()})
    return path


def print_summary(result: BenchResult, console: Console | None = None) -> None:
    """The run at a glance: a load table and a latency table (one row per load point), then failures."""
    console = console or Console()
    points = result.points()
    name = f"cadence bench{f' — {result.label}' if result.label else ''}"
    load = _table(
        f"{name}: load and throughput",
        ["load", "seeds", "sent", "ok", "failed", "req/s", "audio\ns/s", "underruns"],
        "audio s/s = audio seconds delivered per wall second; underruns = completed requests whose playback stalled",
    )
    latency = _table(
        f"{name}: latency (client side)",
        ["load", "TTFB\np50", "TTFA\np50", "TTFA\np95", "TTFA\np99", "E2E\np50", "E2E\np95", "RTF\np50", "RTF\np95"],
        "TTFB/TTFA in ms, E2E in s; RTF = wall/audio (<1 is faster than real time)",
    )
    for a in points:
        where = _load_label(a.mode, a.load)
        load.add_row(
            where, ",".join(map(str, a.seeds)), str(a.sent), str(a.completed), _failed_cell(a.failed),
            _num(a.requests_per_s, 2), _num(a.audio_s_per_wall_s, 2), f"{a.requests_with_underruns}/{a.completed}",
        )  # fmt: skip
        latency.add_row(
            where, _ms(a.ttfb_s.p50), _ms(a.ttfa_s.p50), _ms(a.ttfa_s.p95), _ms(a.ttfa_s.p99), _num(a.e2e_s.p50, 2),
            _num(a.e2e_s.p95, 2), _num(a.rtf.p50, 3), _num(a.rtf.p95, 3),
        )  # fmt: skip
    console.print(load)
    console.print(latency)
    failures = failure_examples(result.trials)
    if failures:
        ft = Table(title="failures by class (measured requests)")
        for name in ("load", "class", "count", "example"):
            ft.add_column(name)
        for (mode, load, outcome), (count, example) in failures.items():
            ft.add_row(_load_label(mode, load), outcome, str(count), escape(example or ""))
        console.print(ft)
    for a in points:
        where = _load_label(a.mode, a.load)
        if a.inaudible:
            console.print(f"[yellow]{where}: {a.inaudible} completed request(s) never reached the audible threshold[/]")
        lag = a.scheduling_lag_s.p99
        if a.mode == "open" and lag is not None and lag > LAG_WARNING_S:
            console.print(
                f"[yellow]{where}: p99 scheduling lag {_ms(lag)} ms: the client could not keep the arrival "
                "schedule (--max-inflight reached, or the client machine is too busy)[/]"
            )
        loop_lag = a.client_loop_lag_s.p99
        if loop_lag is not None and loop_lag > LOOP_LAG_WARNING_S:
            console.print(
                f"[yellow]{where}: p99 client event-loop lag {_ms(loop_lag)} ms: the benchmark client was busy, "
                "so its timestamps run late (run it on idle cores, apart from the server)[/]"
            )


def _table(title: str, columns: list[str], caption: str) -> Table:
    table = Table(title=title, caption=caption)
    for column in columns:
        table.add_column(column, justify="left" if column == "load" else "right", no_wrap=True)
    return table


def failure_examples(trials: list[Trial]) -> dict[tuple[str, float, str], tuple[int, str | None]]:
    """(mode, load, outcome) -> (count, first error message) over measured requests."""
    out: dict[tuple[str, float, str], tuple[int, str | None]] = {}
    for trial in trials:
        for r in trial.measured:
            if r.ok:
                continue
            key = (trial.point.mode, trial.point.value, r.exchange.outcome)
            count, example = out.get(key, (0, None))
            out[key] = (count + 1, example or r.exchange.error)
    return out


def _load_label(mode: str, load: float) -> str:
    return f"closed c={load:g}" if mode == "closed" else f"open {load:g}/s"


def _failed_cell(n: int) -> str:
    return f"[red]{n}[/]" if n else "0"


def _num(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.1f}"


def _csv_value(v: Any) -> Any:
    return repr(v) if isinstance(v, float) else v  # repr keeps every digit a float has


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as null (a level of -inf dBFS, say, never reaches the file as NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
