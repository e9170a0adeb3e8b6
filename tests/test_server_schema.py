"""Request validation in the API process, on the weightless frontends of both model sizes."""

from __future__ import annotations

import msgspec
import pytest

from cadence.models.qwen3_tts.frontend import Qwen3TTSFrontend
from cadence.server.errors import APIError
from cadence.server.schema import Limits, SpeechBody, decode_json, validate_speech
from cadence.server.voices import VoiceTable, parse_voice_map

LIMITS = Limits(max_input_chars=100, max_input_tokens=20, model_names=("served", "tts-1"))


@pytest.fixture(scope="module")
def frontends(skeleton_06b, skeleton_17b) -> dict[str, Qwen3TTSFrontend]:
    return {
        "0.6b": Qwen3TTSFrontend.from_pretrained(skeleton_06b),
        "1.7b": Qwen3TTSFrontend.from_pretrained(skeleton_17b),
    }


def job(frontend: Qwen3TTSFrontend, **fields):
    body = msgspec.json.decode(
        msgspec.json.encode({"input": "Hello there.", "voice": "ryan", **fields}), type=SpeechBody
    )
    return validate_speech(body, frontend, VoiceTable(frontend.config.speakers), LIMITS)


def test_instructions_reach_the_17b_prompt_and_are_dropped_on_06b(frontends):
    small, large = frontends["0.6b"], frontends["1.7b"]
    plain, styled = job(large), job(large, instructions="Speak very slowly.")
    assert not styled.instructions_ignored
    assert len(styled.request.prompt) > len(plain.request.prompt)  # the instruction rows come first
    plain, styled = job(small), job(small, instructions="Speak very slowly.")
    assert styled.instructions_ignored and not plain.instructions_ignored
    assert styled.request.prompt == plain.request.prompt


def test_defaults_extensions_and_unknown_fields(frontends):
    j = job(frontends["0.6b"], some_future_field={"x": 1}, seed=3, temperature=0.5, top_k=10, max_new_tokens=7)
    assert (j.response_format, j.stream_format, j.stream, j.speed) == ("mp3", "audio", True, 1.0)
    p = j.request.params
    assert (p.seed, p.temperature, p.top_k, p.max_new_tokens) == (3, 0.5, 10, 7)
    sse = job(frontends["0.6b"], stream_format="SSE", stream=False, response_format="PCM")
    assert (sse.stream_format, sse.stream, sse.response_format) == ("sse", True, "pcm")  # events always stream


def test_limits_are_413(frontends):
    with pytest.raises(APIError) as chars:
        job(frontends["0.6b"], input="a" * 101)
    assert (chars.value.status, chars.value.param) == (413, "input")
    with pytest.raises(APIError) as tokens:  # under 100 characters, over 20 tokens
        job(frontends["0.6b"], input="1234567890" * 3)  # Qwen2 splits digits: one token each
    assert (tokens.value.status, tokens.value.param) == (413, "input") and "tokens" in tokens.value.message


def test_model_names(frontends):
    assert job(frontends["0.6b"], model="served").request
    assert job(frontends["0.6b"], model="tts-1").request
    with pytest.raises(APIError) as unknown:
        job(frontends["0.6b"], model="other")
    assert (unknown.value.status, unknown.value.code) == (404, "model_not_found")


def test_decode_json_names_the_field():
    with pytest.raises(APIError) as wrong:
        decode_json(b'{"input": "x", "voice": "ryan", "top_k": 1.5}', SpeechBody)
    assert (wrong.value.status, wrong.value.param, wrong.value.code) == (400, "top_k", "invalid_type")


def test_voice_map_parsing(tmp_path):
    assert parse_voice_map("Alloy=Aiden, narrator=uncle_fu") == {"alloy": "aiden", "narrator": "uncle_fu"}
    (tmp_path / "v.json").write_text('{"Robot": "eric"}')
    assert parse_voice_map(str(tmp_path / "v.json")) == {"robot": "eric"}
    with pytest.raises(ValueError, match="not name=preset"):
        parse_voice_map("alloy")
    table = VoiceTable(["ryan", "serena"], {"narrator": "serena"})
    assert table.resolve("NARRATOR") == "serena" and table.resolve("nova") == "serena"
    assert "alloy" in table.aliases and "onyx" not in table.aliases  # uncle_fu is not in this checkpoint


def test_the_sampling_fields_are_declared_once():
    """The HTTP body and the WebSocket session extend SamplingOverrides (their JSON stays flat), and
    SynthesisRequest takes its fields by name."""
    import dataclasses

    from cadence.models.qwen3_tts.frontend import SynthesisRequest
    from cadence.sampling import SamplingOverrides
    from cadence.server.websocket import SessionConfig

    names = set(SamplingOverrides.__struct_fields__)
    assert {"seed", "temperature", "top_k", "subtalker_dosample", "max_new_tokens"} <= names
    assert issubclass(SpeechBody, SamplingOverrides) and issubclass(SessionConfig, SamplingOverrides)
    assert names <= {f.name for f in dataclasses.fields(SynthesisRequest)}
    body = decode_json(b'{"input": "x", "voice": "ryan", "subtalker_top_k": 7, "seed": 2}', SpeechBody)
    assert body.overrides() == {**dict.fromkeys(names), "subtalker_top_k": 7, "seed": 2}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("seed", -1, "seed must be an integer from 0 to 9223372036854775807, got -1"),
        ("top_k", 100_001, "top_k must be an integer from 0 to 100000, got 100001"),
        ("subtalker_top_k", -2, "subtalker_top_k must be an integer from 0 to 100000, got -2"),
        ("max_new_tokens", 12801, "max_new_tokens must be an integer from 1 to 12800, got 12801"),
        ("temperature", -1, "temperature must be 0 (greedy) or in (0, 10], got -1.0"),
    ],
)
def test_a_sampling_field_out_of_range_is_a_400_naming_it(frontends, field, value, message):
    with pytest.raises(APIError) as bad:
        job(frontends["0.6b"], **{field: value})
    assert (bad.value.status, bad.value.param, bad.value.code, bad.value.message) == (
        400,
        field,
        "invalid_value",
        message,
    )
