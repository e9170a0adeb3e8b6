"""Hostile reference audio and voice fields against a real Base (voice cloning) `cadence serve`.

The server runs in a working directory that holds a private recording, as a deployment's might:
no upload may make the server read it (FFmpeg playlists and other indirections), and no answer
may tell whether it exists. Transcripts, consent records, names and the listing are bounded; the
stored files are private; concurrent uploads are held to a few at a time.
"""

from __future__ import annotations

import base64
import socket
import stat
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from clips import encode_file, reference_audio
from serving import Server, wait_for
from test_audio_input import INDIRECTIONS, float_wav

MODEL = "tiny-base"
MAX_REF_TEXT_TOKENS = 64
UPLOADS = 1  # --max-concurrent-uploads
FIXED = {"max_new_tokens": 3, "ignore_eos": True, "seed": 7, "response_format": "pcm"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("server-cwd")
    (cwd / "recordings").mkdir()
    (cwd / "recordings" / "meeting.wav").write_bytes(encode_file(reference_audio(3.0, seed=9)))
    return cwd


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="module")
def server(tiny_base_checkpoint, tmp_path_factory, workdir, voices_dir):
    s = Server(
        tiny_base_checkpoint, tmp_path_factory.mktemp("serve-hostile-base"), "--served-model-name", MODEL,
        "--voices-dir", str(voices_dir), "--max-ref-text-tokens", str(MAX_REF_TEXT_TOKENS),
        "--max-concurrent-uploads", str(UPLOADS), cwd=workdir,
    )  # fmt: skip
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def upload(server: Server, name: str, audio: bytes, **fields) -> httpx.Response:
    data = {"name": name, "consent": "true", **fields}
    with server.client() as c:
        return c.post("/v1/audio/voices", data=data, files={"audio_sample": ("ref.wav", audio)})


def speech(server: Server, **fields) -> httpx.Response:
    with server.client() as c:
        return c.post("/v1/audio/speech", json={"model": MODEL, "input": "Hello.", **FIXED, **fields})


def speech_form(server: Server, audio: bytes, **fields) -> httpx.Response:
    data = {"model": MODEL, "input": "Hello.", **{k: str(v).lower() for k, v in FIXED.items()}, **fields}
    with server.client() as c:
        return c.post("/v1/audio/speech", data=data, files={"ref_audio": ("ref.wav", audio)})


