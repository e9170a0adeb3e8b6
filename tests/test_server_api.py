"""`cadence serve` through real clients: the openai SDK, httpx (SSE), curl; every format decoded back.

One server process (tiny random checkpoint, CPU) serves the whole module. Requests use
`max_new_tokens` with `ignore_eos`, so each answer is exactly FRAMES frames of 80 ms; with a seed,
the same request gives the same samples, which lets formats and voice aliases be compared.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import io
import json
import re
import subprocess
import wave

import httpx
import numpy as np
import pytest
from openai import OpenAI
from serving import FRAME, SAMPLE_RATE, Server, decode_audio, pcm_samples, wait_for

FRAMES = 5
FIXED = {"max_new_tokens": FRAMES, "ignore_eos": True}
SECONDS = FRAMES * FRAME / SAMPLE_RATE
MODEL = "tiny-tts"
# Lossy encoders add priming/padding samples (mp3 ~1100, aac 1024); ffmpeg trims what it can.
LOSSY_SLACK_S = 0.1


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("serve-api"), "--served-model-name", MODEL)
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=server.url + "/v1", api_key="not-needed", max_retries=0, timeout=120)


def speech(server: Server, **fields) -> httpx.Response:
    body = {"model": MODEL, "input": "Hello from cadence.", "voice": "ryan", **FIXED, **fields}
    with server.client() as c:
        return c.post("/v1/audio/speech", json=body)


def check_decoded(fmt: str, data: bytes, seconds: float = SECONDS) -> np.ndarray:
    if fmt == "pcm":
        samples = pcm_samples(data)
        assert samples.size == round(seconds * SAMPLE_RATE)
        return samples
    rate, samples = decode_audio(data)
    # Opus always decodes at 48 kHz (the stream header carries the 24 kHz input rate).
    assert rate == (48000 if fmt == "opus" else SAMPLE_RATE)
    duration = samples.size / rate
    if fmt in ("wav", "flac"):
        assert samples.size == round(seconds * SAMPLE_RATE)
    else:
        assert abs(duration - seconds) <= LOSSY_SLACK_S, (fmt, duration)
    assert np.abs(samples).max() > 0  # random weights make noise, not silence
    return samples


# -- discovery and status routes -------------------------------------------------------------------


def test_status_models_voices(server, client):
    with server.client() as c:
        assert c.get("/health").json() == {"status": "ok"}
        assert c.get("/ready").status_code == 200
        version = c.get("/version").json()
        assert version["model"] == MODEL and version["model_size"] == "0b6" and version["device"] == "cpu"
        voices = c.get("/v1/audio/voices").json()
        assert c.get("/v1/models/tts-1").json()["id"] == MODEL  # OpenAI's names reach the served model
        assert c.get("/v1/models/other").status_code == 404
    counted = server.metrics()
    assert counted['cadence_requests_total{route="/v1/models/{model_id:path}",status="404"}'] >= 1
    assert not [k for k in counted if "other" in k]  # labels are route templates, not client-chosen paths
    assert [m.id for m in client.models.list().data] == [MODEL]
    by_id = {v["id"]: v for v in voices["voices"]}
    assert sorted(by_id) == ["aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian"]
    assert by_id["ryan"]["native_language"] == "English" and by_id["ryan"]["gender"] == "male"
    assert by_id["eric"]["dialect"] == "Sichuan dialect"
    aliases = {a: v for v, entry in by_id.items() for a in entry["aliases"]}
    openai_names = ["alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse"]
    assert sorted(aliases) == openai_names
    assert "english" in voices["languages"] and "auto" in voices["languages"]


def test_models_lists_the_task_and_cloning_fields_are_refused(server):
    """The 0.6B CustomVoice: presets, style instructions dropped (the official wrapper drops them),
    no cloning: a cloning field is a 400 naming the variant that takes it."""
    with server.client() as c:
        card = c.get("/v1/models").json()["data"][0]
        assert card["tts_model_type"] == "custom_voice" and card["model_size"] == "0b6"
        assert card["instructions"] is None and not card["voice_cloning"] and "ryan" in card["voices"]
        assert c.get("/v1/audio/voices/ryan").json()["name"] == "Ryan"
        r = c.post("/v1/audio/speech", json={"input": "Hi.", "voice": "ryan", "ref_audio": "AAAA", **FIXED})
        assert r.status_code == 400 and r.json()["error"]["param"] == "ref_audio", r.text
        assert "base checkpoint" in r.json()["error"]["message"]
        r = c.delete("/v1/audio/voices/ryan")
        assert r.status_code == 400 and "base checkpoint" in r.json()["error"]["message"]


# -- the openai SDK, every format ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_openai_sdk_whole_body(client, fmt):
    audio = client.audio.speech.create(
        model=MODEL, voice="ryan", input="Hello from cadence.", response_format=fmt, extra_body=FIXED
    )
    check_decoded(fmt, audio.content)


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_openai_sdk_streaming_response(client, fmt):
    content_types = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac"}
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input="Streaming, as it is generated.", response_format=fmt, extra_body=FIXED
    ) as response:
        assert response.headers["content-type"] == content_types.get(fmt, f"audio/{fmt}")
        assert response.headers["x-request-id"].startswith("speech-")
        data = b"".join(response.iter_bytes())
    check_decoded(fmt, data)


def test_lossless_formats_carry_the_same_samples(server):
    pcm = pcm_samples(speech(server, response_format="pcm", seed=7).content)
    for fmt in ("wav", "flac"):
        _, samples = decode_audio(speech(server, response_format=fmt, seed=7).content)
        assert np.array_equal(samples.astype(np.int16), pcm), fmt
    other_seed = pcm_samples(speech(server, response_format="pcm", seed=8).content)
    assert not np.array_equal(other_seed, pcm)


@pytest.mark.parametrize(("fmt", "speed"), [("pcm", 2.0), ("mp3", 0.5), ("wav", 4.0), ("pcm", 0.25)])
def test_speed_changes_the_duration(server, fmt, speed):
    r = speech(server, response_format=fmt, speed=speed, max_new_tokens=10)
    assert r.status_code == 200
    seconds = 10 * 0.08 / speed
    if fmt == "pcm":  # atempo keeps the length to within its analysis window
        assert abs(pcm_samples(r.content).size / SAMPLE_RATE - seconds) <= 0.06 / speed
    else:
        _, samples = decode_audio(r.content)
        assert abs(samples.size / SAMPLE_RATE - seconds) <= LOSSY_SLACK_S + 0.06 / speed


def test_whole_file_mode_has_usage_headers_and_an_exact_wav_header(server):
    r = speech(server, response_format="wav", stream=False)
    assert r.status_code == 200
    assert r.headers["x-finish-reason"] == "length"
    assert r.headers["x-usage-output-tokens"] == str(FRAMES)
    assert int(r.headers["x-usage-input-tokens"]) > 0
    assert float(r.headers["x-audio-seconds"]) == pytest.approx(SECONDS)
    assert int(r.headers["content-length"]) == len(r.content) == 44 + 2 * FRAMES * FRAME
    with wave.open(io.BytesIO(r.content)) as w:  # the stdlib reader trusts the header's sizes
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()) == (
            SAMPLE_RATE,
            1,
            2,
            FRAMES * FRAME,
        )


def test_sse_events(server):
    body = {"model": MODEL, "input": "Events, please.", "voice": "ryan", "response_format": "pcm"}
    body |= {"stream_format": "sse", **FIXED}
    events = []
    with server.client() as c, c.stream("POST", "/v1/audio/speech", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    *deltas, done = events
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas)
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert pcm_samples(audio).size == FRAMES * FRAME
    assert done["type"] == "speech.audio.done" and done["finish_reason"] == "length"
    usage = done["usage"]
    assert usage["output_tokens"] == FRAMES and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + FRAMES
    assert usage["audio_seconds"] == pytest.approx(SECONDS)


def test_curl(server, tmp_path):
    out = tmp_path / "hello.wav"
    body = {"model": MODEL, "input": "Hello from curl.", "voice": "vivian", "response_format": "wav", **FIXED}
    subprocess.run(
        ["curl", "-sS", "--fail", "--noproxy", "*", f"{server.url}/v1/audio/speech"]
        + ["-H", "Content-Type: application/json", "-d", json.dumps(body), "-o", str(out)],
        check=True,
        timeout=120,
    )
    _, samples = decode_audio(out.read_bytes())
    assert samples.size == FRAMES * FRAME


def test_voice_names_are_case_insensitive_and_aliases_map_to_presets(server):
    def audio(voice) -> bytes:
        # 20 frames: a tiny random model's speaker rows move the sampled codes only after a while.
        r = speech(server, voice=voice, response_format="pcm", seed=11, max_new_tokens=20)
        assert r.status_code == 200, r.text
        return r.content

    serena = audio("serena")
    assert audio("SeReNa") == serena
    assert audio({"id": "serena"}) == serena  # OpenAI's object form
    assert audio("Nova") == serena  # the documented alias
    assert audio("ryan") != serena


def test_instructions_are_ignored_on_06b_with_a_warning(server):
    plain = speech(server, response_format="pcm", seed=5)
    styled = speech(server, response_format="pcm", seed=5, instructions="Whisper, slowly.")
    assert "warning" not in plain.headers
    assert "instructions are ignored" in styled.headers["warning"]
    assert styled.content == plain.content


def test_temperature_zero_over_http_is_the_greedy_engine(server, tiny_model):
    """Greedy decoding over HTTP (`temperature: 0`): the audio equals the in-process engine's with
    greedy=True on the same checkpoint, whatever the seed; the code predictor's own sampling
    (`subtalker_*`) reaches the engine too."""
    from cadence.engine.config import EngineConfig
    from cadence.engine.engine import Engine
    from cadence.models.qwen3_tts.frontend import SynthesisRequest

    text, frames = "Greedy, please.", 16
    engine = Engine(tiny_model, EngineConfig(max_streams=1, kv_cache_memory=0.02))
    try:
        expected = engine.synthesize_blocking(
            SynthesisRequest(text, voice="vivian", greedy=True, max_new_tokens=frames, seed=1), timeout=300
        )
    finally:
        engine.close()
    fields = {"input": text, "voice": "vivian", "response_format": "pcm", "max_new_tokens": frames, "stream": False}
    with server.client() as c:
        greedy = [c.post("/v1/audio/speech", json={**fields, "temperature": 0, "seed": seed}) for seed in (2, 3)]
        sampled_cp = c.post("/v1/audio/speech", json={**fields, "temperature": 0, "subtalker_temperature": 0.9})
    for r in (*greedy, sampled_cp):
        assert r.status_code == 200, r.text
    assert greedy[0].content == greedy[1].content
    got = pcm_samples(greedy[0].content)
    assert greedy[0].headers["x-finish-reason"] == expected.finish_reason.value
    assert got.size == expected.pcm.size
    assert np.abs(got.astype(np.int32) - expected.pcm.astype(np.int32)).max() <= 1  # another process: 1 LSB
    assert sampled_cp.content != greedy[0].content  # codebooks 1-15 sampled


def test_fifty_concurrent_streams_all_complete(server):
    frames = [2 + i % 5 for i in range(50)]

    async def one(c: httpx.AsyncClient, i: int) -> int:
        body = {"model": MODEL, "input": f"Stream number {i}.", "voice": "aiden", "response_format": "pcm"}
        body |= {"max_new_tokens": frames[i], "ignore_eos": True}
        got = 0
        async with c.stream("POST", "/v1/audio/speech", json=body) as r:
            assert r.status_code == 200, await r.aread()
            async for piece in r.aiter_bytes():
                got += len(piece)
        return got

    async def all_of_them() -> list[int]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=limits, trust_env=False) as c:
            return await asyncio.gather(*(one(c, i) for i in range(50)))

    before = server.metrics()
    got = asyncio.run(all_of_them())
    assert got == [2 * FRAME * n for n in frames]  # every sample of every stream, nothing lost
    after = server.metrics()
    for key in (
        'cadence_requests_total{route="/v1/audio/speech",status="200"}',
        'cadence_finished_total{reason="length"}',
        "cadence_ttfa_seconds_count",
    ):
        assert after[key] - before.get(key, 0) == 50, key
    assert after["cadence_active_streams"] == 0 and after["cadence_inflight_requests"] == 0


def test_both_processes_freeze_their_start_up_heap_and_report_collections(server):
    """The engine and the API process each freeze what start-up made out of the garbage collector's
    walks (cadence/gc_pauses.py: a full collection otherwise stops every stream for as long as it
    walks torch's and the model's objects), and /metrics reports each one's collections."""
    frozen = [int(n) for n in re.findall(r"froze (\d+) start-up objects", server.log())]
    assert len(frozen) == 2 and min(frozen) > 10_000, server.log()[-3000:]
    m = server.metrics()
    for process in ("engine", "api"):
        labels = f'{{process="{process}"}}'
        assert m[f"cadence_gc_collections{labels}"] >= 0
        assert 0 <= m[f"cadence_gc_longest_pause_seconds{labels}"] <= m[f"cadence_gc_seconds{labels}"]


