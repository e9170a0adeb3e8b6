"""`cadence bench compare a.json b.json`: two runs side by side, point by point, with ratios b/a."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .report import SCHEMA


@dataclass(frozen=True)
class Metric:
    title: str
    path: tuple[str, ...]  # keys into a point of results.json
    scale: float  # display unit per stored unit
    lower_is_better: bool


METRICS = [
    Metric("completed req/s", ("requests_per_s",), 1, False),
    Metric("audio s per wall s", ("audio_s_per_wall_s",), 1, False),
    Metric("failed requests", ("failed",), 1, True),
    Metric("TTFB p50 (ms)", ("ttfb_s", "p50"), 1000, True),
    Metric("TTFA p50 (ms)", ("ttfa_s", "p50"), 1000, True),
    Metric("TTFA p95 (ms)", ("ttfa_s", "p95"), 1000, True),
    Metric("TTFA p99 (ms)", ("ttfa_s", "p99"), 1000, True),
    Metric("E2E p50 (s)", ("e2e_s", "p50"), 1, True),
    Metric("E2E p95 (s)", ("e2e_s", "p95"), 1, True),
    Metric("RTF p50 (wall/audio)", ("rtf", "p50"), 1, True),
    Metric("RTF p95 (wall/audio)", ("rtf", "p95"), 1, True),
    Metric("requests with underruns", ("requests_with_underruns",), 1, True),
    Metric("chunk gap p99 (ms)", ("chunk_gap_s", "p99"), 1000, True),
]


class CompareError(ValueError):
    pass


def load_results(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CompareError(f"results file not found: {path} (expected a results.json written by cadence bench)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CompareError(f"{path} is not JSON: {e}") from e
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise CompareError(f"{path} is not a cadence bench results.json (schema {SCHEMA!r})")
    return data


def value(point: dict[str, Any], metric: Metric) -> float | None:
    v: Any = point
    for key in metric.path:
        v = v.get(key) if isinstance(v, dict) else None
    return None if v is None else float(v) * metric.scale


def compare_table(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> Table:
    """Rows per (load point, metric) present in both runs; ratio = b / a and which side is better."""
    points_b = {(p["mode"], p["load"]): p for p in b["points"]}
    table = Table(
        title=f"{name_a} (a) vs {name_b} (b)",
        caption="ratio = b / a; 'better' follows each metric's direction (lower latency, higher throughput). "
        "RTF is wall/audio: lower is faster.",
    )
    for column in ("load", "metric", "a", "b", "b / a", "better"):
        table.add_column(column, justify="left" if column in ("load", "metric", "better") else "right")
    shared = [(p, points_b[(p["mode"], p["load"])]) for p in a["points"] if (p["mode"], p["load"]) in points_b]
    for pa, pb in shared:
        label = _label(pa["mode"], pa["load"])
        for i, metric in enumerate(METRICS):
            va, vb = value(pa, metric), value(pb, metric)
            table.add_row(
                label if i == 0 else "", metric.title, _fmt(va), _fmt(vb), _ratio(va, vb), _better(metric, va, vb)
            )
        table.add_section()
    return table


def unmatched_points(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    keys_a = {(p["mode"], p["load"]) for p in a["points"]}
    keys_b = {(p["mode"], p["load"]) for p in b["points"]}
    return [
        f"{_label(mode, load)} only in {'a' if (mode, load) in keys_a else 'b'}"
        for mode, load in sorted(keys_a ^ keys_b)
    ]


def run_compare(path_a: str | Path, path_b: str | Path, console: Console | None = None) -> int:
    console = console or Console()
    a, b = load_results(path_a), load_results(path_b)
    name_a, name_b = a.get("label") or str(path_a), b.get("label") or str(path_b)
    console.print(compare_table(a, b, name_a, name_b))
    for line in unmatched_points(a, b):
        console.print(f"[yellow]not compared: {line}[/]")
    if not any((p["mode"], p["load"]) in {(q["mode"], q["load"]) for q in b["points"]} for p in a["points"]):
        console.print("[red]the two runs share no load point (same mode and concurrency/rate)[/]")
        return 1
    return 0


def _label(mode: str, load: float) -> str:
    return f"closed c={load:g}" if mode == "closed" else f"open {load:g}/s"


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if v == int(v):
        return f"{v:.0f}"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "—"
    if a == 0:
        return "=" if b == 0 else "∞"
    return f"{b / a:.2f}×"


def _better(metric: Metric, a: float | None, b: float | None) -> str:
    if a is None or b is None or a == b:
        return ""
    return "b" if (b < a) == metric.lower_is_better else "a"
