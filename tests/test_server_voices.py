"""A Base (voice cloning) `cadence serve` through real clients: saved voices (POST/GET/DELETE
/v1/audio/voices, multipart uploads from httpx and the openai SDK), speech in a saved voice, with an
inline base64 reference and with an uploaded one; wav, mp3, flac and ogg references; malformed,
oversized, too long and too short audio; consent; and the fields a Base checkpoint refuses.

One server (tiny random Base checkpoint, CPU) serves the module, with small audio limits so the
limit tests stay cheap. Requests use `max_new_tokens` + `ignore_eos` and a seed, so equal requests
give equal samples.
"""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
from clips import encode_file, reference_audio
from openai import OpenAI
from serving import FRAME, Server, decode_audio, pcm_samples

from cadence.audio_input import decode_audio as decode_reference
from cadence.models.qwen3_tts.voice_encoder import VoiceEncoder
from cadence.models.qwen3_tts.voice_prompt import VoiceClonePrompt

FRAMES = 4
FIXED = {"max_new_tokens": FRAMES, "ignore_eos": True, "seed": 7, "response_format": "pcm"}
MODEL = "tiny-base"
REF_TEXT = "The quick brown fox jumps over the lazy dog."
MAX_BYTES = 400_000
MAX_SECONDS = 4.0


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="module")
def server(tiny_base_checkpoint, tmp_path_factory, voices_dir):
    s = Server(
        tiny_base_checkpoint, tmp_path_factory.mktemp("serve-base"), "--served-model-name", MODEL,
        "--voices-dir", str(voices_dir), "--max-ref-audio-bytes", str(MAX_BYTES),
        "--max-ref-audio-seconds", str(MAX_SECONDS),
    )  # fmt: skip
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=server.url + "/v1", api_key="not-needed", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def wav_bytes() -> bytes:
    return encode_file(reference_audio(2.5), 24000, "wav")


def upload(server: Server, name: str, audio: bytes, filename: str = "ref.wav", **fields) -> httpx.Response:
    data = {"name": name, "consent": "true", "ref_text": REF_TEXT, **fields}
    data = {k: v for k, v in data.items() if v is not None}
    with server.client() as c:
        return c.post("/v1/audio/voices", data=data, files={"audio_sample": (filename, audio)})


def speech(server: Server, **fields) -> httpx.Response:
    with server.client() as c:
        return c.post(
            "/v1/audio/speech", json={"model": MODEL, "input": "Hello from a cloned voice.", **FIXED, **fields}
        )


def error(r: httpx.Response, status: int, param: str | None = None, code: str | None = None) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err["message"]


@pytest.fixture(scope="module")
def saved(server, wav_bytes) -> dict:
    r = upload(server, "Narrator", wav_bytes)
    assert r.status_code == 200, r.text
    return r.json()


def test_models_lists_what_a_base_checkpoint_does(server):
    with server.client() as c:
        card = c.get("/v1/models").json()["data"][0]
    assert card["id"] == MODEL and card["tts_model_type"] == "base"
    assert card["voice_cloning"] and card["saved_voices"]
    assert card["voices"] == [] and card["instructions"] is None
    assert "english" in card["languages"] and card["sample_rate"] == 24000
    # a model that speaks only cloned voices has no request to suggest without reference audio
    log = server.log()
    assert "try: save a voice from reference audio" in log and "try: curl" not in log


def test_saved_voice_is_listed_stored_and_precomputed(server, saved, voices_dir, tiny_base_checkpoint):
    assert saved["id"].startswith("voice_") and saved["object"] == "audio.voice" and saved["name"] == "Narrator"
    assert saved["ref_text"] == REF_TEXT and saved["modes"] == ["in_context", "x_vector_only"]
    assert saved["seconds"] == pytest.approx(2.5, abs=0.08)
    with server.client() as c:
        listed = c.get("/v1/audio/voices").json()["voices"]
        assert saved["id"] in [v["id"] for v in listed]
        assert c.get(f"/v1/audio/voices/{saved['id']}").json() == saved
        assert c.get("/v1/audio/voices/Narrator").json()["id"] == saved["id"]
    # On disk with its prompt: the codes and x-vector of the reference, as the encoders give them.
    stored = VoiceClonePrompt.load(voices_dir / saved["id"] / "prompt.safetensors")
    encoder = VoiceEncoder.from_pretrained(tiny_base_checkpoint)
    direct = encoder.encode(decode_reference(encode_file(reference_audio(2.5), 24000, "wav"), 24000), REF_TEXT)
    assert np.array_equal(stored.ref_codes, direct.ref_codes) and np.array_equal(stored.x_vector, direct.x_vector)
    assert stored.ref_text == REF_TEXT