def test_the_access_log_gives_a_streams_longest_wait_between_chunks(server):
    """A request of several chunks logs the longest wait between two of them reaching the API process
    (the server's side of a playback gap); a request of one chunk has no such wait."""
    body = {"model": MODEL, "input": "Several chunks.", "voice": "aiden", "response_format": "pcm"}
    ids = {}
    with server.client() as c:
        for frames in (12, 1):
            r = c.post("/v1/audio/speech", json=body | {"max_new_tokens": frames, "ignore_eos": True})
            assert r.status_code == 200 and len(r.content) == 2 * FRAME * frames
            ids[frames] = r.headers["x-request-id"]
    wait_for(lambda: all(any(x["id"] == i for x in server.access_log()) for i in ids.values()), 60, "both log lines")
    lines = {x["id"]: x for x in server.access_log()}
    several, one = lines[ids[12]], lines[ids[1]]
    assert 0 <= several["max_chunk_gap_ms"] <= 1000 * several["duration_s"]
    assert "max_chunk_gap_ms" not in one


def test_http_runs_on_uvloop_and_httptools_and_checks_keys_on_the_event_loop(server):
    """uvicorn serves on uvloop with the httptools parser (cadence's dependencies; without them it
    falls back to asyncio's loop and h11, a few tenths of a millisecond slower a request), and the
    API-key check is a coroutine, which FastAPI runs on the event loop instead of handing it to its
    thread pool on every request."""
    from cadence.server.api import key_check

    assert "HTTP served on the uvloop event loop, requests parsed by httptools" in server.log()
    assert all(inspect.iscoroutinefunction(key_check(None, query)) for query in (False, True))
