"""End-to-end runs of the bench over real HTTP: a small stub speech server now, a live cadence server later.

The stub (stdlib http.server, chunked HTTP/1.1) streams 80 ms frames of 24 kHz PCM, as raw audio or as
SSE events, with short sleeps between frames. Marked inputs make it fail: "[429]" and "[500]" answer
those statuses, "[slow]" waits past the client's timeout. Every test checks accounting (each request
sent is completed or failed, by class) and file contents, never how fast anything was.
"""

from __future__ import annotations

import base64
import csv
import gc
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest

from cadence.bench import BenchConfig, LoadConfig, ServerConfig, WorkloadSpec, run_bench
from cadence.bench.load import poisson_arrivals
from cadence.bench.processes import peak_inflight

SR = 24000
FRAME = 1920  # samples per 80 ms frame
DEFAULT_FRAMES = 4
SLOW_S = 3.0
REPO = Path(__file__).resolve().parents[1]


# --- the stub server ------------------------------------------------------------------------------


def _frame(i: int) -> bytes:
    """Frame 0 is digital silence (a leading pause); later frames a 440 Hz tone at about -15 dBFS."""
    if i == 0:
        return bytes(2 * FRAME)
    t = (np.arange(FRAME) + i * FRAME) / SR
    return np.round(8000 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes()


def _wav_header() -> bytes:
    fmt = struct.pack("<HHIIHH", 1, 1, SR, 2 * SR, 2, 16)
    return b"RIFF\xff\xff\xff\xffWAVEfmt " + struct.pack("<I", 16) + fmt + b"data\xff\xff\xff\xff"


class StubSpeechHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, like a real streaming server

    def setup(self) -> None:
        super().setup()
        # Without TCP_NODELAY each small chunk would wait on the client's delayed ACK (Nagle).
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "stub-tts", "object": "model"}]})
        elif self.path == "/ready":
            self._json(200, {"ready": True})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body.get("input", "")
        if "[429]" in text:
            return self._json(429, {"error": {"message": "queue full", "type": "rate_limit_error"}})
        if "[500]" in text:
            return self._json(500, {"error": {"message": "engine crashed", "type": "server_error"}})
        if "[slow]" in text:
            time.sleep(SLOW_S)
        frames = int(body.get("max_new_tokens") or DEFAULT_FRAMES)
        sse = body.get("stream_format") == "sse"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if sse else "audio/pcm")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            pieces = ([_wav_header()] if body.get("response_format") == "wav" else []) + [
                _frame(i) for i in range(frames)
            ]
            for i, piece in enumerate(pieces):
                if sse:
                    event = {"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode()}
                    piece = f"data: {json.dumps(event)}\n\n".encode()
                self._chunk(piece)
                if i < len(pieces) - 1:
                    time.sleep(0.002)
            if sse:
                done = {"type": "speech.audio.done", "usage": {"output_tokens": frames}, "finish_reason": "length"}
                self._chunk(f"data: {json.dumps(done)}\n\n".encode())
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def stub_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubSpeechHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# --- accounting helpers ---------------------------------------------------------------------------


def read_outputs(out: Path) -> tuple[dict, list[dict]]:
    results = json.loads((out / "results.json").read_text())
    with (out / "requests.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    return results, rows


def assert_accounted(out: Path) -> tuple[dict, list[dict]]:
    """Every request appears once in requests.csv, and results.json's counts agree with the rows."""
    results, rows = read_outputs(out)
    for trial in results["trials"]:
        mine = [r for r in rows if r["mode"] == trial["mode"] and float(r["load"]) == trial["load"]]
        mine = [r for r in mine if int(r["seed"]) == trial["seeds"][0]]
        measured = [r for r in mine if r["warmup"] == "False"]
        warmup = [r for r in mine if r["warmup"] == "True"]
        assert trial["completed"] + trial["failed"] == trial["sent"] == len(measured)
        assert trial["completed"] == sum(r["outcome"] == "ok" for r in measured)
        assert trial["failures"] == dict(Counter(r["outcome"] for r in measured if r["outcome"] != "ok"))
        assert trial["warmup_sent"] == len(warmup)
        assert sorted(int(r["index"]) for r in mine) == list(range(len(mine)))  # no request lost or doubled
    for point in results["points"]:
        trials = [t for t in results["trials"] if (t["mode"], t["load"]) == (point["mode"], point["load"])]
        assert point["sent"] == sum(t["sent"] for t in trials)
        assert point["completed"] == sum(t["completed"] for t in trials)
    return results, rows


def config(url: str, out: Path, load: LoadConfig, model: str = "stub-tts", **server) -> BenchConfig:
    return BenchConfig(
        server=ServerConfig(base_url=url, model=model, **server),
        load=load,
        workload=WorkloadSpec(kind="builtin", languages=["en", "zh", "de"]),
        output_dir=out,
        plots=False,  # plots are test_bench_report.py's business
    )


# --- runs against the stub ------------------------------------------------------------------------


def test_closed_loop_accounts_for_every_request(stub_url, tmp_path):
    load = LoadConfig(concurrencies=[1, 4], num_requests=9, warmup_requests=2, fixed_frames=5)
    gc.unfreeze()
    result = run_bench(config(stub_url, tmp_path, load), argv=["test"])
    results, rows = assert_accounted(tmp_path)
    assert [(p["mode"], p["load"], p["sent"], p["completed"]) for p in results["points"]] == [
        ("closed", 1, 9, 9),
        ("closed", 4, 9, 9),
    ]
    assert len(rows) == 2 * (9 + 2)
    ok = [r for r in rows if r["outcome"] == "ok"]
    # Each answer is exactly 5 frames, the first silent: audio and leading silence follow from samples.
    assert {float(r["audio_s"]) for r in ok} == {5 * 0.08}
    # Onset: the 20 ms window that starts 10 ms before the tone already holds 10 ms of it.
    assert [float(r["leading_silence_s"]) for r in ok] == pytest.approx([0.08 - 0.01] * len(ok))
    assert {int(r["max_new_tokens"]) for r in rows} == {5}
    for r in ok:
        assert float(r["ttfb_s"]) <= float(r["first_audio_s"]) <= float(r["ttfa_s"]) <= float(r["e2e_s"])
        assert float(r["rtf"]) == pytest.approx(float(r["e2e_s"]) / float(r["audio_s"]))
    assert results["environment"]["server"]["models"] == ["stub-tts"]
    assert results["config"]["load"]["concurrencies"] == [1, 4]
    assert results["points"][1]["peak_inflight"] <= 4
    assert len(result.trials) == 2
    assert gc.get_freeze_count() > 0  # each trial froze the client's heap out of the collector's walks
    gc.unfreeze()


def test_open_loop_sends_the_seeded_poisson_schedule(stub_url, tmp_path):
    load = LoadConfig(rates=[15.0], duration_s=0.8, warmup_s=0.3, seeds=[0, 1], fixed_frames=3)
    result = run_bench(config(stub_url, tmp_path, load, stream_format="sse"), argv=["test"])
    results, rows = assert_accounted(tmp_path)
    # The peak a process counts as it sends is the one a merge of processes computes from the records.
    assert all(t.peak_inflight == peak_inflight(t.records) for t in result.trials)
    for seed in (0, 1):
        schedule = poisson_arrivals(15.0, seed, 0.3, 0.8, None)
        mine = [r for r in rows if int(r["seed"]) == seed]
        assert len(mine) == len(schedule)
        assert [float(r["scheduled_s"]) for r in mine] == pytest.approx(schedule)
        assert [r["warmup"] == "True" for r in mine] == [t < 0.3 for t in schedule]
        assert all(r["finish_reason"] == "length" for r in mine)  # from speech.audio.done
    (point,) = results["points"]
    assert point["seeds"] == [0, 1] and point["mode"] == "open" and point["load"] == 15.0
    assert point["failed"] == 0 and point["sent"] == sum(r["warmup"] == "False" for r in rows)
    assert point["scheduling_lag_s"]["n"] == point["sent"]
    assert all(t["window_s"] >= 0.8 for t in results["trials"])  # at least the arrival window, by definition


def test_open_loop_dealt_over_client_processes_keeps_one_schedule(stub_url, tmp_path):
    """Two client processes: each arrival sent once, by the process it was dealt to, at its planned
    time on the shared clock; one merged trial a seed, as one process would have written it."""
    load = LoadConfig(rates=[15.0], duration_s=0.8, warmup_s=0.3, seeds=[0, 1], fixed_frames=3, client_processes=2)
    result = run_bench(config(stub_url, tmp_path, load), argv=["test"])
    results, rows = assert_accounted(tmp_path)
    for seed in (0, 1):
        schedule = poisson_arrivals(15.0, seed, 0.3, 0.8, None)
        mine = [r for r in rows if int(r["seed"]) == seed]
        assert [float(r["scheduled_s"]) for r in mine] == pytest.approx(schedule)
        assert all(float(r["sent_s"]) >= float(r["scheduled_s"]) for r in mine)  # never early: one clock
        assert all(r["outcome"] == "ok" for r in mine)
    assert [t["client_processes"] for t in results["trials"]] == [2, 2]
    for trial in result.trials:
        assert 1 <= trial.peak_inflight <= len(trial.records)
        assert trial.loop_lag_s  # both processes' ticks, pooled
    (point,) = results["points"]
    assert point["failed"] == 0 and point["scheduling_lag_s"]["n"] == point["sent"]


def test_failures_are_counted_by_status(stub_url, tmp_path):
    lines = ["plain one", "please [429]", "plain two", "crash [500]", "again [429]", "slow [slow]", "plain three"]
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n")
    cfg = BenchConfig(
        server=ServerConfig(base_url=stub_url, timeout_s=0.5, response_format="wav"),
        load=LoadConfig(concurrencies=[3], num_requests=len(lines)),
        workload=WorkloadSpec(kind="text", path=str(tmp_path / "lines.txt"), language="en"),
        output_dir=tmp_path / "out",
        plots=False,
    )
    run_bench(cfg, argv=["test"])
    results, rows = assert_accounted(tmp_path / "out")
    (point,) = results["points"]
    assert point["failures"] == {"http_429": 2, "http_500": 1, "timeout": 1}
    assert (point["sent"], point["completed"], point["failed"]) == (7, 3, 4)
    by_id = {r["utterance_id"]: r for r in rows}
    assert by_id["line-2"]["http_status"] == "429" and by_id["line-2"]["error"] == "queue full"
    assert by_id["line-4"]["error"] == "engine crashed"
    assert by_id["line-6"]["e2e_s"] == ""  # timed out: no end-to-end latency
    assert {float(by_id[i]["audio_s"]) for i in ("line-1", "line-3", "line-7")} == {DEFAULT_FRAMES * 0.08}


def test_unreachable_server_is_all_connect_errors(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    load = LoadConfig(concurrencies=[2], num_requests=3)
    run_bench(config(f"http://127.0.0.1:{port}", tmp_path, load, timeout_s=5.0), argv=["test"])
    results, _ = assert_accounted(tmp_path)
    assert results["points"][0]["failures"] == {"connect_error": 3}
    assert results["environment"]["server"]["error"]


# --- a live cadence server ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cadence_url(request, tmp_path_factory):
    """`cadence serve` on the tiny checkpoint, on CPU, once /ready answers 200."""
    tiny_checkpoint = request.getfixturevalue("tiny_checkpoint")
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    cmd = [sys.executable, "-m", "cadence.cli", "serve", str(tiny_checkpoint), "--port", str(port), "--device", "cpu"]
    with log.open("w") as log_file:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, env=os.environ.copy())
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300  # loading and warming a tiny model on 2 CPU cores
        try:
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"cadence serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
                try:
                    if httpx.get(url + "/ready", timeout=2, trust_env=False).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"cadence serve never became ready:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
def test_live_cadence_closed_and_open_loop(cadence_url, tmp_path, stream_format):
    frames = 6
    listed = httpx.get(cadence_url + "/v1/models", timeout=10, trust_env=False)
    served = [m["id"] for m in listed.json().get("data", [])] if listed.status_code == 200 else []
    server = {"stream_format": stream_format, "timeout_s": 120, **({"model": served[0]} if served else {})}
    closed = LoadConfig(concurrencies=[1, 4], num_requests=4, warmup_requests=1, fixed_frames=frames)
    run_bench(config(cadence_url, tmp_path / "closed", closed, **server))
    opened = LoadConfig(rates=[2.0], duration_s=2.0, warmup_s=0.5, fixed_frames=frames)
    run_bench(config(cadence_url, tmp_path / "open", opened, **server))
    for out in (tmp_path / "closed", tmp_path / "open"):
        results, rows = assert_accounted(out)
        for point in results["points"]:
            assert point["failed"] == 0, point["failures"]
        for r in rows:
            # max_new_tokens + ignore_eos: at most `frames` frames of 80 ms (a server may trim a silent first one).
            assert 0 < float(r["audio_s"]) <= frames * 0.08 + 1e-9
        ids = [r["request_id"] for r in rows]  # the server's X-Request-Id, naming its access-log lines
        assert all(i.startswith("speech-") for i in ids) and len(set(ids)) == len(ids)