def test_speech_in_a_saved_voice(server, saved):
    by_name = speech(server, voice="narrator")
    assert by_name.status_code == 200, by_name.text
    assert pcm_samples(by_name.content).size == FRAMES * FRAME
    by_id = speech(server, voice={"id": saved["id"]})
    assert by_id.content == by_name.content  # same voice, same seed
    x_vector = speech(server, voice="Narrator", x_vector_only_mode=True)
    assert x_vector.status_code == 200 and x_vector.content != by_name.content  # the other clone mode


def test_inline_reference_equals_the_saved_voice(server, saved, wav_bytes):
    """The saved prompt is what the reference gives when sent with the request: same samples."""
    b64 = base64.b64encode(wav_bytes).decode()
    inline = speech(server, ref_audio=b64, ref_text=REF_TEXT)
    assert inline.status_code == 200, inline.text
    assert inline.content == speech(server, voice="Narrator").content
    data_url = speech(server, ref_audio="data:audio/wav;base64," + b64, ref_text=REF_TEXT)
    assert data_url.content == inline.content


def test_uploaded_reference_as_multipart(server, saved):
    flac = encode_file(reference_audio(2.5), 24000, "flac")  # lossless: the same samples as the wav
    fields = {"model": MODEL, "input": "Hello from a cloned voice.", "ref_text": REF_TEXT}
    fields.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in FIXED.items()})
    with server.client() as c:
        r = c.post("/v1/audio/speech", data=fields, files={"ref_audio": ("ref.flac", flac)})
    assert r.status_code == 200, r.text
    assert r.content == speech(server, voice="Narrator").content


@pytest.mark.parametrize("fmt", ["mp3", "flac", "ogg"])
def test_reference_formats(server, fmt):
    r = upload(server, f"fmt-{fmt}", encode_file(reference_audio(2.0), 24000, fmt), f"ref.{fmt}")
    assert r.status_code == 200, r.text
    assert r.json()["seconds"] == pytest.approx(2.0, abs=0.1)  # encoder delay/padding of lossy formats
    assert speech(server, voice=f"fmt-{fmt}").status_code == 200


def test_openai_client_creates_uses_and_deletes_a_voice(server, client):
    mp3 = encode_file(reference_audio(1.5, seed=5), 24000, "mp3")
    voice = client.audio.voices.create(
        audio_sample=("sample.mp3", mp3, "audio/mpeg"), consent="cons_1234", name="via-openai",
        extra_body={"ref_text": "Words of the reference."},
    )  # fmt: skip
    assert voice.id.startswith("voice_") and voice.name == "via-openai" and voice.type == "audio_sample"
    audio = client.audio.speech.create(
        model=MODEL, voice={"id": voice.id}, input="Spoken in a saved voice.", response_format="wav",
        extra_body={"max_new_tokens": FRAMES, "ignore_eos": True},
    )  # fmt: skip
    rate, samples = decode_audio(audio.read())
    assert rate == 24000 and samples.size == FRAMES * FRAME
    deleted = client.audio.voices.delete(voice.id)
    assert deleted.deleted and deleted.id == voice.id
    with server.client() as c:
        assert c.get(f"/v1/audio/voices/{voice.id}").status_code == 404
    error(speech(server, voice="via-openai"), 400, "voice")


