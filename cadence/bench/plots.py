"""PNG plots of a run (matplotlib, optional: `pip install cadence[bench]`).

- ttfa_cdf.png: the TTFA distribution of every load point.
- ttfa_vs_<concurrency|rate>.png: TTFA p50/p90/p95/p99 against load, one file per load model.
- throughput_vs_<concurrency|rate>.png: requests/s and audio seconds per wall second against load.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .aggregate import Aggregate, by_point
from .load import Trial
from .metrics import request_metrics

MISSING_MESSAGE = "plots skipped: matplotlib is not installed (pip install 'cadence[bench]')"
X_AXIS = {"closed": ("concurrency", "concurrency (requests in flight)"), "open": ("rate", "offered load (requests/s)")}


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plots(trials: list[Trial], points: list[Aggregate], out_dir: Path) -> list[Path]:
    """Write every plot; the caller checks have_matplotlib() first."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never open a window, work without a display
    import matplotlib.pyplot as plt

    written = [_ttfa_cdf(plt, trials, out_dir / "ttfa_cdf.png")]
    for mode, (name, xlabel) in X_AXIS.items():
        series = [a for a in points if a.mode == mode]
        if series:
            written.append(_ttfa_vs_load(plt, series, xlabel, out_dir / f"ttfa_vs_{name}.png"))
            written.append(_throughput_vs_load(plt, series, xlabel, out_dir / f"throughput_vs_{name}.png"))
    return written


def _ttfa_cdf(plt, trials: list[Trial], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for group in by_point(trials):
        point = group[0].point
        ttfa = [request_metrics(r.exchange.timeline).ttfa_s for t in group for r in t.measured if r.ok]
        values = np.sort([v * 1000 for v in ttfa if v is not None])
        if values.size:
            ax.step(values, np.arange(1, values.size + 1) / values.size, where="post", label=point.label)
    ax.set(xlabel="time to first audible audio (ms, client side)", ylabel="fraction of completed requests")
    ax.set_title("TTFA CDF")
    ax.set_ylim(0, 1.01)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return _save(plt, fig, path)


def _ttfa_vs_load(plt, series: list[Aggregate], xlabel: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [a.load for a in series]
    for name in ("p50", "p90", "p95", "p99"):
        y = [_ms(getattr(a.ttfa_s, name)) for a in series]
        ax.plot(x, y, marker="o", label=name)
    ax.set(xlabel=xlabel, ylabel="TTFA (ms)")
    ax.set_title("Time to first audible audio against load")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(plt, fig, path)


def _throughput_vs_load(plt, series: list[Aggregate], xlabel: str, path: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = [a.load for a in series]
    left.plot(x, [_nan(a.requests_per_s) for a in series], marker="o", label="completed")
    if series[0].mode == "open":
        left.plot(x, x, linestyle="--", color="grey", label="offered")  # the server kept up where they meet
    left.set(xlabel=xlabel, ylabel="requests/s", title="Request throughput")
    left.legend()
    right.plot(x, [_nan(a.audio_s_per_wall_s) for a in series], marker="o", color="tab:green")
    right.set(xlabel=xlabel, ylabel="audio seconds per wall second", title="Audio throughput")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    return _save(plt, fig, path)


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _ms(seconds: float | None) -> float:
    return float("nan") if seconds is None else seconds * 1000


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value
