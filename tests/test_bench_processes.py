"""The pieces of open-loop trials dealt over client processes (cadence/bench/processes.py): which
arrivals a process sends, the merged trial's in-flight peak and its records. A real run over two
processes is in test_bench_e2e.py."""

from __future__ import annotations

from cadence.bench.client import Exchange
from cadence.bench.load import LoadPoint, RequestRecord, Share, Trial
from cadence.bench.metrics import Timeline
from cadence.bench.processes import ShareResult, merge_shares, peak_inflight


def record(index: int, sent_s: float, finished_s: float) -> RequestRecord:
    exchange = Exchange("ok", Timeline(sample_rate=24000))
    return RequestRecord(index, f"u{index}", "en", 10, None, False, sent_s, sent_s, finished_s, exchange)


def test_arrivals_are_dealt_round_robin_and_each_goes_to_one_process():
    shares = [Share(k, 3) for k in range(3)]
    owners = [[s.index for s in shares if s.takes(arrival)] for arrival in range(10)]
    assert owners == [[arrival % 3] for arrival in range(10)]
    assert all(Share().takes(arrival) for arrival in range(10))  # one process sends everything


def test_peak_inflight_counts_overlaps_and_a_finish_frees_its_slot_first():
    assert peak_inflight([]) == 0
    assert peak_inflight([record(0, 0.0, 1.0), record(1, 0.5, 2.0), record(2, 0.9, 1.5)]) == 3
    assert peak_inflight([record(0, 0.0, 1.0), record(1, 1.0, 2.0)]) == 1  # back to back


def test_merged_trial_keeps_arrival_order_and_pools_what_the_processes_saw():
    point = LoadPoint("open", 10.0)
    a = Trial(point, 7, "2026-01-01T00:00:02+00:00", 3.0, 1, [record(0, 0.1, 1.0), record(2, 0.3, 1.2)], [0.001])
    b = Trial(point, 7, "2026-01-01T00:00:01+00:00", 3.5, 1, [record(1, 0.2, 0.25), record(3, 0.4, 2.0)], [0.004])
    for trial in (a, b):
        trial.window_start_s, trial.window_min_end_s = 0.0, 2.5
    merged = merge_shares([ShareResult(a, 101), ShareResult(b, 102)])
    assert [r.index for r in merged.records] == [0, 1, 2, 3]
    assert (merged.seed, merged.point, merged.started_at, merged.wall_s) == (7, point, b.started_at, 3.5)
    assert merged.peak_inflight == 3  # 0.3-0.4: requests 0 and 2, then 3
    assert sorted(merged.loop_lag_s) == [0.001, 0.004]
    assert (merged.window_start_s, merged.window_min_end_s, merged.client_processes) == (0.0, 2.5, 2)
