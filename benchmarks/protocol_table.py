"""The served protocol's results as data: one `Row` a rate, built from a bench run or read back from
protocol.json, pooled across runs, and written as the table and plot.

A row keeps its requests' samples (each completed request's time to first audible audio, each
first-audio stage from the server's access log), so that runs of the same rate with other seeds,
measured in separate device calls, pool into one row whose percentiles are those of all their
requests together, as `cadence bench` pools the seeds of one run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cadence.bench.metrics import summarize
from cadence.server.access import FIRST_AUDIO_STAGES

PROCESSES = ("engine", "api")  # the server's processes, as /metrics labels their garbage collections
# After the server's stages, what lies outside them: a request's time to first audible audio at the
# client less the server's own (its access log's ttfa_ms, from the route's start to the first chunk in
# the API process): the request and the response over HTTP, and the client's handling of both.
OUTSIDE = "outside"
STAGES = (*FIRST_AUDIO_STAGES, OUTSIDE)


def percentiles(samples: list[float]) -> tuple[float | None, float | None, float | None]:
    """p50, p95 and p99 of the samples (ms), as `cadence bench` summarizes a distribution."""
    s = summarize(samples)
    return tuple(None if v is None else round(v, 1) for v in (s.p50, s.p95, s.p99))


@dataclass(frozen=True)
class GapRequest:
    """A request whose playback ran dry: what the table's gap count is made of."""

    seed: int
    arrival_s: float  # planned arrival, seconds into its trial (warm-up included)
    ttfa_ms: float | None
    underruns: int
    stall_ms: float  # its playback's stalls added
    max_chunk_gap_ms: float | None  # its longest wait between two audio chunks
    # the same wait where its chunks reached the server's API process (its access log): near the
    # client's, the server held the chunk back; far below it, the chunk waited after the server
    server_max_chunk_gap_ms: float | None = None


@dataclass(frozen=True)
class SeedResult:
    """One trial (seed) of a rate on its own: a row pools its seeds, and one seed unlike the others
    (an overload, a stalled client) shows here."""

    seed: int
    ttfa_p95_ms: float | None
    with_gap: int
    failed: int
    client_stall_ms: float | None  # the client's longest event-loop stall in this trial


@dataclass(frozen=True)
class GcDuring:
    """One server process's garbage collections while a rate ran (its /metrics before and after)."""

    collections: int
    ms: float  # their time added
    longest_ms: float  # the longest since the server started: a bound on this rate's longest

    @staticmethod
    def pooled(runs: list[GcDuring]) -> GcDuring:
        return GcDuring(
            sum(g.collections for g in runs), round(sum(g.ms for g in runs), 2), max(g.longest_ms for g in runs)
        )


