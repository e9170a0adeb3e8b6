"""The request client: payloads, PCM/WAV decoding, SSE parsing and outcome classes (httpx mock transport)."""

from __future__ import annotations

import asyncio
import base64
import json
import struct

import httpx
import numpy as np
import pytest

from cadence.bench.client import PcmDecoder, ProtocolError, ServerConfig, send_request
from cadence.bench.metrics import AudibleRule
from cadence.bench.workload import PlannedRequest, Utterance

SR = 24000
FRAME = 1920


def planned(text="hello there", language="en", frames=None) -> PlannedRequest:
    return PlannedRequest(0, Utterance("u0", text, language), frames)


def wav_header(sample_rate=SR, channels=1, bits=16, extra_chunk=b"") -> bytes:
    fmt = struct.pack(
        "<HHIIHH", 1, channels, sample_rate, sample_rate * channels * bits // 8, channels * bits // 8, bits
    )
    riff = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + extra_chunk + b"data" + struct.pack("<I", 0xFFFFFFFF)
    return b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + riff


def frames_pcm(n: int, silent_first: bool = True) -> list[bytes]:
    t = np.arange(FRAME) / SR
    loud = np.round(8000 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes()
    return [(bytes(2 * FRAME) if i == 0 and silent_first else loud) for i in range(n)]


# --- payloads ---------------------------------------------------------------------------------------


def test_payload_carries_openai_fields_and_forced_length():
    server = ServerConfig(voice="vivian", response_format="wav", stream_format="sse")
    body = server.payload(planned(frames=6))
    assert body["input"] == "hello there" and body["voice"] == "vivian"
    assert body["response_format"] == "wav" and body["stream_format"] == "sse"
    assert body["language"] == "English"
    assert body["max_new_tokens"] == 6 and body["ignore_eos"] is True
    assert "max_new_tokens" not in server.payload(planned())


def test_payload_language_modes_and_extra_fields():
    assert ServerConfig(language="data").payload(planned(language=None))["language"] == "Auto"
    assert "language" not in ServerConfig(language="none").payload(planned())
    assert ServerConfig(language="Chinese").payload(planned())["language"] == "Chinese"
    extra = ServerConfig(extra_fields={"seed": 3, "voice": "ryan"}).payload(planned())
    assert extra["seed"] == 3 and extra["voice"] == "ryan"  # extra fields win


def test_server_config_rejects_unmeasurable_formats_and_builds_headers():
    with pytest.raises(ValueError, match="pcm or wav"):
        ServerConfig(response_format="mp3")
    with pytest.raises(ValueError, match="audio or sse"):
        ServerConfig(stream_format="websocket")
    assert ServerConfig(api_key="k").headers() == {"Authorization": "Bearer k"}
    assert ServerConfig().headers() == {}
    assert ServerConfig(base_url="http://h:1/", endpoint="/v1/audio/speech").url == "http://h:1/v1/audio/speech"


# --- decoding ---------------------------------------------------------------------------------------


def test_pcm_decoder_keeps_an_odd_byte_for_the_next_piece():
    data = np.arange(-5, 5, dtype="<i2").tobytes()
    decoder = PcmDecoder("pcm", SR)
    pieces = [decoder.feed(data[:3]), decoder.feed(data[3:8]), decoder.feed(data[8:])]
    assert [len(p) for p in pieces] == [1, 3, 6]
    assert np.concatenate(pieces).tolist() == list(range(-5, 5))


def test_wav_decoder_parses_a_header_split_byte_by_byte_and_takes_its_rate():
    header = wav_header(sample_rate=16000, extra_chunk=b"LIST" + struct.pack("<I", 3) + b"abc\x00")
    body = header + np.array([1, -2, 3], dtype="<i2").tobytes()
    decoder = PcmDecoder("wav", SR)
    samples = np.concatenate([decoder.feed(body[i : i + 1]) for i in range(len(body))])
    assert samples.tolist() == [1, -2, 3]
    assert decoder.sample_rate == 16000


def test_wav_decoder_rejects_what_it_cannot_measure():
    with pytest.raises(ProtocolError, match="RIFF"):
        PcmDecoder("wav", SR).feed(b"ID3\x04" + bytes(40))
    with pytest.raises(ProtocolError, match="mono 16-bit"):
        PcmDecoder("wav", SR).feed(wav_header(channels=2) + bytes(8))


# --- whole requests over a mock transport -------------------------------------------------------------


class Stream(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]):
        self.pieces = pieces

    async def __aiter__(self):
        for piece in self.pieces:
            await asyncio.sleep(0)
            yield piece


