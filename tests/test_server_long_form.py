"""Long-form input through a real server: a text of many paragraphs and languages is spoken as pieces,
in order, as one stream in every format, with exactly the configured pause at each join."""

from __future__ import annotations

import base64
import io
import json
import wave

import numpy as np
import pytest
from serving import FRAME, SAMPLE_RATE, Server, pcm_samples

PIECE_CHARS = 120
PAUSE_S = 0.1
PAUSE = round(PAUSE_S * SAMPLE_RATE)
FRAMES = 3  # a piece
TEXT = "\n\n".join(
    [
        "The first paragraph is English. It has several sentences, each of them short. Some are questions? "
        "Others exclaim! And one of them goes on for a while, with commas, clauses and more words than the rest.",
        "今天天气很好。我们去公园散步吧！公园里有很多花，还有一个小湖。湖边的树下可以休息。",
        "Le troisième paragraphe est en français. Il parle de tout et de rien, comme il se doit.",
        "Short one.",
    ]
    * 3
)
BODY = {"input": TEXT, "voice": "ryan", "response_format": "pcm", "max_new_tokens": FRAMES, "ignore_eos": True}
BODY["seed"] = 5


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    args = ["--long-form-chars", str(PIECE_CHARS), "--long-form-pause", str(PAUSE_S)]
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("serve-long"), *args)
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def sse(server: Server, **fields) -> list[dict]:
    with (
        server.client() as c,
        c.stream("POST", "/v1/audio/speech", json={**BODY, "stream_format": "sse", **fields}) as r,
    ):
        assert r.status_code == 200
        return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]


def test_every_piece_in_order_with_its_pause(server):
    events = sse(server)
    pieces = [e for e in events if e["type"] == "speech.piece.done"]
    n = len(pieces)
    assert n > 10 and [p["index"] for p in pieces] == list(range(n))
    assert all(p["frames"] == FRAMES and p["finish_reason"] == "length" for p in pieces)
    assert all(len(p["text"]) <= PIECE_CHARS for p in pieces)
    # every character of the input, in order (pieces drop only the whitespace between them)
    assert "".join("".join(p["text"] for p in pieces).split()) == "".join(TEXT.split())
    done = events[-1]
    assert done["type"] == "speech.audio.done" and done["pieces"] == n and done["finish_reason"] == "length"
    assert done["usage"]["output_tokens"] == n * FRAMES
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert [d["piece"] for d in deltas] == sorted(d["piece"] for d in deltas)  # pieces never interleave
    pcm = pcm_samples(b"".join(base64.b64decode(d["audio"]) for d in deltas))
    piece_samples = FRAMES * FRAME
    assert pcm.size == n * piece_samples + (n - 1) * PAUSE
    for i in range(n - 1):  # each join: the configured pause, no more and no less
        start = (i + 1) * piece_samples + i * PAUSE
        assert not pcm[start : start + PAUSE].any()
        assert pcm[start + PAUSE : start + PAUSE + piece_samples].any()


def test_one_file_in_every_format(server):
    with server.client() as c:
        raw = c.post("/v1/audio/speech", json=BODY)
        whole = c.post("/v1/audio/speech", json={**BODY, "response_format": "wav", "stream": False})
    assert raw.status_code == whole.status_code == 200
    n = int(whole.headers["x-usage-output-tokens"]) // FRAMES
    with wave.open(io.BytesIO(whole.content)) as w:
        frames = w.readframes(w.getnframes())
    assert np.array_equal(pcm_samples(frames), pcm_samples(raw.content))  # seeded: the same audio
    assert pcm_samples(raw.content).size == n * FRAMES * FRAME + (n - 1) * PAUSE


def test_a_short_input_is_one_piece(server):
    events = sse(server, input="Just one sentence.")
    assert not [e for e in events if e["type"] == "speech.piece.done"] and "pieces" not in events[-1]
    assert all("piece" not in e for e in events)
