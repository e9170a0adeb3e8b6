"""benchmarks/served_protocol.py, the served-performance protocol, run end to end on the CPU: it starts a
real `cadence serve` on the tiny checkpoint, sends Poisson arrivals at two rates and writes its table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from serving import REPO, free_port


def test_the_protocol_writes_its_table(tiny_checkpoint, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "benchmarks" / "served_protocol.py"), "--checkpoint", str(tiny_checkpoint)]
    cmd += ["--device", "cpu", "--rates", "1", "2", "--requests", "3", "--seeds", "0", "--max-seconds", "4"]
    cmd += ["--warmup", "1", "--fixed-frames", "4", "--port", str(free_port()), "--out", str(out)]
    cmd += ["--", "--max-streams", "4"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "protocol.json").read_text())
    assert [row["rate"] for row in summary["rows"]] == [1.0, 2.0]
    for row in summary["rows"]:
        assert row["sent"] == row["completed"] + row["failed"] and row["completed"] > 0
        p50, p95, p99 = row["ttfa_ms"]
        assert 0 < p50 <= p95 <= p99
        assert row["seeds"] == [0] and 0 < len(row["ttfa_samples_ms"]) <= row["completed"]  # kept for --merge
        assert min(row["ttfa_samples_ms"]) <= p50 <= max(row["ttfa_samples_ms"])
        assert row["client_stall_ms"] >= 0  # the client's own pauses, beside the server's
        (seed,) = row["by_seed"]  # the one trial on its own: here the row itself
        assert (seed["seed"], seed["with_gap"]) == (0, row["with_gap"])
        assert seed["ttfa_p95_ms"] == pytest.approx(row["ttfa_ms"][1], abs=0.11)  # each rounded to 0.1 ms
        assert seed["failed"] == row["failed"] and seed["client_stall_ms"] == row["client_stall_ms"]
        gc = row["gc"]  # both server processes' collections while the rate ran, from /metrics
        assert set(gc) == {"engine", "api"} and all(g["collections"] >= 0 <= g["longest_ms"] for g in gc.values())
    table = (out / "protocol.md").read_text()
    assert table.startswith("| requests/s | 1 | 2 |") and "playback gap" in table
    assert "| garbage collections, engine / API" in table
    assert "| prefill |" in table and all(row["stages_ms"]["queue"][0] >= 0 for row in summary["rows"])
    # Outside the server's stages: each measured request's TTFA at the client less the server's own,
    # joined by request id; the client holds audio only after the server has sent it.
    assert "| outside |" in table
    assert all(0 < v for row in summary["rows"] for v in row["stage_samples_ms"]["outside"])
    assert all(len(row["stage_samples_ms"]["outside"]) == len(row["ttfa_samples_ms"]) for row in summary["rows"])
    assert (out / "bench" / "1" / "results.json").exists() and (out / "bench" / "2" / "results.json").exists()
    assert Path(out / "serve.log").read_text().count("warm-up synthesis") == 1
    # One client process a client core (the last two; on a machine of two cores or fewer, all of them).
    processes = min(2, len(os.sched_getaffinity(0)))
    assert summary["client_processes"] == processes
    bench = json.loads((out / "bench" / "2" / "results.json").read_text())
    assert [t["client_processes"] for t in bench["trials"]] == [processes]


def test_runs_of_separate_rates_merge_into_one_table(tmp_path):
    """--merge tabulates rates measured in separate runs (device calls too short for all of them) by
    rate, and refuses a rate two runs measured."""

    def run(name: str, rates: list[float]) -> Path:
        rows = [
            {"rate": r, "sent": 10, "completed": 9, "failed": 1, "ttfa_ms": [10.0 * r, 11.0 * r, 12.0 * r],
             "with_gap": 0, "requests_per_s": r, "stages_ms": {"prefill": [1.0, 2.0]}}
            for r in rates
        ]  # fmt: skip
        path = tmp_path / name / "protocol.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"size": "1.7b", "seeds": [0], "rows": rows}))
        return path

    script = [sys.executable, str(REPO / "benchmarks" / "served_protocol.py")]
    a, b = run("a", [10.0, 1.0]), run("b", [4.0])
    done = subprocess.run([*script, "--merge", str(a), str(b), "--out", str(tmp_path / "m")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads((tmp_path / "m" / "protocol.json").read_text())
    assert [row["rate"] for row in merged["rows"]] == [1.0, 4.0, 10.0]
    assert (tmp_path / "m" / "protocol.md").read_text().startswith("| requests/s | 1 | 4 | 10 |\n")
    assert "40.0 / 44.0 / 48.0" in done.stdout
    clash = subprocess.run([*script, "--merge", str(a), str(a), "--out", str(tmp_path / "c")], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert (
        clash.returncode != 0
        and "rate 1 is measured by more than one run, not all with per-request samples" in clash.stderr
    )


def test_runs_of_one_rate_with_other_seeds_pool_their_requests(tmp_path):
    """--merge pools a rate that runs measured with different seeds (the full protocol gathered over
    several device calls): the percentiles are those of all the requests together, counts and
    measuring windows add up; the same seed twice is refused."""
    rng = np.random.default_rng(7)
    samples = {0: rng.gamma(4.0, 4.0, 300).round(2).tolist(), 1: rng.gamma(6.0, 4.0, 200).round(2).tolist()}

    def run(name: str, seed: int) -> Path:
        ttfa = samples[seed]
        row = {"rate": 20.0, "sent": len(ttfa) + 1, "completed": len(ttfa), "failed": 1, "with_gap": seed,
               "ttfa_ms": [0.0, 0.0, 0.0], "requests_per_s": 0.0, "seeds": [seed], "window_s": 10.0 + seed,
               "ttfa_samples_ms": ttfa, "stages_ms": {}, "stage_samples_ms": {"codec": ttfa[:50]},
               "gap_requests": [{"seed": seed, "arrival_s": 3.5, "ttfa_ms": 30.0, "underruns": 1,
                                 "stall_ms": 40.0 + seed, "max_chunk_gap_ms": 120.0,
                                 "server_max_chunk_gap_ms": 110.0}] * seed,
               "gc": {"engine": {"collections": 10 + seed, "ms": 2.5, "longest_ms": 0.5 + seed},
                      "api": {"collections": 3, "ms": 1.0, "longest_ms": 0.25}},
               "client_stall_ms": 7.0 + seed,
               "by_seed": [{"seed": seed, "ttfa_p95_ms": 20.0 + seed, "with_gap": seed, "failed": 1,
                            "client_stall_ms": 7.0 + seed}]}  # fmt: skip
        path = tmp_path / name / "protocol.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"size": "1.7b", "seeds": [seed], "rows": [row]}))
        return path

    script = [sys.executable, str(REPO / "benchmarks" / "served_protocol.py")]
    a, b = run("a", 0), run("b", 1)
    done = subprocess.run([*script, "--merge", str(a), str(b), "--out", str(tmp_path / "m")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads((tmp_path / "m" / "protocol.json").read_text())["rows"]
    everything = samples[0] + samples[1]
    assert row["ttfa_ms"] == [round(float(v), 1) for v in np.percentile(everything, [50, 95, 99])]
    assert row["ttfa_ms"] != [round(float(v), 1) for v in np.percentile(samples[0], [50, 95, 99])]
    assert (row["sent"], row["completed"], row["failed"], row["with_gap"]) == (502, 500, 2, 1)
    assert row["seeds"] == [0, 1] and row["window_s"] == 21.0 and row["requests_per_s"] == 500 / 21.0
    assert row["stages_ms"]["codec"] == [
        round(float(v), 1) for v in np.percentile(everything[:50] + samples[1][:50], [50, 95])
    ]
    assert "| seeds | 0 1 |" in (tmp_path / "m" / "protocol.md").read_text()
    assert [g["stall_ms"] for g in row["gap_requests"]] == [41.0]  # the gap's request, described
    assert "| longest playback stall (ms) | 41 |" in (tmp_path / "m" / "protocol.md").read_text()
    assert (
        "| those requests' longest wait for a chunk, client / server (ms) | 120 / 110 |"
        in (tmp_path / "m" / "protocol.md").read_text()
    )
    assert row["gc"] == {"engine": {"collections": 21, "ms": 5.0, "longest_ms": 1.5},
                         "api": {"collections": 6, "ms": 2.0, "longest_ms": 0.25}}  # fmt: skip
    assert "| 21 (1.5) / 6 (0.2) |" in (tmp_path / "m" / "protocol.md").read_text()
    assert (
        row["client_stall_ms"] == 8.0
        and "| the client's longest event-loop stall (ms) | 8 |" in (tmp_path / "m" / "protocol.md").read_text()
    )
    assert [(s["seed"], s["ttfa_p95_ms"]) for s in row["by_seed"]] == [(0, 20.0), (1, 21.0)]  # each run's own trial
    assert "| p95 TTFA by seed (ms) | 20.0 · 21.0 |" in (tmp_path / "m" / "protocol.md").read_text()
    assert "| requests with a gap by seed | 0 · 1 |" in (tmp_path / "m" / "protocol.md").read_text()
    again = subprocess.run([*script, "--merge", str(a), str(a), "--out", str(tmp_path / "c")], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert again.returncode != 0 and "rate 20 is measured by two runs with the same seed" in again.stderr


def test_the_servers_side_of_each_request_is_read_from_its_access_log(tmp_path):
    """The first-audio stages and each request's longest wait between chunks come from the access-log
    lines written while the rate ran, successful requests only, joined to the client's requests by
    the X-Request-Id the bench records."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import served_protocol

    def line(when: str, entry: dict) -> str:
        return f"2026-12-06 10:00:{when} INFO cadence.access: {json.dumps(entry)}"

    ok = {"status": 200, "ttfa_ms": 9.5, "first_audio_ms": {"prefill": 1.5, "codec": 4.0}}
    log = tmp_path / "serve.log"
    log.write_text("\n".join([
        line("00,000", {"id": "early", **ok, "max_chunk_gap_ms": 50.0}),  # before the rate began
        line("05,000", {"id": "a", **ok, "max_chunk_gap_ms": 90.5}),
        "2026-12-06 10:00:05,100 INFO cadence.engine: not an access line",
        line("06,000", {"id": "b", **ok}),  # one chunk: no wait between chunks
        line("07,000", {"id": "c", "status": 429}),
    ]))  # fmt: skip
    start = datetime(2026, 12, 6, 10, 0, 4).timestamp()
    lines = served_protocol.access_lines(log, start, start + 10)
    assert [x["id"] for x in lines] == ["a", "b"]
    assert served_protocol.first_audio_stages(lines) == {"prefill": [1.5, 1.5], "codec": [4.0, 4.0]}
    assert served_protocol.server_chunk_gaps(lines) == {"a": 90.5}
    assert served_protocol.server_ttfa(lines) == {"a": 9.5, "b": 9.5}
