"""`cadence serve` picks its task from the checkpoint: a 1.7B CustomVoice server takes style
instructions, a VoiceDesign server takes a voice description and no preset; each lists what it
supports at /v1/models and refuses, with a 400 naming the variant that would take it, a field it
cannot use. (Base: tests/test_server_voices.py; the 0.6B CustomVoice: tests/test_server_api.py.)
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from clips import encode_file, reference_audio
from openai import OpenAI
from serving import FRAME, Server, pcm_samples

FRAMES = 4
FIXED = {"max_new_tokens": FRAMES, "ignore_eos": True, "seed": 3, "response_format": "pcm"}


def speech(server: Server, **fields) -> httpx.Response:
    with server.client() as c:
        return c.post("/v1/audio/speech", json={"input": "Hello there.", **FIXED, **fields})


def error(r: httpx.Response, status: int, param: str) -> str:
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param, r.json()
    return r.json()["error"]["message"]


def model_card(server: Server) -> dict:
    with server.client() as c:
        return c.get("/v1/models").json()["data"][0]


@pytest.fixture(scope="module")
def custom_17b(tiny_17b_checkpoint, tmp_path_factory):
    s = Server(tiny_17b_checkpoint, tmp_path_factory.mktemp("serve-17b"))
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def test_17b_custom_voice_takes_instructions(custom_17b):
    card = model_card(custom_17b)
    assert card["tts_model_type"] == "custom_voice" and card["model_size"] == "1b7"
    assert card["instructions"] == "style" and not card["voice_cloning"] and "ryan" in card["voices"]
    plain = speech(custom_17b, voice="ryan")
    styled = speech(custom_17b, voice="ryan", instructions="Whisper, slowly and warmly.")
    assert plain.status_code == styled.status_code == 200, styled.text
    assert "Warning" not in styled.headers  # taken, not dropped as on 0.6B
    assert pcm_samples(styled.content).size == FRAMES * FRAME
    assert styled.content != plain.content  # the instruction is in the prompt
    assert styled.content == speech(custom_17b, voice="ryan", instructions="Whisper, slowly and warmly.").content


def test_17b_through_the_openai_client(custom_17b):
    client = OpenAI(base_url=custom_17b.url + "/v1", api_key="x", max_retries=0, timeout=120)
    audio = client.audio.speech.create(
        model="tts-1", voice="alloy", input="Hello there.", instructions="Whisper, slowly and warmly.",
        response_format="pcm", extra_body={"max_new_tokens": FRAMES, "ignore_eos": True, "seed": 3},
    )  # fmt: skip
    assert audio.read() == speech(custom_17b, voice="ryan", instructions="Whisper, slowly and warmly.").content


def banner_example(server: Server) -> dict:
    """The request the start-up banner suggests (its `try: curl ... -d '{...}'` line)."""
    line = next(line for line in server.log().splitlines() if "try: curl" in line)
    return json.loads(line.split(" -d '", 1)[1].split("' -o ", 1)[0])


@pytest.mark.parametrize("variant", ["custom_17b", "design"])
def test_the_banners_example_request_works(variant, request):
    """The curl line `cadence serve` prints is a request the served variant takes: a preset voice
    for CustomVoice, a voice description for VoiceDesign."""
    server = request.getfixturevalue(variant)
    example = banner_example(server)
    assert ("voice" in example) == (variant == "custom_17b") and ("instructions" in example) == (variant == "design")
    with server.client() as c:
        r = c.post("/v1/audio/speech", json=example)
    assert r.status_code == 200 and r.content[:4] == b"RIFF", r.text


def test_custom_voice_refuses_cloning_fields(custom_17b):
    b64 = base64.b64encode(encode_file(reference_audio(1.0), 24000)).decode()
    assert "base" in error(speech(custom_17b, voice="ryan", ref_audio=b64), 400, "ref_audio")
    assert "base" in error(speech(custom_17b, voice="ryan", x_vector_only_mode=True), 400, "x_vector_only_mode")
    with custom_17b.client() as c:
        r = c.post("/v1/audio/voices", data={"name": "x", "consent": "true"}, files={"audio_sample": ("a.wav", b"x")})
        assert "base" in r.json()["error"]["message"] and r.status_code == 400
        r = c.post("/v1/audio/speech", data={"input": "Hi.", "voice": "ryan"}, files={"ref_audio": ("a.wav", b"x")})
        assert r.status_code == 400 and "base" in r.json()["error"]["message"], r.text


@pytest.fixture(scope="module")
def design(tiny_voice_design_checkpoint, tmp_path_factory):
    # A short longest request, so that a long description alone can outgrow it.
    s = Server(tiny_voice_design_checkpoint, tmp_path_factory.mktemp("serve-design"), "--max-seq-tokens", "512")
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def test_voice_design_takes_a_description(design):
    card = model_card(design)
    assert card["tts_model_type"] == "voice_design" and card["instructions"] == "voice description"
    assert card["voices"] == [] and not card["voice_cloning"]
    described = speech(design, instructions="A deep, calm male voice.")
    assert described.status_code == 200, described.text
    assert pcm_samples(described.content).size == FRAMES * FRAME
    assert described.content != speech(design, instructions="A bright young female voice.").content
    # An OpenAI client must send a voice: its names are taken and ignored.
    assert speech(design, voice="alloy", instructions="A deep, calm male voice.").content == described.content
    with design.client() as c:
        assert c.get("/v1/audio/voices").json()["voices"] == []


def test_voice_design_refuses_presets_and_cloning(design):
    message = error(speech(design, voice="ryan", instructions="A deep voice."), 400, "voice")
    assert "custom_voice" in message and "instructions" in message
    assert "base" in error(speech(design, ref_text="Hello."), 400, "ref_text")


def test_voice_design_names_the_description_when_it_is_too_long(design):
    error(speech(design, instructions="a" * 5000), 413, "instructions")  # past --max-input-chars
    long = " ".join(f"word{i}" for i in range(400))  # fits the characters, not the longest request
    assert "instructions" in error(speech(design, instructions=long), 413, "instructions")
    # A description that fits, with a frame budget that does not: the frames are named.
    error(speech(design, instructions="A deep voice.", max_new_tokens=510), 400, "max_new_tokens")