@dataclass(frozen=True)
class Row:
    """One rate of the protocol's table: its trials (seeds) pooled."""

    rate: float
    sent: int
    completed: int
    failed: int
    ttfa_ms: tuple[float | None, ...]  # p50, p95, p99 over completed requests
    with_gap: int  # completed requests whose playback stalled at least once
    requests_per_s: float | None  # delivered: completed over the measuring windows
    stages_ms: dict[str, tuple[float, ...]]  # the server's first-audio path: stage -> (p50, p95)
    seeds: tuple[int, ...] = ()
    window_s: float | None = None  # the trials' measuring windows added
    ttfa_samples_ms: list[float] = field(default_factory=list, repr=False)
    stage_samples_ms: dict[str, list[float]] = field(default_factory=dict, repr=False)
    # each request whose playback ran dry: when it arrived, its TTFA and its stalls
    gap_requests: list[GapRequest] = field(default_factory=list, repr=False)
    # the server's processes ("engine", "api"): their garbage collections during the rate
    gc: dict[str, GcDuring] = field(default_factory=dict)
    # the bench client's longest event-loop stall in the rate's trials: a pause every timestamp the
    # client took then suffered (a playback gap as long is the client's, not the server's)
    client_stall_ms: float | None = None
    by_seed: list[SeedResult] = field(default_factory=list)  # each trial on its own, by seed

    @classmethod
    def measured(
        cls, rate: float, seeds: list[int], counts: tuple[int, int, int], window_s: float,
        ttfa_samples_ms: list[float], stage_samples_ms: dict[str, list[float]],
        gap_requests: list[GapRequest] | None = None, gc: dict[str, GcDuring] | None = None,
        client_stall_ms: float | None = None, by_seed: list[SeedResult] | None = None,
    ) -> Row:  # fmt: skip
        """A row from its samples. `counts`: (sent, completed, requests with a playback gap)."""
        sent, completed, with_gap = counts
        return cls(
            rate=rate, sent=sent, completed=completed, failed=sent - completed,
            ttfa_ms=percentiles(ttfa_samples_ms), with_gap=with_gap,
            requests_per_s=completed / window_s if window_s > 0 else None,
            stages_ms={k: percentiles(v)[:2] for k, v in stage_samples_ms.items() if v},
            seeds=tuple(seeds), window_s=window_s,
            ttfa_samples_ms=[round(v, 2) for v in ttfa_samples_ms],
            stage_samples_ms={k: [round(v, 2) for v in vs] for k, vs in stage_samples_ms.items()},
            gap_requests=list(gap_requests or []), gc=dict(gc or {}), client_stall_ms=client_stall_ms,
            by_seed=sorted(by_seed or [], key=lambda s: s.seed),
        )  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> Row:
        return cls(**{
            **data,
            "ttfa_ms": tuple(data["ttfa_ms"]),
            "stages_ms": {k: tuple(v) for k, v in data["stages_ms"].items()},
            "seeds": tuple(data.get("seeds", ())),
            "gap_requests": [GapRequest(**g) for g in data.get("gap_requests", [])],
            "gc": {k: GcDuring(**v) for k, v in data.get("gc", {}).items()},
            "by_seed": [SeedResult(**s) for s in data.get("by_seed", [])],
        })  # fmt: skip

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def poolable(self) -> bool:
        return bool(self.seeds) and self.window_s is not None and len(self.ttfa_samples_ms) > 0


def pool(rows: list[Row]) -> Row:
    """Rows of one rate measured with different seeds as one row over all their requests. Rows
    without samples, or two rows that share a seed, cannot pool: ValueError says which."""
    rate = rows[0].rate
    if len(rows) == 1:
        return rows[0]
    if not all(r.poolable for r in rows):
        raise ValueError(f"rate {rate:g} is measured by more than one run, not all with per-request samples")
    seeds = [s for r in rows for s in r.seeds]
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"rate {rate:g} is measured by two runs with the same seed ({sorted(seeds)})")
    stages = {k: [v for r in rows for v in r.stage_samples_ms.get(k, [])] for k in STAGES}
    processes = [p for p in PROCESSES if all(p in r.gc for r in rows)]
    return Row.measured(
        rate, sorted(seeds), (sum(r.sent for r in rows), sum(r.completed for r in rows), sum(r.with_gap for r in rows)),
        sum(r.window_s for r in rows), [v for r in rows for v in r.ttfa_samples_ms], stages,
        [g for r in rows for g in r.gap_requests], {p: GcDuring.pooled([r.gc[p] for r in rows]) for p in processes},
        max((r.client_stall_ms for r in rows if r.client_stall_ms is not None), default=None),
        [s for r in rows for s in r.by_seed],
    )  # fmt: skip


