"""The continuous WebSocket input through a real server and the `websockets` client: one utterance
spoken while its text is still being written. However the text is split and paced, the audio is
the same (the engine-level parity with the one-shot request is tests/test_continuous_input.py);
the session's events, its input timeout and its refusals."""

from __future__ import annotations

import json
import random
import time

import numpy as np
import pytest
from serving import Server, wait_for
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

TEXT = "Speech that starts while the words are still being written, and keeps going."
CONFIG = {"type": "session.config", "voice": "ryan", "language": "english", "seed": 7, "max_new_tokens": 30}
CONFIG["input_mode"] = "continuous"
TIMEOUT_S = 2


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("serve-continuous"), "--ws-input-timeout", str(TIMEOUT_S))
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def speak(server: Server, deltas: list[str], pause: float = 0.0, config: dict | None = None) -> list:
    """A continuous session: the deltas (each after `pause` s), input.done, session.close; every
    message the server sent (dicts for JSON, bytes for audio)."""
    with connect(server.ws_url(), open_timeout=60) as ws:
        ws.send(json.dumps(config or CONFIG))
        created = json.loads(ws.recv(timeout=60))
        assert created["type"] == "session.created" and created["input_mode"] == "continuous"
        for delta in deltas:
            ws.send(json.dumps({"type": "input.text", "text": delta}))
            time.sleep(pause)
        ws.send(json.dumps({"type": "input.done"}))
        ws.send(json.dumps({"type": "session.close"}))
        out = []
        while not (out and isinstance(out[-1], dict) and out[-1]["type"] == "session.done"):
            msg = ws.recv(timeout=120)
            out.append(json.loads(msg) if isinstance(msg, str) else msg)
    return out


def audio(messages: list) -> np.ndarray:
    return np.frombuffer(b"".join(m for m in messages if isinstance(m, bytes)), dtype="<i2").astype(np.int32)


def test_one_utterance_whatever_the_pacing(server):
    whole = speak(server, [TEXT])
    reference = audio(whole)
    assert reference.size == 30 * 1920
    starts = [m for m in whole if isinstance(m, dict) and m["type"] == "audio.start"]
    done = [m for m in whole if isinstance(m, dict) and m["type"] == "audio.done"]
    assert len(starts) == len(done) == 1  # one utterance, not one segment a sentence
    assert done[0]["text"] == TEXT and done[0]["finish_reason"] == "length"
    rng = random.Random(3)
    words = [w + " " for w in TEXT.split(" ")[:-1]] + [TEXT.split(" ")[-1]]
    cuts = sorted(rng.sample(range(1, len(TEXT)), 10))
    pieces = [TEXT[a:b] for a, b in zip([0, *cuts], [*cuts, len(TEXT)], strict=True)]
    for deltas, pause in ((words, 0.05), (list(TEXT), 0.0), (pieces, 0.15)):
        got = audio(speak(server, deltas, pause))
        assert got.shape == reference.shape and np.abs(got - reference).max() <= 1, deltas[:3]


def test_utterances_follow_each_other(server):
    with connect(server.ws_url(), open_timeout=60) as ws:
        ws.send(json.dumps({**CONFIG, "max_new_tokens": 6}))
        ws.recv(timeout=60)
        for text in ("First one, in", " two pieces.", None, "Second one.", None):
            ws.send(json.dumps({"type": "input.done"} if text is None else {"type": "input.text", "text": text}))
        ws.send(json.dumps({"type": "session.close"}))
        messages = []
        while not (messages and messages[-1].get("type") == "session.done"):
            msg = ws.recv(timeout=120)
            if isinstance(msg, str):
                messages.append(json.loads(msg))
    done = [m for m in messages if m["type"] == "audio.done"]
    assert [(d["utterance_index"], d["text"]) for d in done] == [(0, "First one, in two pieces."), (1, "Second one.")]
    assert messages[-1]["usage"]["segments"] == 2 and messages[-1]["usage"]["failed"] == 0


def test_text_that_stops_coming_ends_the_utterance(server):
    with connect(server.ws_url(), open_timeout=60) as ws:
        ws.send(json.dumps({**CONFIG, "max_new_tokens": 200}))
        ws.recv(timeout=60)
        ws.send(json.dumps({"type": "input.text", "text": "The writer stops here and never"}))
        messages = []
        while not (messages and isinstance(messages[-1], dict) and messages[-1].get("type") == "audio.done"):
            msg = ws.recv(timeout=120)
            messages.append(json.loads(msg) if isinstance(msg, str) else msg)
    errors = [m for m in messages if isinstance(m, dict) and m["type"] == "error"]
    assert [e["error"]["code"] for e in errors] == ["input_timeout"] and errors[0]["utterance_index"] == 0
    assert messages[-1]["text"] == "The writer stops here and never"
    assert messages[-1]["finish_reason"] in ("stop", "length", "runaway")
    wait_for(lambda: server.metrics()["cadence_active_streams"] == 0, 120, "the utterance's slot to be freed", server)


def test_unknown_input_mode_is_refused(server):
    with connect(server.ws_url(), open_timeout=60) as ws:
        ws.send(json.dumps({**CONFIG, "input_mode": "telepathic"}))
        err = json.loads(ws.recv(timeout=60))
        assert err["type"] == "error" and err["error"]["param"] == "input_mode"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=60)