def exchange_with(handler, server: ServerConfig, request: PlannedRequest | None = None):
    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await send_request(client, server, request or planned(), AudibleRule())

    return asyncio.run(go())


def sse(events: list[dict]) -> list[bytes]:
    return [f"data: {json.dumps(e)}\n\n".encode() for e in events]


def test_raw_pcm_stream_is_timed_chunk_by_chunk():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.update(json.loads(request.content), auth=request.headers.get("authorization"))
        return httpx.Response(200, headers={"content-type": "audio/pcm"}, stream=Stream(frames_pcm(4)))

    ex = exchange_with(handler, ServerConfig(api_key="secret"), planned(frames=4))
    assert ex.outcome == "ok" and ex.http_status == 200
    assert seen["max_new_tokens"] == 4 and seen["auth"] == "Bearer secret"
    tl = ex.timeline
    assert sum(c.samples for c in tl.chunks) == 4 * FRAME
    assert tl.onset_sample is not None and FRAME - 480 <= tl.onset_sample <= FRAME  # the first frame is silent
    assert tl.first_byte_s <= tl.chunks[-1].t <= tl.end_s


def test_sse_deltas_are_decoded_and_the_finish_reason_kept():
    events = [{"type": "speech.audio.delta", "audio": base64.b64encode(p).decode()} for p in frames_pcm(3)]
    events.append({"type": "speech.audio.done", "usage": {"output_tokens": 3}, "finish_reason": "length"})
    body = sse(events)
    # Split one event across two network pieces, as TCP may.
    body[1:2] = [body[1][:10], body[1][10:]]

    def handler(request):
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=Stream(body + [b"data: [DONE]\n\n"])
        )

    ex = exchange_with(handler, ServerConfig(stream_format="sse"))
    assert ex.outcome == "ok" and ex.finish_reason == "length"
    assert [c.samples for c in ex.timeline.chunks] == [FRAME] * 3


def test_wav_over_sse_strips_the_header_from_the_first_delta():
    pieces = [wav_header()] + frames_pcm(2)
    events = [{"type": "speech.audio.delta", "audio": base64.b64encode(p).decode()} for p in pieces]

    def handler(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Stream(sse(events)))

    ex = exchange_with(handler, ServerConfig(stream_format="sse", response_format="wav"))
    assert [c.samples for c in ex.timeline.chunks] == [0, FRAME, FRAME]


@pytest.mark.parametrize(
    ("handler", "server", "outcome", "message"),
    [
        (
            lambda r: httpx.Response(429, json={"error": {"message": "queue full", "type": "rate_limit"}}),
            ServerConfig(),
            "http_429",
            "queue full",
        ),
        (lambda r: httpx.Response(500, text="boom"), ServerConfig(), "http_500", "boom"),
        (lambda r: httpx.Response(422, json={"detail": "bad voice"}), ServerConfig(), "http_422", "bad voice"),
        (
            lambda r: httpx.Response(200, headers={"content-type": "audio/pcm"}, content=b""),
            ServerConfig(),
            "no_audio",
            "no audio",
        ),
        (
            lambda r: httpx.Response(200, headers={"content-type": "audio/pcm"}, content=b"\0\0"),
            ServerConfig(stream_format="sse"),
            "protocol_error",
            "text/event-stream",
        ),
        (
            lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"data: {oops\n\n"),
            ServerConfig(stream_format="sse"),
            "protocol_error",
            "not JSON",
        ),
        (
            lambda r: httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                content=b'data: {"type": "error", "error": {"message": "oom"}}\n\n',
            ),
            ServerConfig(stream_format="sse"),
            "sse_error",
            "oom",
        ),
    ],
)
def test_failures_are_classified(handler, server, outcome, message):
    ex = exchange_with(handler, server)
    assert ex.outcome == outcome
    assert message in ex.error
    assert ex.timeline.end_s is None  # a failed request has no end-to-end latency


def test_transport_failures_are_classified():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    def drop(request):
        raise httpx.RemoteProtocolError("peer closed", request=request)

    assert exchange_with(refuse, ServerConfig()).outcome == "connect_error"
    assert exchange_with(drop, ServerConfig()).outcome == "transport_error"


def test_a_stalled_stream_times_out_with_what_arrived_so_far():
    class Stall(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield frames_pcm(1, silent_first=False)[0]
            await asyncio.Event().wait()  # never comes

    def handler(request):
        return httpx.Response(200, headers={"content-type": "audio/pcm"}, stream=Stall())

    ex = exchange_with(handler, ServerConfig(timeout_s=0.2))
    assert ex.outcome == "timeout"
    assert [c.samples for c in ex.timeline.chunks] == [FRAME]
    assert ex.timeline.end_s is None
