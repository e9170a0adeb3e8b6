"""WS /v1/audio/speech/stream with the `websockets` client, and the sentence segmenter it uses."""

from __future__ import annotations

import json
import random
import re

import pytest
from serving import FRAME, Server, wait_for
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from cadence.server import segmenter
from cadence.server.segmenter import SentenceSegmenter

FRAMES = 3
CONFIG = {"type": "session.config", "voice": "Ryan", "language": "english", "max_new_tokens": FRAMES}
CONFIG["ignore_eos"] = True


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("serve-ws"))
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def ws_url(server: Server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"


def receive_until(ws, last_type: str) -> list:
    """Messages (dicts for JSON, bytes for audio) up to and including the first of `last_type`."""
    out = []
    while True:
        msg = ws.recv(timeout=120)
        out.append(json.loads(msg) if isinstance(msg, str) else msg)
        if isinstance(out[-1], dict) and out[-1]["type"] == last_type:
            return out


def segments(messages: list) -> list[dict]:
    """Group a message list into segments: start event, audio bytes, done event."""
    out, current = [], None
    for m in messages:
        if isinstance(m, bytes):
            current["audio"] += m
        elif m["type"] == "audio.start":
            current = {"start": m, "audio": b""}
        elif m["type"] == "audio.done":
            current["done"] = m
            out.append(current)
    return out


def test_llm_style_session(server):
    with connect(ws_url(server), open_timeout=60) as ws:
        ws.send(json.dumps(CONFIG))
        created = json.loads(ws.recv(timeout=60))
        assert created["type"] == "session.created" and created["sample_rate"] == 24000 and created["format"] == "pcm"
        for delta in ["Hello wor", "ld. How are", " you today? I am", " fine, thanks"]:
            ws.send(json.dumps({"type": "input.text", "text": delta}))
        ws.send(json.dumps({"type": "input.done"}))  # flush "I am fine, thanks" and keep the session
        ws.send(json.dumps({"type": "input.text", "text": "你好。第二句话！"}))
        ws.send(json.dumps({"type": "session.close"}))
        messages = receive_until(ws, "session.done")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=60)
        assert ws.close_code == 1000
    segs = segments(messages)
    assert [s["start"]["text"] for s in segs] == [
        "Hello world.",
        "How are you today?",
        "I am fine, thanks",
        "你好。",
        "第二句话！",
    ]
    assert [(s["start"]["utterance_index"], s["start"]["sentence_index"]) for s in segs] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
    ]
    for s in segs:
        assert s["done"]["request_id"] == s["start"]["request_id"]
        assert s["done"]["finish_reason"] == "length"
        assert s["done"]["usage"]["output_tokens"] == FRAMES
        assert len(s["audio"]) == 2 * FRAMES * FRAME  # every sample, in its own segment
    assert len({s["start"]["request_id"] for s in segs}) == len(segs)
    done = messages[-1]
    assert done["usage"]["segments"] == 5 and done["usage"]["failed"] == 0
    assert done["usage"]["audio_seconds"] == pytest.approx(5 * FRAMES * 0.08)


def test_temperature_zero_in_the_session_config_is_greedy(server):
    """`temperature: 0` in session.config decodes greedily, as over HTTP: the same sentence gives the
    same samples whatever the seed, equal to POST /v1/audio/speech's."""
    greedy = {"type": "session.config", "voice": "ryan", "language": "english", "temperature": 0}
    greedy["max_new_tokens"] = 12

    def spoken(seed: int, **extra) -> bytes:
        with connect(ws_url(server), open_timeout=60) as ws:
            ws.send(json.dumps({**greedy, "seed": seed, **extra}))
            assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
            ws.send(json.dumps({"type": "input.text", "text": "Greedy words."}))
            ws.send(json.dumps({"type": "session.close"}))
            (seg,) = segments(receive_until(ws, "session.done"))
        return seg["audio"]

    first = spoken(1)
    assert first and spoken(2) == first
    assert spoken(3, subtalker_dosample=True, subtalker_temperature=0.9) != first
    body = {"input": "Greedy words.", "voice": "ryan", "language": "english", "response_format": "pcm"}
    with server.client() as c:
        r = c.post("/v1/audio/speech", json={**body, "temperature": 0, "max_new_tokens": 12, "seed": 4})
    assert r.status_code == 200 and r.content == first


def test_bad_messages_are_errors_and_the_session_goes_on(server):
    with connect(ws_url(server), open_timeout=60) as ws:
        ws.send(json.dumps(CONFIG))
        assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
        ws.send("this is not json")
        assert json.loads(ws.recv(timeout=60))["type"] == "error"
        ws.send(json.dumps({"type": "input.dance"}))
        err = json.loads(ws.recv(timeout=60))
        assert err["type"] == "error" and err["error"]["param"] == "type"
        ws.send(json.dumps({"type": "input.text", "text": "Still here."}))
        ws.send(json.dumps({"type": "session.close"}))
        segs = segments(receive_until(ws, "session.done"))
        assert [s["start"]["text"] for s in segs] == ["Still here."]


@pytest.mark.parametrize(
    ("config", "param"),
    [
        ({"type": "input.text", "text": "hi"}, "type"),  # config must come first
        ({**CONFIG, "voice": "darth"}, "voice"),
        ({**CONFIG, "response_format": "mp3"}, "response_format"),
        ({**CONFIG, "speed": 9}, "speed"),
        ({**CONFIG, "temperature": -1}, "temperature"),
        ({**CONFIG, "subtalker_top_k": -2}, "subtalker_top_k"),
    ],
)
def test_bad_session_config_is_refused(server, config, param):
    with connect(ws_url(server), open_timeout=60) as ws:
        ws.send(json.dumps(config))
        err = json.loads(ws.recv(timeout=60))
        assert err["type"] == "error" and err["error"]["param"] == param
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=60)


