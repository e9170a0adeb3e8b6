"""benchmarks/walk_timeline.py's reading of a profiler trace: what each kernel adds to a walk when
kernels overlap (programmatic dependent launch) and when the device idles between them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from walk_timeline import Kernel, kernels_of_trace, raw_kernels, stamp_groups, summarize  # noqa: E402


def event(name: str, ts: float, dur: float, grid=(128, 1, 1), cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"grid": list(grid)}}


def test_kernels_of_trace_keeps_gpu_kernels_in_start_order():
    trace = {"traceEvents": [
        event("gemm", 20, 5), event("norm", 10, 3, grid=(1, 1, 1)), event("copy", 30, 1, cat="gpu_memcpy"),
        {"ph": "i", "cat": "kernel", "name": "marker", "ts": 5},
    ]}  # fmt: skip
    kernels = kernels_of_trace(trace)
    assert [(k.name, k.grid, k.start, k.end) for k in kernels] == [
        ("norm", (1, 1, 1), 10, 13),
        ("gemm", (128, 1, 1), 20, 25),
    ]


def test_summarize_splits_the_span_into_what_each_kernel_adds_and_idle_time():
    # Two walks of norm -> gemm. The gemm launches early (PDL) and waits: it starts 2 µs into the
    # norm and ends 6 µs after it, so it adds 6, not its own 8. Walk two follows after 10 µs idle.
    kernels = [
        Kernel("norm", (1,), 0, 4), Kernel("gemm", (128,), 2, 10),
        Kernel("norm", (1,), 20, 24), Kernel("gemm", (128,), 22, 30),
    ]  # fmt: skip
    totals, rows = summarize(kernels, walks=2)
    assert totals == {"kernels_per_walk": 2, "span_us_per_walk": 15, "kernel_us_per_walk": 12, "idle_us_per_walk": 5}
    gemm, norm = rows  # the most added time first
    assert (gemm.name, gemm.per_walk, gemm.median_us) == ("gemm", 1, 8)
    assert (gemm.median_adds_us, gemm.adds_per_walk_us) == (6, 6)
    assert (norm.name, norm.median_adds_us, norm.adds_per_walk_us) == ("norm", 4, 4)
    assert totals["span_us_per_walk"] == pytest.approx(
        sum(r.adds_per_walk_us for r in rows) + totals["idle_us_per_walk"]
    )


def test_a_kernel_inside_another_adds_nothing():
    totals, rows = summarize([Kernel("long", (1,), 0, 10), Kernel("short", (1,), 2, 5)], walks=1)
    assert {r.name: r.adds_per_walk_us for r in rows} == {"long": 10, "short": 0}
    assert totals["idle_us_per_walk"] == 0


def test_raw_kernels_are_written_compactly_and_read_back():
    kernels = [Kernel("gemm", (128, 1, 1), 1000.0, 1005.5), Kernel("norm", (1,), 1004.0, 1006.0),
               Kernel("gemm", (128, 1, 1), 1007.0, 1012.25)]  # fmt: skip
    raw = raw_kernels(kernels)
    assert raw["kernel_names"] == ["gemm", "norm"]
    assert raw["kernels"] == [[0, [128, 1, 1], 0.0, 5.5], [1, [1], 4.0, 6.0], [0, [128, 1, 1], 7.0, 12.25]]
    back = [Kernel(raw["kernel_names"][i], tuple(g), s, e) for i, g, s, e in raw["kernels"]]
    assert summarize(back, walks=1) == summarize(kernels, walks=1)


def stamped(name: str, start: float, waited: float, loop: float, end: float, programs: int = 2) -> dict:
    """A stamped call (--stamps) whose programs all stamp the same times, in us."""
    import torch

    row = torch.tensor([start, start, waited, loop, end, 0.0], dtype=torch.float64)
    return {"name": name, "programs": programs, "stamps": row.repeat(programs, 1)}


def test_stamp_groups_split_the_walk_into_each_kernels_span():
    """--stamps: each call's span runs from the previous call's end to its own, so the groups' spans
    add up to the walk from the first call's end; the release is the previous end to its wait's
    return, and a call launched before the previous one ends has a positive lead."""
    calls = [
        stamped("gemm a", 0, 1, 4, 5),
        stamped("attention", 3, 5.5, 8, 9),  # launched 2 us early, released 0.5 us after gemm a's end
        stamped("gemm a", 10, 11, 13, 14),  # launched 1 us after the attention's end (a norm between)
    ]
    span, rows = stamp_groups(calls)
    assert span == 14
    by_name = {r["kernel"]: r for r in rows}
    gemm, attention = by_name["gemm a (2)"], by_name["attention (2)"]
    assert (attention["lead"], attention["release"], attention["span"]) == (2, 0.5, 4)
    assert (gemm["calls"], gemm["lead"], gemm["release"], gemm["span_total"]) == (2, -1, 2, 5)
    assert gemm["loop"] == 2.5 and gemm["tail"] == 1  # medians over its two calls: 3 and 2, 1 and 1
    assert gemm["span_total"] + attention["span_total"] == span - 5  # all but the first call's own time


def test_stamp_groups_start_is_the_median_programs_not_the_first():
    """A call whose first program started early on an SM the previous call left free, and the rest
    only as that call ended: its lead says 3 us early, its start (the median program's) 0.5 late."""
    calls = [stamped("gemm a", 0, 1, 4, 5, programs=3), stamped("gemm b", 2, 6, 7, 8, programs=3)]
    calls[1]["stamps"][1:, 0] = 5.5  # two of gemm b's three programs start after gemm a's end
    _, rows = stamp_groups(calls)
    b = {r["kernel"]: r for r in rows}["gemm b (3)"]
    assert (b["lead"], b["start"], b["release"]) == (3, 0.5, 1)
