"""Aggregates, results.json, requests.csv, the terminal table, plots, compare and the CLI, on synthetic trials."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from rich.console import Console

from cadence.bench import plots as plots_module
from cadence.bench.aggregate import aggregate, by_point
from cadence.bench.client import Exchange
from cadence.bench.compare import CompareError, load_results, run_compare
from cadence.bench.load import LoadPoint, RequestRecord, Trial
from cadence.bench.metrics import Chunk, Timeline
from cadence.bench.report import CSV_COLUMNS, BenchResult, print_summary
from cadence.bench.run import BenchConfig, write_outputs
from cadence.cli import main

SR = 24000
FRAME = 1920


def ok_record(index: int, sent: float, ttfa: float, frames: int = 5, gap: float = 0.05, warmup: bool = False,
              scheduled: float | None = None) -> RequestRecord:  # fmt: skip
    """A completed request whose frames arrive `gap` apart from `ttfa` on (audible from the first sample)."""
    chunks = [Chunk(ttfa + i * gap, FRAME) for i in range(frames)]
    end = chunks[-1].t + 0.001
    tl = Timeline(SR, headers_s=ttfa / 2, first_byte_s=ttfa, end_s=end, chunks=chunks, onset_sample=0,
                  audible_window_samples=480)  # fmt: skip
    return RequestRecord(index, f"u{index}", "en", 20, frames, warmup, scheduled, sent, sent + end, Exchange("ok", tl))


def failed_record(index: int, sent: float, outcome: str, status: int | None, error: str) -> RequestRecord:
    ex = Exchange(outcome, Timeline(SR, headers_s=0.01), http_status=status, error=error)
    return RequestRecord(index, f"u{index}", "en", 20, None, False, None, sent, sent + 0.01, ex)


def closed_trial(concurrency: int, seed: int = 0, ttfa: float = 0.1) -> Trial:
    records = [ok_record(0, 0.0, ttfa, warmup=True)]
    records += [ok_record(i, 0.5 + 0.5 * (i - 1), ttfa) for i in range(1, 5)]
    records += [
        failed_record(5, 2.5, "http_429", 429, "queue full"),
        failed_record(6, 2.6, "timeout", None, "no complete answer within 1 s"),
    ]
    return Trial(LoadPoint("closed", concurrency), seed, "2026-01-01T00:00:00+00:00", 3.0, concurrency, records)


def open_trial(rate: float, seed: int) -> Trial:
    records = [ok_record(i, 0.2 * i + 0.001 * seed, 0.1, scheduled=0.2 * i) for i in range(4)]
    # One slow stream, sent 30 ms late: 80 ms frames 200 ms apart stall the player before each of the last 4.
    records.append(ok_record(4, 1.0 + 0.001 * seed, 0.1, frames=5, gap=0.2, scheduled=0.97))
    return Trial(LoadPoint("open", rate), seed, "2026-01-01T00:00:00+00:00", 2.0, 3, records)


# --- aggregates ---------------------------------------------------------------------------------------


def test_aggregate_counts_and_rates_exclude_warmup():
    a = aggregate([closed_trial(2)])
    assert (a.sent, a.completed, a.failed) == (6, 4, 2)
    assert a.failures == {"http_429": 1, "timeout": 1}
    assert (a.warmup_sent, a.warmup_failed) == (1, 0)
    # Window: first measured send (0.5) to the last finish (timeout request: 2.61).
    assert a.window_s == pytest.approx(2.61 - 0.5)
    assert a.requests_per_s == pytest.approx(4 / 2.11)
    assert a.audio_s_per_wall_s == pytest.approx(4 * 5 * 0.08 / 2.11)
    assert a.ttfa_s.n == 4 and a.ttfa_s.p50 == pytest.approx(0.1)
    assert a.audio_s.p50 == pytest.approx(0.4)
    assert a.requests_with_underruns == 0 and a.inaudible == 0
    assert a.scheduling_lag_s.n == 0  # closed loop has no schedule


def test_aggregate_pools_seeds_and_counts_underruns_and_lag():
    a = aggregate([open_trial(5.0, 0), open_trial(5.0, 1)])
    assert a.seeds == [0, 1] and a.sent == 10 and a.completed == 10
    assert a.requests_with_underruns == 2 and a.underruns == 2 * 4
    assert a.stall_s.max == pytest.approx(4 * (0.2 - 0.08))
    assert a.chunk_gap_s.max == pytest.approx(0.2)
    assert a.scheduling_lag_s.max == pytest.approx(0.031)  # seed 1, request 4: sent at 1.001 for 0.97
    # Per seed: first send (0, or 0.001) to the slow request's finish (sent + 0.1 + 4 × 0.2 + 0.001), summed.
    assert a.window_s == pytest.approx((1.0 + 0.901) + (1.001 + 0.901 - 0.001))
    with pytest.raises(ValueError):
        aggregate([open_trial(5.0, 0), closed_trial(2)])


def test_open_loop_window_spans_the_arrival_window():
    trial = open_trial(5.0, 0)  # measured sends 0 .. 1.0, last finish 1.901
    trial.window_start_s, trial.window_min_end_s = 0.0, 3.0  # no warm-up, a 3 s arrival window
    assert trial.window_s() == pytest.approx(3.0)  # the server finished early: the window still lasts 3 s
    assert aggregate([trial]).requests_per_s == pytest.approx(5 / 3.0)
    trial.window_min_end_s = 1.5
    assert trial.window_s() == pytest.approx(1.901)  # a late finish extends it
    closed = closed_trial(2)
    assert closed.window_s() == pytest.approx(2.61 - 0.5)  # closed loop: first measured send to last finish


def test_by_point_keeps_run_order():
    trials = [closed_trial(1), closed_trial(4), closed_trial(1, seed=1), open_trial(2.0, 0)]
    assert [[(t.point.value, t.seed) for t in g] for g in by_point(trials)] == [[(1, 0), (1, 1)], [(4, 0)], [(2.0, 0)]]


# --- files --------------------------------------------------------------------------------------------


def result_of(trials: list[Trial], label: str = "run") -> BenchResult:
    return BenchResult(BenchConfig().to_json(), {"command": ["test"]}, trials, label)


def test_results_json_and_requests_csv_agree(tmp_path):
    trials = [closed_trial(1), closed_trial(4), open_trial(5.0, 0)]
    files = write_outputs(result_of(trials), tmp_path, plots=False)
    assert [f.name for f in files] == ["results.json", "requests.csv"]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["schema"] == "cadence-bench/1" and results["label"] == "run"
    assert "wall over audio" in results["definitions"]["rtf"]
    assert [(p["mode"], p["load"]) for p in results["points"]] == [("closed", 1), ("closed", 4), ("open", 5.0)]
    with (tmp_path / "requests.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == CSV_COLUMNS
        rows = list(reader)
    assert len(rows) == sum(len(t.records) for t in trials)
    for p in results["points"]:
        mine = [r for r in rows if (r["mode"], float(r["load"])) == (p["mode"], p["load"]) and r["warmup"] == "False"]
        assert p["sent"] == len(mine)
        assert p["completed"] == sum(r["outcome"] == "ok" for r in mine)
    timeout = next(r for r in rows if r["outcome"] == "timeout")
    assert timeout["e2e_s"] == "" and timeout["rtf"] == "" and timeout["error"].startswith("no complete answer")
    first = next(r for r in rows if r["mode"] == "closed" and r["index"] == "1")
    assert float(first["rtf"]) == pytest.approx(float(first["e2e_s"]) / float(first["audio_s"]))


def test_api_key_never_reaches_results_json(tmp_path):
    config = BenchConfig()
    config.server.api_key = "sk-very-secret"
    result = BenchResult(config.to_json(), {}, [closed_trial(1)])
    write_outputs(result, tmp_path, plots=False)
    assert "sk-very-secret" not in (tmp_path / "results.json").read_text()


def test_plots_are_written_as_png(tmp_path):
    pytest.importorskip("matplotlib")
    trials = [closed_trial(1), closed_trial(4, ttfa=0.2), open_trial(2.0, 0), open_trial(5.0, 0)]
    files = write_outputs(result_of(trials), tmp_path, plots=True)
    names = sorted(f.name for f in files if f.suffix == ".png")
    assert names == sorted(
        ["ttfa_cdf.png", "ttfa_vs_concurrency.png", "throughput_vs_concurrency.png", "ttfa_vs_rate.png",
         "throughput_vs_rate.png"]
    )  # fmt: skip
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_matplotlib_skips_plots_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr("cadence.bench.run.have_matplotlib", lambda: False)
    console = Console(record=True, width=200)
    files = write_outputs(result_of([closed_trial(1)]), tmp_path, plots=True, console=console)
    assert [f.name for f in files] == ["results.json", "requests.csv"]
    assert console.export_text().strip() == plots_module.MISSING_MESSAGE


def test_terminal_summary_names_units_and_failures():
    console = Console(record=True, width=250)
    print_summary(result_of([closed_trial(4), open_trial(5.0, 0), open_trial(5.0, 1)], "demo"), console)
    text = console.export_text()
    assert "cadence bench — demo" in text
    assert "RTF = wall/audio" in text
    assert "closed c=4" in text and "open 5/s" in text
    assert "http_429" in text and "queue full" in text and "timeout" in text
    assert "scheduling lag" in text  # 30 ms late sends trigger the warning


# --- compare ------------------------------------------------------------------------------------------


def test_compare_prints_ratios_and_the_better_side(tmp_path):
    write_outputs(result_of([closed_trial(4, ttfa=0.1)], "fast"), tmp_path / "a", plots=False)
    write_outputs(result_of([closed_trial(4, ttfa=0.2), closed_trial(8)], "slow"), tmp_path / "b", plots=False)
    console = Console(record=True, width=200)
    assert run_compare(tmp_path / "a" / "results.json", tmp_path / "b" / "results.json", console) == 0
    text = console.export_text()
    assert "fast (a) vs slow (b)" in text
    rows = [[c.strip() for c in line.split("│")[2:7]] for line in text.splitlines() if line.count("│") == 7]
    cells = {row[0]: row[1:] for row in rows}
    assert cells["TTFA p50 (ms)"] == ["100", "200", "2.00×", "a"]  # latency: lower is better
    assert cells["RTF p50 (wall/audio)"][3] == "a"
    assert cells["completed req/s"][3] == ""  # equal throughput: no winner
    assert "closed c=8 only in b" in text


def test_compare_refuses_files_that_are_not_results(tmp_path):
    with pytest.raises(CompareError, match="not found"):
        load_results(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    with pytest.raises(CompareError, match="not a cadence bench results.json"):
        load_results(tmp_path / "other.json")


def test_compare_of_disjoint_runs_fails(tmp_path):
    write_outputs(result_of([closed_trial(1)]), tmp_path / "a", plots=False)
    write_outputs(result_of([open_trial(5.0, 0)]), tmp_path / "b", plots=False)
    console = Console(record=True, width=200)
    assert run_compare(tmp_path / "a" / "results.json", tmp_path / "b" / "results.json", console) == 1
    assert "share no load point" in console.export_text()


# --- the command line ---------------------------------------------------------------------------------


def test_help_explains_units_and_rtf_direction(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = capsys.readouterr().out
    for phrase in ("wall / audio", "Below 1 is faster than real time", "-45 dBFS", "Poisson", "underrun", "compare"):
        assert phrase in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--dataset", "seed-tts"], "--dataset-path"),
        (["bench", "--dataset", "text", "--dataset-path", "/nonexistent/lines.txt"], "one utterance per line"),
        (["bench", "--fixed-frames", "six"], "--fixed-frames"),
        (["bench", "--rate", "0"], "--rate"),
        (["bench", "--concurrency", "8", "--max-inflight", "4"], "--max-inflight"),
        (["bench", "--rate", "5", "--client-processes", "0"], "--client-processes"),
        (["bench", "--field", "novalue"], "KEY=VALUE"),
        (["bench", "--extra-json", "[1]"], "JSON object"),
        (["bench", "compare", "/nonexistent/a.json", "/nonexistent/b.json"], "results file not found"),
    ],
)
def test_bad_input_is_one_clear_error(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written even by mistake
    assert main(["--quiet", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not Path("bench-results").exists()


def test_cli_defaults_and_extra_fields():
    from cadence.bench.cli import build_config

    parser_args = ["bench", "--field", "seed=3", "--field", "task_type=CustomVoice", "--extra-json", '{"speed": 1.0}']
    config = build_config(_parse(parser_args))
    assert config.load.concurrencies == [1] and config.load.num_requests == 32 and config.load.duration_s is None
    assert config.server.extra_fields == {"speed": 1.0, "seed": 3, "task_type": "CustomVoice"}
    opened = build_config(_parse(["bench", "--rate", "1", "5", "--fixed-frames", "auto", "--seeds", "0", "1", "2"]))
    assert opened.load.rates == [1.0, 5.0] and opened.load.concurrencies == [] and opened.load.duration_s == 60.0
    assert opened.load.fixed_frames == "auto" and opened.load.seeds == [0, 1, 2]
    assert opened.load.client_processes == 1
    assert build_config(_parse(["bench", "--rate", "9", "--client-processes", "3"])).load.client_processes == 3


def _parse(argv: list[str]):
    from cadence.cli import build_parser

    return build_parser().parse_args(argv)