def test_disconnect_mid_session_frees_the_engine(server):
    with connect(ws_url(server), open_timeout=60) as ws:
        ws.send(json.dumps({**CONFIG, "max_new_tokens": 3000}))
        ws.recv(timeout=60)
        ws.send(json.dumps({"type": "input.text", "text": "A long sentence. And another one. "}))
        assert json.loads(ws.recv(timeout=120))["type"] == "audio.start"
        assert isinstance(ws.recv(timeout=120), bytes)  # audio is flowing; now hang up
    wait_for(lambda: server.metrics()["cadence_active_streams"] == 0, 120, "the session's streams to be cancelled")


# -- the segmenter ---------------------------------------------------------------------------------


def feed(deltas: list[str], max_chars: int = 400) -> list[str]:
    seg = SentenceSegmenter(max_chars)
    out = [s for d in deltas for s in seg.push(d)]
    if (rest := seg.flush()) is not None:
        out.append(rest)
    return out


def test_segmenter_waits_for_what_follows_a_period():
    seg = SentenceSegmenter()
    assert seg.push("Pi is 3.") == []  # "3." + "14" is not a sentence end
    assert seg.push("14 or so. Next") == ["Pi is 3.14 or so."]
    assert seg.flush() == "Next"


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        (["One. Two! Three? Four"], ["One.", "Two!", "Three?", "Four"]),
        (['He said "stop." Then left.'], ['He said "stop."', "Then left."]),
        (["Dr. Smith arrived. e.g. this"], ["Dr. Smith arrived.", "e.g. this"]),
        (["Wait... what?! Yes."], ["Wait...", "what?!", "Yes."]),
        (["第一句。第二句！第三"], ["第一句。", "第二句！", "第三"]),
        (["line one\nline two\n\n"], ["line one", "line two"]),
        (["", "  ", "\n"], []),
        (["".join(ch for ch in "abc, " * 30)], None),  # forced cuts: checked below
    ],
)
def test_segmenter_sentences(deltas, expected):
    got = feed(deltas, max_chars=40)
    if expected is not None:
        assert got == expected
    else:
        assert all(len(s) <= 40 for s in got) and " ".join(got) == "".join(deltas).strip()
        assert all(s.endswith(",") for s in got[:-1])  # cut at clause marks


def test_segmenter_never_exceeds_its_limit_even_when_a_sentence_ends_later():
    text = "word " * 30 + "end. Short one."
    got = feed([text], max_chars=40)
    assert all(len(s) <= 40 for s in got)
    assert " ".join(got) == text.strip() and got[-1] == "Short one."


class RescanningSegmenter:
    """The definition the segmenter must match: rescan the whole buffer for the first sentence end
    after every delta (quadratic, and so no longer served)."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self.buffer = ""

    def push(self, text: str) -> list[str]:
        self.buffer += text
        out = []
        while True:
            end = self._sentence_end()
            if (end is None or end > self.max_chars) and len(self.buffer) > self.max_chars:
                end = self._forced_cut()
            if end is None:
                return out
            sentence, self.buffer = self.buffer[:end].strip(), self.buffer[end:]
            if sentence:
                out.append(sentence)

    def flush(self) -> str | None:
        rest, self.buffer = self.buffer.strip(), ""
        return rest or None

    def _sentence_end(self) -> int | None:
        buf = self.buffer
        for i, ch in enumerate(buf):
            if ch == "\n" and buf[:i].strip():
                return i + 1
            if ch in segmenter.CJK_ENDS:
                return self._after_closers(i + 1)
            if ch in segmenter.LATIN_ENDS:
                j = self._after_closers(i + 1)
                if j >= len(buf):
                    return None
                words = buf[:i].split()
                abbreviation = ch == "." and bool(words) and words[-1].lower().lstrip("(\"'") in segmenter.ABBREVIATIONS
                if buf[j].isspace() and not abbreviation:
                    return j
        return None

    def _after_closers(self, j: int) -> int:
        while j < len(self.buffer) and (self.buffer[j] in segmenter.CLOSERS or self.buffer[j] in segmenter.LATIN_ENDS):
            j += 1
        return j

    def _forced_cut(self) -> int:
        window = self.buffer[: self.max_chars]
        for marks in (segmenter.CLAUSE_MARKS, " \t"):
            cut = max(window.rfind(m) for m in marks)
            if cut > self.max_chars // 4:
                return cut + 1
        return self.max_chars


PIECES = ["Dr", "e.g", "etc", "word", "x", "3", "14", "(Dr", '"', "'", ")", "」", ".", ".", "..", "!", "?", "…"]
PIECES += ["。", "！", "，", ",", " ", " ", " ", "\n", "\t", "ab cd", "你好"]


def test_segmenter_equals_the_rescanning_definition():
    """Random texts, split at random places (or a character at a time), at several limits. (Text
    with whitespace right before a '.' is left out: the definition looks past it for the word an
    abbreviation would be, the segmenter does not.)"""
    checked = 0
    for trial in range(4000):
        rng = random.Random(trial)
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 80)))
        if re.search(r"\s[.]", text):
            continue
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 8))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        deltas = list(text) if rng.random() < 0.2 else pieces
        limit = rng.choice([8, 12, 20, 40, 400])
        got = feed(deltas, limit)
        reference = RescanningSegmenter(limit)
        want = [s for d in deltas for s in reference.push(d)]
        if (rest := reference.flush()) is not None:
            want.append(rest)
        assert got == want, (deltas, limit)
        checked += 1
    assert checked > 2000
