"""Data-parallel replicas: two engine processes behind one `cadence serve`, on the CPU.

Requests spread over both; killing one replica's process fails only the streams it held, new work
goes to the other while it restarts, and it comes back and serves again.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import threading

import httpx
import openai
import pytest
from serving import FRAME, Server, pcm_samples, wait_for

SHORT = {"voice": "ryan", "response_format": "pcm", "ignore_eos": True}
ENDLESS = {"input": "On and on.", **SHORT, "max_new_tokens": 5000, "stream_format": "sse"}


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("replicas"), "--replicas", "2", "--cpu-threads", "1")
    try:
        yield s.wait_ready()
    finally:
        if s.proc.poll() is None:
            assert s.stop() == 0, s.log()[-3000:]


def replicas(server: Server) -> list[dict]:
    return httpx.get(server.url + "/replicas", timeout=30, trust_env=False).json()["replicas"]


def speak(server: Server, frames: int) -> bytes:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="ryan",
        input="Spread the load.",
        response_format="pcm",
        extra_body={"max_new_tokens": frames, "ignore_eos": True},
    ) as response:
        return response.read()


def test_requests_spread_over_both_replicas(server):
    described = [(r["index"], r["state"], r["device"]) for r in replicas(server)]
    assert described == [(0, "ready", "cpu"), (1, "ready", "cpu")]
    assert "2 replicas on cpu, cpu" in server.log()
    before = [r["requests"] for r in replicas(server)]
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(speak(server, 6))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert [pcm_samples(r).size for r in results] == [6 * FRAME] * 4
    routed = [r["requests"] - b for r, b in zip(replicas(server), before, strict=True)]
    assert sum(routed) == 4 and min(routed) >= 1, routed
    metrics = server.metrics()
    assert metrics['cadence_replica_up{replica="0"}'] == metrics['cadence_replica_up{replica="1"}'] == 1


class SSEStream:
    """An SSE speech stream read on its own thread: events as they come, then how it ended."""

    def __init__(self, server: Server, body: dict):
        self.events: list[dict] = []
        self.first = threading.Event()
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._read, args=(server, body))
        self.thread.start()

    def _read(self, server: Server, body: dict) -> None:
        try:
            with server.client() as c, c.stream("POST", "/v1/audio/speech", json=body) as r:
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(json.loads(line[6:]))
                        self.first.set()
        except Exception as e:  # reported by the test
            self.error = e
        finally:
            self.first.set()

    def join(self) -> list[dict]:
        self.thread.join(300)
        assert not self.thread.is_alive() and self.error is None, self.error
        return self.events

    def samples(self) -> int:
        audio = b"".join(base64.b64decode(e["audio"]) for e in self.events if e["type"] == "speech.audio.delta")
        return pcm_samples(audio).size


def test_a_dead_replica_fails_only_its_streams_and_comes_back(server):
    doomed = SSEStream(server, ENDLESS)
    assert doomed.first.wait(120), server.log()[-3000:]
    (victim,) = [r for r in replicas(server) if r["outstanding"] == 1]
    frames = 60
    survivor = SSEStream(server, {**ENDLESS, "max_new_tokens": frames})  # least outstanding: the other replica
    assert survivor.first.wait(120), server.log()[-3000:]
    assert [r["outstanding"] for r in replicas(server)] == [1, 1]

    os.kill(victim["pid"], signal.SIGKILL)
    events = doomed.join()
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "engine_dead"
    assert f"engine replica {victim['index']} failed" in events[-1]["error"]["message"]
    # The server still serves: new work goes to the live replica while the other restarts.
    assert httpx.get(server.url + "/ready", timeout=30, trust_env=False).status_code == 200
    assert pcm_samples(speak(server, 4)).size == 4 * FRAME

    events = survivor.join()
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["finish_reason"] == "length"
    assert survivor.samples() == frames * FRAME  # the other replica's stream was not touched

    def back() -> bool:
        r = replicas(server)[victim["index"]]
        return r["state"] == "ready" and r["restarts"] == 1

    wait_for(back, 300, "the killed replica to come back", server)
    restarted = replicas(server)[victim["index"]]
    assert restarted["pid"] != victim["pid"]
    assert server.metrics()[f'cadence_replica_restarts_total{{replica="{victim["index"]}"}}'] == 1
    before = restarted["requests"]
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(speak(server, 4))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert [pcm_samples(r).size for r in results] == [4 * FRAME] * 2
    assert replicas(server)[victim["index"]]["requests"] > before  # it serves again
    assert "died; its open streams failed; restarting it" in server.log()