def merge(paths: list[Path], out: Path) -> list[Row]:
    """The rows of several runs' protocol.json as one table (OUT/protocol.json, .md, .png), by rate;
    a rate several runs measured with different seeds is pooled. Raises ValueError naming the run
    whose rows cannot join."""
    runs = [json.loads(p.read_text()) for p in paths]
    by_rate: dict[float, list[Row]] = {}
    for run in runs:
        for data in run["rows"]:
            row = Row.from_json(data)
            by_rate.setdefault(row.rate, []).append(row)
    merged = [pool(by_rate[rate]) for rate in sorted(by_rate)]
    summary = {"merged": [str(p) for p in paths], "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs]}
    write(out, summary, merged)
    return merged


def write(out: Path, summary: dict, rows: list[Row]) -> None:
    (out / "protocol.json").write_text(json.dumps({**summary, "rows": [r.to_json() for r in rows]}, indent=1) + "\n")
    (out / "protocol.md").write_text(table(rows) + "\n")
    plot(rows, out / "protocol.png")


def table(rows: list[Row]) -> str:
    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v:.1f}"

    def line(label: str, cells: list[str]) -> str:
        return f"| {label} | " + " | ".join(cells) + " |"

    rule = "|---|" + "---:|" * len(rows)
    lines = [
        line("requests/s", [f"{r.rate:g}" for r in rows]),
        rule,
        line("p50 / p95 / p99 TTFA (ms)", [" / ".join(ms(v) for v in r.ttfa_ms) for r in rows]),
        line("requests with a playback gap", [f"{r.with_gap} / {r.completed}" for r in rows]),
        line("failed / sent", [f"{r.failed} / {r.sent}" for r in rows]),
        line("delivered requests/s", ["–" if r.requests_per_s is None else f"{r.requests_per_s:.2f}" for r in rows]),
    ]
    if any(r.gap_requests for r in rows):
        lines.append(line("longest playback stall (ms)", [longest_stall(r) for r in rows]))
        waits = [chunk_waits(r) for r in rows]
        lines.append(line("those requests' longest wait for a chunk, client / server (ms)", waits))
    if any(r.gc for r in rows):
        cells = [" / ".join(gc_cell(r, p) for p in PROCESSES) for r in rows]
        lines.append(line("garbage collections, engine / API: count (longest since start, ms)", cells))
    if any(r.client_stall_ms is not None for r in rows):
        cells = ["–" if r.client_stall_ms is None else f"{r.client_stall_ms:.0f}" for r in rows]
        lines.append(line("the client's longest event-loop stall (ms)", cells))
    if any(r.seeds for r in rows):
        lines.append(line("seeds", [" ".join(str(s) for s in r.seeds) or "–" for r in rows]))
    if any(len(r.by_seed) > 1 for r in rows):
        cells = [" · ".join(ms(s.ttfa_p95_ms) for s in r.by_seed) or "–" for r in rows]
        lines.append(line("p95 TTFA by seed (ms)", cells))
        cells = [" · ".join(str(s.with_gap) for s in r.by_seed) or "–" for r in rows]
        lines.append(line("requests with a gap by seed", cells))
    stages = [s for s in STAGES if any(s in r.stages_ms for r in rows)]
    if stages:
        lines += ["", "Where the first audio's time goes: the server's stages, then outside them, p50 / p95 (ms):", ""]
        lines += [line("stage", [f"{r.rate:g}/s" for r in rows]), rule]
        for stage in stages:
            cells = [" / ".join(ms(v) for v in r.stages_ms[stage]) if stage in r.stages_ms else "–" for r in rows]
            lines.append(line(stage, cells))
    return "\n".join(lines)


def gc_cell(row: Row, process: str) -> str:
    g = row.gc.get(process)
    return "–" if g is None else f"{g.collections} ({g.longest_ms:.1f})"


def chunk_waits(row: Row) -> str:
    client = [g.max_chunk_gap_ms for g in row.gap_requests if g.max_chunk_gap_ms is not None]
    server = [g.server_max_chunk_gap_ms for g in row.gap_requests if g.server_max_chunk_gap_ms is not None]
    return " / ".join(f"{max(v):.0f}" if v else "–" for v in (client, server))


def longest_stall(row: Row) -> str:
    return f"{max(g.stall_ms for g in row.gap_requests):.0f}" if row.gap_requests else "–"


def plot(rows: list[Row], path: Path) -> Path | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = [r.rate for r in rows]
    for i, name in enumerate(("p50", "p95", "p99")):
        left.plot(x, [float("nan") if r.ttfa_ms[i] is None else r.ttfa_ms[i] for r in rows], marker="o", label=name)
    left.set(xlabel="offered load (requests/s)", ylabel="TTFA (ms)", title="Time to first audible audio")
    left.legend()
    right.plot(x, [100 * r.with_gap / max(1, r.completed) for r in rows], marker="o", color="tab:red")
    right.set(xlabel="offered load (requests/s)", ylabel="% of requests", title="Requests with a playback gap")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
