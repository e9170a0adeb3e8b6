"""A server's life: per-request timeouts, draining on SIGTERM, and the engine process dying."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading

import httpx
import pytest
from serving import FRAME, Server, pcm_samples, wait_for

TIMEOUT_S = 6
# 400 s of audio: longer than any test waits, so only a timeout, a disconnect or a death ends it.
# Seeded, so that every run samples the same codes.
ENDLESS = {"input": "On and on.", "voice": "ryan", "response_format": "pcm", "max_new_tokens": 5000, "ignore_eos": True,
           "seed": 1}  # fmt: skip


def sse_events(response: httpx.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("serve-life"), "--request-timeout", str(TIMEOUT_S))
    try:
        yield s.wait_ready()
    finally:
        if s.proc.poll() is None:
            s.stop()


def test_timeout_ends_an_sse_stream_with_an_error_event(server):
    with server.client() as c, c.stream("POST", "/v1/audio/speech", json={**ENDLESS, "stream_format": "sse"}) as r:
        assert r.status_code == 200
        events = sse_events(r)
    *deltas, last = events
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas)
    assert last["type"] == "error" and last["error"]["code"] == "timeout"
    assert set(last["error"]) == {"message", "type", "param", "code"}
    wait_for(lambda: server.metrics()["cadence_active_streams"] == 0, 120, "the timed-out stream to be freed", server)


def test_timeout_cuts_a_raw_stream(server):
    received = 0
    with pytest.raises(httpx.RemoteProtocolError):  # no terminating chunk: the client knows it is incomplete
        with server.client() as c, c.stream("POST", "/v1/audio/speech", json=ENDLESS) as r:
            assert r.status_code == 200
            for piece in r.iter_bytes():
                received += len(piece)
    assert 0 < received < 2 * FRAME * ENDLESS["max_new_tokens"]
    wait_for(lambda: server.metrics()["cadence_active_streams"] == 0, 120, "the timed-out stream to be freed", server)
    assert "timeout" in server.log() and "failed after streaming started" in server.log()


def test_sigterm_drains_open_streams_then_exits_zero(server):
    """Run last in this module: it ends the server."""
    frames = 40
    body = {**ENDLESS, "max_new_tokens": frames}
    started = threading.Event()
    result: dict = {}

    def stream() -> None:
        try:
            with server.client() as c, c.stream("POST", "/v1/audio/speech", json=body) as r:
                data = b""
                for piece in r.iter_bytes():
                    data += piece
                    started.set()
                result["status"], result["data"] = r.status_code, data
        except Exception as e:  # reported by the assertions below
            result["error"] = e
        finally:
            started.set()

    engine = server.engine_pid()
    thread = threading.Thread(target=stream)
    thread.start()
    assert started.wait(120), server.log()[-3000:]
    server.proc.send_signal(signal.SIGTERM)
    # New connections are refused (or answered 503) while the open stream finishes.
    wait_for(lambda: _refused(server.url + "/ready"), 60, "the server to stop accepting", server)
    thread.join(120)
    assert "error" not in result, result.get("error")
    assert result["status"] == 200
    assert pcm_samples(result["data"]).size == frames * FRAME  # the whole stream, not cut by the drain
    assert server.proc.wait(120) == 0, server.log()[-3000:]
    assert not os.path.exists(f"/proc/{engine}/status") or _zombie(engine)  # the engine process is gone too
    assert "draining: 1 requests in flight" in server.log()


def _refused(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5, trust_env=False).status_code == 503
    except httpx.TransportError:
        return True


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:") and "Z" in line for line in f)
    except OSError:
        return True


def test_engine_death_answers_503_and_exits_nonzero(tiny_checkpoint, tmp_path):
    s = Server(tiny_checkpoint, tmp_path).wait_ready()
    try:
        results: dict[str, object] = {}

        def whole_file() -> None:  # waits for the complete utterance: no response has started
            with s.client() as c:
                results["whole"] = c.post("/v1/audio/speech", json={**ENDLESS, "stream": False})

        waiting = threading.Thread(target=whole_file)
        waiting.start()
        wait_for(lambda: s.metrics()["cadence_active_streams"] == 1, 120, "the request to run", s)
        with s.client() as c, c.stream("POST", "/v1/audio/speech", json={**ENDLESS, "stream_format": "sse"}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["type"] == "speech.audio.delta"
            os.kill(s.engine_pid(), signal.SIGKILL)
            rest = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
        waiting.join(120)
        whole = results["whole"]
        assert isinstance(whole, httpx.Response)
        assert whole.status_code == 503 and whole.json()["error"]["code"] == "engine_dead"
        assert rest[-1]["type"] == "error" and rest[-1]["error"]["code"] == "engine_dead"
        assert s.proc.wait(120) != 0  # the API process exits instead of hanging
        assert "engine process exited (killed by SIGKILL)" in s.log() and "code None" not in s.log()
    finally:
        if s.proc.poll() is None:
            s.stop(signal.SIGKILL)


def test_the_drain_timeout_cuts_open_streams_with_an_error_of_their_own(tiny_checkpoint, tmp_path):
    """Streams still open when --drain-timeout runs out end as a shutdown, not as a client that left:
    an SSE stream with a `draining` error event, a raw stream cut off; both logged with 503."""
    s = Server(tiny_checkpoint, tmp_path, "--drain-timeout", "3").wait_ready()
    results: dict = {}

    def sse() -> None:
        with s.client() as c, c.stream("POST", "/v1/audio/speech", json={**ENDLESS, "stream_format": "sse"}) as r:
            results["sse"] = sse_events(r)

    def raw() -> None:
        try:
            with s.client() as c, c.stream("POST", "/v1/audio/speech", json=ENDLESS) as r:
                results["raw"] = sum(len(p) for p in r.iter_bytes())
        except httpx.RemoteProtocolError as e:  # no terminating chunk
            results["raw"] = e

    threads = [threading.Thread(target=sse), threading.Thread(target=raw)]
    for t in threads:
        t.start()
    wait_for(lambda: s.metrics()["cadence_active_streams"] == 2, 120, "both streams to run", s)
    s.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(120)
    assert s.proc.wait(120) == 0, s.log()[-3000:]
    last = results["sse"][-1]
    assert last["type"] == "error" and last["error"]["code"] == "draining", last
    assert isinstance(results["raw"], httpx.RemoteProtocolError)
    statuses = [line["status"] for line in s.access_log() if line["route"] == "/v1/audio/speech"]
    assert statuses == [503, 503], s.log()[-3000:]


def test_dummy_weights_serve_without_any_checkpoint_files(tmp_path, skeleton_06b):
    """The README's first command: no model argument and no network. The released 0.6B's config and
    tokenizer files ship with cadence, so the hub is never asked (any request to this unreachable
    endpoint would fail and be logged) and the tokenizer is the real one."""
    from cadence.models.qwen3_tts.frontend import Qwen3TTSFrontend

    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}  # an empty cache: nothing to find
    args = ["--dummy-weights", "--dummy-preset", "tiny", "--voice-map", "narrator=uncle_fu,alloy=aiden"]
    s = Server(None, tmp_path, *args, env=env).wait_ready()
    try:
        with s.client() as c:
            version = c.get("/version").json()
            assert version["random_weights"] is True
            # no --max-streams: the engine sizes itself (at most 256) and says how many in the log
            assert 1 <= version["max_streams"] <= 256
            assert f"max_streams {version['max_streams']}: what the KV cache holds" in s.log()
            voices = {v["id"]: v["aliases"] for v in c.get("/v1/audio/voices").json()["voices"]}
            assert "narrator" in voices["uncle_fu"] and "alloy" in voices["aiden"] and "alloy" not in voices["ryan"]
            r = c.post("/v1/audio/speech", json={**ENDLESS, "voice": "narrator", "max_new_tokens": 4})
            assert r.status_code == 200 and pcm_samples(r.content).size == 4 * FRAME
        real = Qwen3TTSFrontend.from_pretrained(skeleton_06b).prompt(ENDLESS["input"], "uncle_fu", "auto")
        assert r.headers["x-usage-input-tokens"] == str(real.num_text_tokens)  # BPE, not one token a byte
        log = s.log()
        assert "RANDOM WEIGHTS" in log and "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice (config files shipped" in log
        assert "tiny preset of the 0.6B architecture, RANDOM weights" in log  # the banner
        assert "no config files" not in log and "127.0.0.1:9" not in log
    finally:
        assert s.stop() == 0


def test_bad_voice_map_is_refused_before_serving(tiny_checkpoint, tmp_path):
    s = Server(tiny_checkpoint, tmp_path, "--voice-map", "alloy=darth_vader")
    assert s.proc.wait(120) == 2
    assert "unknown presets {'alloy': 'darth_vader'}" in s.log()


def test_engine_that_cannot_load_makes_the_server_exit_nonzero(tiny_checkpoint, tmp_path):
    broken = tmp_path / "no-weights"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "model.safetensors").unlink()  # config and tokenizer load in the API process; the weights do not
    s = Server(broken, tmp_path)
    answers: list[httpx.Response] = []

    def answered_or_exited() -> bool:
        if s.proc.poll() is not None:
            return True
        try:
            answers.append(httpx.post(s.url + "/v1/audio/speech", json=ENDLESS, timeout=10, trust_env=False))
            return True
        except httpx.TransportError:
            return False

    # The port opens seconds before the engine process has even tried to load: meanwhile, 503.
    wait_for(answered_or_exited, 300, "an answer or an exit", s)
    for r in answers:
        assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"
    assert s.proc.wait(300) == 1
    assert "the engine failed to start" in s.log()
