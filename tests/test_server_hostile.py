"""Hostile and failing input against one real `cadence serve` process: admission at capacity,
integers out of range, deep JSON, WebSocket floods and failures, and faults that must stay with the
request that met them.

The server runs through tests/faulty_serve.py, which injects two faults: the engine fails the
prefill of any request seeded FAULT_SEED, and the API process raises an unexpected exception for
the input API_FAULT_INPUT. Every other request must be untouched by them.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from pathlib import Path

import httpx
import pytest
from faulty_serve import API_FAULT_INPUT, FAULT_SEED
from serving import FRAME, Server, pcm_samples, wait_for
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

FAULTY_SERVE = Path(__file__).with_name("faulty_serve.py")
MAX_STREAMS, MAX_QUEUE = 6, 4  # the fault test holds 9 requests at once
FRAMES = 4
GOOD = {"input": "Hello there.", "voice": "ryan", "response_format": "pcm", "max_new_tokens": FRAMES}
GOOD["ignore_eos"] = True
WS_CONFIG = {"type": "session.config", "voice": "ryan", "max_new_tokens": 1, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    # One admission per engine step (a prompt is longer than the prefill budget): a burst waits in
    # the engine's queue while it is admitted, which is what the capacity test needs to see.
    args = ["--max-streams", str(MAX_STREAMS), "--max-queue", str(MAX_QUEUE), "--prefill-token-budget", "1"]
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("serve-hostile"), *args, entry=FAULTY_SERVE)
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def post(server: Server, **fields) -> httpx.Response:
    with server.client() as c:
        return c.post("/v1/audio/speech", json={**GOOD, **fields})


def error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    if param is not None:
        assert err["param"] == param, err
    return err


def concurrently(*calls) -> list:
    """Run the calls at once (threads released together); their results in order."""
    results: list = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int, call) -> None:
        start.wait()
        try:
            results[i] = call()
        except Exception as e:  # reported by the caller's assertions
            results[i] = e

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return results


# -- admission ---------------------------------------------------------------------------------------


def test_a_burst_at_exactly_capacity_is_admitted(server):
    """max_streams + max_queue requests at once: those that fit a free slot are admitted though the
    queue bound is smaller than the burst; none is refused."""
    frames = 20
    responses = concurrently(*[lambda: post(server, max_new_tokens=frames)] * (MAX_STREAMS + MAX_QUEUE))
    for r in responses:
        assert isinstance(r, httpx.Response) and r.status_code == 200, r
        assert pcm_samples(r.content).size == frames * FRAME


def test_max_queue_zero_serves_max_streams_at_once(tiny_checkpoint, tmp_path):
    s = Server(tiny_checkpoint, tmp_path, "--max-streams", "2", "--max-queue", "0").wait_ready()
    try:
        first = concurrently(*[lambda: post(s, max_new_tokens=6)] * 2)
        assert [r.status_code for r in first] == [200, 200], first
        long = {**GOOD, "max_new_tokens": 2000}
        with s.client() as a, s.client() as b, a.stream("POST", "/v1/audio/speech", json=long) as r1:
            with b.stream("POST", "/v1/audio/speech", json=long) as r2:
                assert r1.status_code == r2.status_code == 200
                assert error(post(s), 429)["code"] == "queue_full"
    finally:
        assert s.stop() == 0, s.log()[-3000:]


# -- validation --------------------------------------------------------------------------------------

OUT_OF_RANGE = {
    "max_new_tokens": [2**64, 2**64 - 1, 12801, 0, -5],
    "seed": [2**63, 2**64, -1],
    "top_k": [2**64, 100_001, -1],
}


@pytest.mark.parametrize(("field", "value"), [(f, v) for f, vs in OUT_OF_RANGE.items() for v in vs])
def test_integers_out_of_range_are_a_400_on_a_kept_connection(server, field, value):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        body = json.dumps({**GOOD, field: value})
        conn.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        err = json.loads(r.read())["error"]
        assert r.status == 400 and err["param"] == field, err
        assert not r.will_close  # the keep-alive connection survives a bad request
        conn.request("POST", "/v1/audio/speech", json.dumps(GOOD), {"Content-Type": "application/json"})
        again = conn.getresponse()
        assert again.status == 200 and len(again.read()) == 2 * FRAMES * FRAME
    finally:
        conn.close()


def test_deeply_nested_unknown_field_is_a_400(server):
    deep = "[" * 20000 + "]" * 20000
    with server.client() as c:
        r = c.post("/v1/audio/speech", content=f'{{"input": "Hi.", "voice": "ryan", "x": {deep}}}'.encode())
    assert error(r, 400)["code"] == "invalid_json"
    assert post(server).status_code == 200


# -- failures are counted, logged once, and stay with their request --------------------------------------


def requests_with(server: Server, status: int) -> float:
    key = f'cadence_requests_total{{route="/v1/audio/speech",status="{status}"}}'
    return server.metrics().get(key, 0.0)


def test_an_unexpected_error_is_a_counted_logged_500(server):
    before = requests_with(server, 500)
    err = error(post(server, input=API_FAULT_INPUT), 500)
    assert err["type"] == "server_error" and "RuntimeError" in err["message"]
    assert requests_with(server, 500) == before + 1
    assert any(line["status"] == 500 and "injected" in line.get("error", "") for line in server.access_log())


def test_a_client_leaving_mid_upload_is_a_499_without_tracebacks(server):
    before = requests_with(server, 499)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        head = "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: 100000\r\n\r\n".encode() + b'{"input": "' + b"a" * 2000)
    wait_for(lambda: requests_with(server, 499) == before + 1, 120, "the dropped upload to be counted", server)
    assert "ClientDisconnect" not in server.log()
    assert "Exception in ASGI application" not in server.log()


def test_one_failing_request_affects_no_other(server):
    """Through every route at once: the faulty requests fail on their own (a 500 before any audio,
    an error event in a WebSocket session), every other one completes with all of its audio."""
    frames = 12
    good = {**GOOD, "max_new_tokens": frames}

    def http_stream(**fields):
        with server.client() as c, c.stream("POST", "/v1/audio/speech", json={**good, **fields}) as r:
            return r.status_code, r.read()

    def sse():
        with server.client() as c, c.stream("POST", "/v1/audio/speech", json={**good, "stream_format": "sse"}) as r:
            return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]

    def ws_session(seed: int):
        with connect(server.ws_url(), open_timeout=60) as ws:
            ws.send(json.dumps({**WS_CONFIG, "max_new_tokens": frames, "seed": seed}))
            ws.recv(timeout=60)
            ws.send(json.dumps({"type": "input.text", "text": "One sentence. Another one."}))
            ws.send(json.dumps({"type": "session.close"}))
            return receive_until(ws, "session.done")

    results = concurrently(
        lambda: http_stream(seed=1),
        lambda: http_stream(seed=FAULT_SEED),
        lambda: http_stream(seed=FAULT_SEED, stream=False),
        sse,
        lambda: ws_session(2),
        lambda: ws_session(FAULT_SEED),
        lambda: http_stream(seed=3, response_format="wav", stream=False),
    )
    good_raw, bad_raw, bad_whole, events, good_ws, bad_ws, good_wav = results
    assert good_raw[0] == 200 and len(good_raw[1]) == 2 * frames * FRAME
    for status, body in (bad_raw, bad_whole):
        assert status == 500 and json.loads(body)["error"]["type"] == "server_error"
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["finish_reason"] == "length"
    assert good_wav[0] == 200 and len(good_wav[1]) == 44 + 2 * frames * FRAME
    assert good_ws[-1]["usage"] == {**good_ws[-1]["usage"], "segments": 2, "failed": 0}
    done = [m for m in bad_ws if isinstance(m, dict) and m["type"] == "audio.done"]
    errors = [m for m in bad_ws if isinstance(m, dict) and m["type"] == "error"]
    assert [d["finish_reason"] for d in done] == ["error", "error"] and len(errors) == 2
    assert all(e["error"]["type"] == "server_error" and e["request_id"] for e in errors)
    assert bad_ws[-1]["usage"]["failed"] == 2
    wait_for(lambda: server.metrics()["cadence_active_streams"] == 0, 120, "every stream to end", server)


# -- the WebSocket route ------------------------------------------------------------------------------


def receive_until(ws, last_type: str) -> list:
    out = []
    while True:
        msg = ws.recv(timeout=120)
        out.append(json.loads(msg) if isinstance(msg, str) else msg)
        if isinstance(out[-1], dict) and out[-1]["type"] == last_type:
            return out


def test_session_config_integers_out_of_range_are_refused(server):
    with connect(server.ws_url(), open_timeout=60) as ws:
        ws.send(json.dumps({**WS_CONFIG, "max_new_tokens": 2**64}))
        err = json.loads(ws.recv(timeout=60))
        assert err["type"] == "error" and err["error"]["param"] == "max_new_tokens"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=60)
        assert ws.close_code == 1003


def test_a_client_gone_after_session_close_cancels_its_segments(server):
    with connect(server.ws_url(), open_timeout=60) as ws:
        ws.send(json.dumps({**WS_CONFIG, "max_new_tokens": 5000}))  # 400 s of audio each
        ws.recv(timeout=60)
        ws.send(json.dumps({"type": "input.text", "text": "A long one. And another. "}))
        ws.send(json.dumps({"type": "session.close"}))
        assert json.loads(ws.recv(timeout=120))["type"] == "audio.start"
        assert isinstance(ws.recv(timeout=120), bytes)
    wait_for(lambda: server.metrics()["cadence_active_streams"] == 0, 120, "the segments to be cancelled", server)


def test_an_oversized_message_closes_with_1009(server):
    with connect(server.ws_url(), open_timeout=60, max_size=None) as ws:
        ws.send(json.dumps(WS_CONFIG))
        ws.recv(timeout=60)
        with pytest.raises(ConnectionClosed):
            ws.send(json.dumps({"type": "input.text", "text": "a" * 70_000}))
            while True:
                ws.recv(timeout=60)
        assert ws.close_code == 1009


ADVERSARIAL_TEXT = 1_000_000  # characters in all


def test_a_megabyte_of_adversarial_text_never_stalls_the_server(server):
    """Abbreviations without a sentence end, text without any end, and one character per message:
    /health keeps answering throughout, the text past the session's buffer is refused with error
    events, and hanging up cancels what the session started."""
    health_failures: list[str] = []
    stop = threading.Event()

    def poll_health() -> None:
        with httpx.Client(base_url=server.url, timeout=10, trust_env=False) as c:
            while not stop.is_set():
                try:
                    assert c.get("/health").status_code == 200
                except Exception as e:  # a stalled event loop: the request times out
                    health_failures.append(repr(e))
                stop.wait(0.2)

    received: dict[str, int] = {"errors": 0, "buffer_full": 0, "audio": 0}

    def read(ws) -> None:
        try:
            while True:
                msg = ws.recv(timeout=300)
                if isinstance(msg, bytes):
                    received["audio"] += len(msg)
                elif (m := json.loads(msg))["type"] == "error":
                    received["errors"] += 1
                    received["buffer_full"] += m["error"]["param"] == "text"
        except (ConnectionClosed, TimeoutError):
            return

    def send_all(ws) -> None:
        third = ADVERSARIAL_TEXT // 3
        for pattern in ("Dr. e.g. Mr. ", "abcdefghij" * 5 + " "):  # abbreviations; no sentence end
            text = (pattern * (third // len(pattern) + 1))[:third]
            for i in range(0, len(text), 60_000):
                ws.send(json.dumps({"type": "input.text", "text": text[i : i + 60_000]}))
        for ch in ("x." * third)[:third]:  # one character a message
            ws.send(json.dumps({"type": "input.text", "text": ch}))
        ws.send(json.dumps({"type": "input.text", "text": "Still served."}))

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        with connect(server.ws_url(), open_timeout=60) as ws:
            ws.send(json.dumps(WS_CONFIG))
            assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
            reader = threading.Thread(target=read, args=(ws,), daemon=True)
            reader.start()
            # A server that stops reading (its event loop stalled) blocks these sends: a bound on
            # liveness, far above what the work takes.
            sender = threading.Thread(target=send_all, args=(ws,), daemon=True)
            sender.start()
            sender.join(900)
            assert not sender.is_alive(), "the server stopped reading the session's messages"
            wait_for(lambda: received["buffer_full"] > 0, 300, "the session's buffer limit to be reported")
        reader.join(300)
    finally:
        stop.set()
        poller.join(60)
    assert not health_failures, health_failures[:3]
    assert received["audio"] > 0
    wait_for(lambda: server.metrics()["cadence_active_streams"] == 0, 300, "the session to be cancelled", server)
    assert post(server).status_code == 200


def test_the_first_audios_path_is_logged_and_measured(server):
    r = post(server, seed=11)
    assert r.status_code == 200
    rid = r.headers["x-request-id"]
    line = next(line for line in server.access_log() if line["id"] == rid)
    path = line["first_audio_ms"]
    assert list(path) == ["api", "to_engine", "queue", "prefill", "codec", "to_api"]
    assert all(ms >= 0 for ms in path.values()) and sum(path.values()) <= line["ttfa_ms"] + 0.1
    metrics = server.metrics()
    assert all(metrics[f'cadence_first_audio_stage_seconds_count{{stage="{s}"}}'] >= 1 for s in path)


def test_a_failing_piece_ends_a_long_input_with_an_error(server):
    """The second piece of a long input fails (its seed is the request's plus one): the first piece's
    audio has been sent, then the stream ends with an error event, and nothing is silently dropped."""
    text = " ".join(["A sentence of a long text that runs on."] * 30)  # past the default 600 characters
    body = {**GOOD, "input": text, "seed": FAULT_SEED - 1, "stream_format": "sse", "max_new_tokens": 2}
    with server.client() as c, c.stream("POST", "/v1/audio/speech", json=body) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    types = [e["type"] for e in events]
    assert types[-1] == "error" and events[-1]["error"]["type"] == "server_error" and events[-1]["piece"] == 1
    assert [e["index"] for e in events if e["type"] == "speech.piece.done"] == [0]
    assert events[types.index("speech.piece.done")]["finish_reason"] == "length"
    assert any(e["type"] == "speech.audio.delta" and e["piece"] == 0 for e in events)
    assert "speech.audio.done" not in types