def error(r: httpx.Response, status: int, param: str | None = None, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert param is None or err["param"] == param, err
    assert code is None or err["code"] == code, err
    return err


def api_rss_kb(server: Server) -> int:
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_concurrent_uploads_are_held_to_a_few(server):
    """Sixteen 8 MB uploads at once: at most UPLOADS is read and analysed at a time, so the API
    process grows by about one of them, not by all sixteen. (Each is refused as soon as it is read:
    the voice encoders' own memory plays no part.)"""
    size, count = 8 << 20, 16
    audio = b"\x00" * size
    baseline = api_rss_kb(server)
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], api_rss_kb(server))
            done.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    results: list = []

    def one(i: int) -> None:
        results.append(upload(server, f"big-{i}", audio).status_code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    done.set()
    sampler.join()
    assert results == [400] * count, results
    growth_mb = (peak[0] - baseline) / 1024
    assert growth_mb < count * size / 2**20 / 4, f"the API process grew by {growth_mb:.0f} MB"


@pytest.mark.parametrize("name", list(INDIRECTIONS))
def test_indirections_never_read_the_servers_files(server, name):
    """Through all three ways reference audio arrives; the refusal is the same whether the named
    file exists or not."""
    for path in ("recordings/meeting.wav", "recordings/missing.wav"):
        data = INDIRECTIONS[name].replace(b"{path}", path.encode())
        answers = [
            error(upload(server, f"stolen-{path[11:14]}", data), 400, "audio_sample", "invalid_audio"),
            error(speech(server, ref_audio=base64.b64encode(data).decode()), 400, "ref_audio", "invalid_audio"),
            error(speech_form(server, data), 400, "ref_audio", "invalid_audio"),
        ]
        assert {a["message"] for a in answers} == {answers[0]["message"]}
        if path.endswith("meeting.wav"):
            existing = answers[0]["message"]
    assert answers[0]["message"] == existing
    with server.client() as c:
        assert all(not v["name"].startswith("stolen") for v in c.get("/v1/audio/voices").json()["voices"])


def test_non_finite_reference_audio_is_refused(server):
    for bad in (np.nan, np.inf, 1e30):
        wav = reference_audio(1.5)
        wav[100:200] = bad
        err = error(upload(server, "nan-voice", float_wav(wav)), 400, "audio_sample", "invalid_audio")
        assert "finite" in err["message"] or "amplitude" in err["message"]


def test_ref_text_is_limited_in_tokens(server):
    wav = encode_file(reference_audio(1.5))
    long_text = " ".join(["word"] * (MAX_REF_TEXT_TOKENS * 2))  # short in characters, long in tokens
    assert "tokens" in error(upload(server, "chatty", wav, ref_text=long_text), 413, "ref_text")["message"]
    huge = "x" * (2 << 20)  # refused by its characters, before it is tokenised
    error(speech(server, ref_audio=base64.b64encode(wav).decode(), ref_text=huge), 413, "ref_text")
    error(speech_form(server, wav, ref_text=long_text), 413, "ref_text")
    ok = upload(server, "concise", wav, ref_text="A short transcript.")
    assert ok.status_code == 200, ok.text
    assert speech(server, voice="concise").status_code == 200


def test_voice_names_have_one_form(server):
    wav = encode_file(reference_audio(1.5))
    for bad in ("foo\n", "trail ", " lead", "tab\t", "ｆｕｌｌ"):  # the last: full-width letters (NFKC: "full")
        error(upload(server, bad, wav), 400, "name")
    made = upload(server, "Trail", wav)
    assert made.status_code == 200, made.text
    error(upload(server, "trail", wav), 409, "name", "voice_exists")
    assert speech(server, voice=" trail ").status_code == 200  # looked up in the same form
    with server.client() as c:
        assert c.get("/v1/audio/voices/TRAIL").json()["id"] == made.json()["id"]
        assert c.delete("/v1/audio/voices/trail").json()["deleted"] is True
        assert c.get("/v1/audio/voices/Trail").status_code == 404


def test_consent_and_listing_are_bounded(server):
    wav = encode_file(reference_audio(1.5))
    error(upload(server, "essay", wav, consent="cons_" + "x" * 5000), 400, "consent", "consent_required")
    for i in range(3):
        assert upload(server, f"page-{i}", wav).status_code == 200
    with server.client() as c:
        everything = c.get("/v1/audio/voices", params={"limit": 1000}).json()
        assert not everything["has_more"]
        seen, after = [], None
        while True:
            page = c.get("/v1/audio/voices", params={"limit": 2, **({"after": after} if after else {})}).json()
            assert len(page["voices"]) <= 2
            seen += [v["id"] for v in page["voices"]]
            if not page["has_more"]:
                break
            after = page["last_id"]
        assert seen == [v["id"] for v in everything["voices"]]
        for bad in ("0", "1001", "many"):
            error(c.get("/v1/audio/voices", params={"limit": bad}), 400, "limit")
        error(c.get("/v1/audio/voices", params={"after": "voice_nobody"}), 400, "after")


def test_saved_voice_files_are_private(server, voices_dir):
    made = upload(server, "private", encode_file(reference_audio(1.5)), ref_text="Hello there.")
    assert made.status_code == 200, made.text
    folder = voices_dir / made.json()["id"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("voice.json", "prompt.safetensors"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name


def test_a_client_leaving_mid_upload_is_counted_without_tracebacks(server):
    key = 'cadence_requests_total{route="/v1/audio/voices",status="499"}'
    before = server.metrics().get(key, 0.0)
    boundary = "cadence-test"
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        head = (
            f"POST /v1/audio/voices HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={boundary}"
            "\r\nContent-Length: 5000000\r\n\r\n"
        )
        part = f'--{boundary}\r\nContent-Disposition: form-data; name="audio_sample"; filename="a.wav"\r\n\r\n'
        sock.sendall(head.encode() + part.encode() + bytes(200_000))
        time.sleep(0.5)  # let the server start reading the part before the client vanishes
    wait_for(lambda: server.metrics().get(key, 0.0) == before + 1, 120, "the dropped upload to be counted", server)
    assert "ClientDisconnect" not in server.log()
    assert "Exception in ASGI application" not in server.log()


def test_a_stored_voice_with_an_overlong_transcript_is_refused(server, voices_dir, tiny_base_checkpoint):
    """A voice whose transcript outgrows what a request may feed (saved before the upload limit, or
    by another tool) is refused per request, naming ref_text, instead of failing in the engine."""
    import torch

    from cadence.models.qwen3_tts.config import Qwen3TTSConfig
    from cadence.models.qwen3_tts.voice_prompt import VoiceClonePrompt
    from cadence.server.voice_library import VoiceLibrary

    config = Qwen3TTSConfig.from_dir(tiny_base_checkpoint)
    hidden = config.talker.hidden_size
    prompt = VoiceClonePrompt(
        torch.zeros(hidden), torch.zeros(12, config.talker.num_code_groups, dtype=torch.long), "word " * 6000
    )
    VoiceLibrary(voices_dir, hidden, VoiceClonePrompt.load).add("verbose", prompt, "true")
    err = error(speech(server, voice="verbose"), 413, "ref_text")
    assert "tokens" in err["message"]
    assert speech(server, voice="verbose", x_vector_only_mode=True).status_code == 200  # the transcript unused