def test_delete(server, wav_bytes, voices_dir):
    made = upload(server, "short-lived", wav_bytes).json()
    with server.client() as c:
        r = c.delete(f"/v1/audio/voices/{made['id']}")
        assert r.json() == {"id": made["id"], "object": "audio.voice.deleted", "deleted": True}
        assert not (voices_dir / made["id"]).exists()
        error(c.delete(f"/v1/audio/voices/{made['id']}"), 404, "voice_id", "voice_not_found")


# -- bad audio and limits ------------------------------------------------------------------------------


def test_malformed_audio(server):
    message = error(upload(server, "junk", np.random.default_rng(0).bytes(5000)), 400, "audio_sample", "invalid_audio")
    assert "not in an accepted format" in message and "wav, mp3, flac, ogg" in message
    b64 = base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEjunk").decode()
    error(speech(server, ref_audio=b64, ref_text="x"), 400, "ref_audio", "invalid_audio")
    error(speech(server, ref_audio="not base64!", ref_text="x"), 400, "ref_audio", "invalid_audio")
    assert "not fetched" in error(speech(server, ref_audio="https://example.com/a.wav"), 400, "ref_audio")


def test_oversized_audio(server):
    big = encode_file(reference_audio(3.0, sample_rate=48000), 48000, "wav")  # ~288 kB ... past MAX_BYTES
    big = big + bytes(MAX_BYTES)
    assert "bytes" in error(upload(server, "big", big), 413, "audio_sample")
    b64 = base64.b64encode(big).decode()
    error(speech(server, ref_audio=b64, ref_text="x"), 413, "ref_audio")


def test_audio_longer_than_the_limit(server):
    long = encode_file(reference_audio(MAX_SECONDS + 1, sample_rate=8000), 8000, "wav")  # small file, 5 s
    assert len(long) < MAX_BYTES
    assert f"limit of {MAX_SECONDS:g} seconds" in error(upload(server, "long", long), 413, "audio_sample")


def test_audio_too_short(server):
    short = encode_file(reference_audio(0.2), 24000, "wav")
    assert "at least" in error(upload(server, "short", short), 400, "audio_sample", "invalid_audio")


# -- the form ------------------------------------------------------------------------------------------


def test_consent_is_required(server, wav_bytes):
    error(upload(server, "no-consent", wav_bytes, consent=None), 400, "consent", "consent_required")
    error(upload(server, "said-no", wav_bytes, consent="false"), 400, "consent", "consent_required")


def test_names(server, saved, wav_bytes):
    error(upload(server, "narrator", wav_bytes), 409, "name", "voice_exists")  # case-insensitive
    error(upload(server, "bad/name", wav_bytes), 400, "name")
    error(upload(server, "voice_123", wav_bytes), 400, "name")
    with server.client() as c:
        r = c.post("/v1/audio/voices", data={"consent": "true"}, files={"audio_sample": ("a.wav", wav_bytes)})
        error(r, 400, "name", "missing_field")
        r = c.post("/v1/audio/voices", data={"name": "nofile", "consent": "true"})
        error(r, 400, "audio_sample", "missing_field")
        error(c.post("/v1/audio/voices", json={"name": "x"}), 400)


def test_voice_without_transcript_clones_by_x_vector(server, wav_bytes):
    r = upload(server, "no-text", wav_bytes, ref_text=None)
    assert r.status_code == 200 and r.json()["modes"] == ["x_vector_only"]
    assert speech(server, voice="no-text").status_code == 200  # the x-vector mode, by default
    error(speech(server, voice="no-text", x_vector_only_mode=False), 400, "ref_text")


# -- fields a Base checkpoint refuses ------------------------------------------------------------------


def test_base_refuses_what_it_cannot_use(server, saved, wav_bytes):
    message = error(speech(server, voice="Narrator", instructions="Whisper."), 400, "instructions")
    assert "custom_voice" in message and "voice_design" in message
    assert "saved voice" in error(speech(server), 400, "voice")
    error(speech(server, voice="Narrator", ref_text="override"), 400, "ref_text")
    message = error(speech(server, voice="nobody"), 400, "voice")
    assert "Narrator" in message  # the saved voices are listed
    b64 = base64.b64encode(wav_bytes).decode()
    error(speech(server, voice="Narrator", ref_audio=b64), 400, "voice")
