"""The prefill of Base and VoiceDesign row by row, and what each variant refuses (research §4.2).

Base puts the cloned voice's x-vector where a preset's id would be; in-context it adds the
reference transcript before the text and the reference frames after the codec bos. VoiceDesign has
no speaker row. A field the loaded variant cannot use is an error naming the field and the variant
that would take it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cadence.errors import InvalidRequestError
from cadence.models.qwen3_tts import Qwen3TTSConfig
from cadence.models.qwen3_tts.prompt import assistant_text, build_prompt, ref_text
from cadence.models.qwen3_tts.skeletons import as_variant
from cadence.models.qwen3_tts.tokenizer import TextTokenizer
from cadence.models.qwen3_tts.voice_prompt import VoiceClonePrompt

TTS_PAD, TTS_BOS, TTS_EOS = 151671, 151672, 151673
PAD, BOS = 2148, 2149
THINK, NOTHINK, THINK_BOS, THINK_EOS = 2154, 2155, 2156, 2157
ENGLISH, CHINESE = 2050, 2055
ROLE = [(151644, None), (77091, None), (198, None)]


def _config(skeleton, variant: str) -> Qwen3TTSConfig:
    import json

    files = {n: json.loads((skeleton / n).read_text()) for n in ("config.json", "speech_tokenizer/config.json")}
    return Qwen3TTSConfig.from_dicts(as_variant(files["config.json"], variant), files["speech_tokenizer/config.json"])


@pytest.fixture(scope="module")
def base(skeleton_06b) -> Qwen3TTSConfig:
    return _config(skeleton_06b, "base")


@pytest.fixture(scope="module")
def design(skeleton_17b) -> Qwen3TTSConfig:
    return _config(skeleton_17b, "voice_design")


@pytest.fixture(scope="module")
def custom(skeleton_06b) -> Qwen3TTSConfig:
    return Qwen3TTSConfig.from_dir(skeleton_06b)


@pytest.fixture(scope="module")
def tok(skeleton_06b) -> TextTokenizer:
    return TextTokenizer.from_dir(skeleton_06b)


def clone(frames: int = 3, ref: str | None = "Reference words.") -> VoiceClonePrompt:
    codes = torch.arange(frames * 16).reshape(frames, 16) % 2048
    return VoiceClonePrompt(torch.linspace(-1, 1, 1024), codes, ref)


def rows(p) -> list[tuple[int | None, int | None]]:
    return list(zip(p.text_track, p.codec_track, strict=True))


def ids(tok, text):
    return tok.encode(assistant_text(text))[3:-5]


PREFIX = [(TTS_PAD, THINK), (TTS_PAD, THINK_BOS), (TTS_PAD, ENGLISH), (TTS_PAD, THINK_EOS)]


def test_base_x_vector_only_whole(base, tok):
    text = ids(tok, "Hello world.")
    p = build_prompt(base, tok, "Hello world.", None, "english", layout="whole", clone=clone(), x_vector_only=True)
    expected = ROLE + PREFIX + [(TTS_PAD, None), (TTS_BOS, PAD)] + [(i, PAD) for i in text]
    expected += [(TTS_EOS, PAD), (TTS_PAD, BOS)]
    assert rows(p) == expected
    assert p.speaker_row == 7 and len(p.speaker_embedding) == 1024
    assert p.ref_row is None and p.ref_codes == () and p.trailing_text == ()


def test_base_in_context_streaming_text_longer_than_reference(base, tok):
    """Text and [bos, frames] side by side; the text left over trails (fed while decoding)."""
    v = clone(frames=3)
    text = ids(tok, "A sentence long enough to outlast the reference.")
    transcript = tok.encode(ref_text(v.ref_text))[3:-2]
    p = build_prompt(base, tok, "A sentence long enough to outlast the reference.", None, "english", clone=v)
    track = [*transcript, *text, TTS_EOS]
    head = ROLE + PREFIX + [(TTS_PAD, None), (TTS_BOS, PAD)]
    assert rows(p) == head + [(track[0], BOS)] + [(t, None) for t in track[1:4]]
    assert p.ref_row == len(head) + 1 and p.ref_codes == tuple(tuple(f) for f in v.ref_codes.tolist())
    assert p.trailing_text == tuple(track[4:])
    assert p.num_text_tokens == len(text)


def test_base_in_context_streaming_reference_longer_than_text(base, tok):
    """Frames beyond the text get tts_pad on the text track; nothing trails."""
    v = clone(frames=40)
    p = build_prompt(base, tok, "Hi.", None, "auto", clone=v)
    track = [*tok.encode(ref_text(v.ref_text))[3:-2], *ids(tok, "Hi."), TTS_EOS]
    tail = rows(p)[p.ref_row - 1 :]
    assert tail[0] == (track[0], BOS)
    assert [t for t, _ in tail[1:]] == track[1:] + [TTS_PAD] * (41 - len(track))
    assert p.trailing_text == ()
    assert rows(p)[3:6] == [(TTS_PAD, NOTHINK), (TTS_PAD, THINK_BOS), (TTS_PAD, THINK_EOS)]  # auto: no think


def test_base_in_context_whole(base, tok):
    """All text first against codec pad, then bos and the frames against tts_pad."""
    v = clone(frames=2)
    p = build_prompt(base, tok, "Hello.", None, "english", layout="whole", clone=v)
    track = [*tok.encode(ref_text(v.ref_text))[3:-2], *ids(tok, "Hello."), TTS_EOS]
    head = ROLE + PREFIX + [(TTS_PAD, None), (TTS_BOS, PAD)]
    assert rows(p) == head + [(t, PAD) for t in track] + [(TTS_PAD, BOS), (TTS_PAD, None), (TTS_PAD, None)]
    assert p.ref_row == len(p) - 2 and p.trailing_text == ()


def test_base_layout_defaults_to_streaming_others_to_whole(base, design, custom, tok):
    """The official entry points' defaults: generate_voice_clone streams the text, the others do not."""
    p = build_prompt(base, tok, "Hello there.", None, "english", clone=clone(), x_vector_only=True)
    assert p.trailing_text  # streaming: the text after its first token trails
    assert build_prompt(design, tok, "Hello there.", None, "english").trailing_text == ()
    assert build_prompt(custom, tok, "Hello there.", "ryan", "english").trailing_text == ()


def test_in_context_mode_follows_the_transcript(base, tok):
    with_text, without = clone(ref="Words."), clone(ref=None)
    assert build_prompt(base, tok, "Hi.", None, clone=with_text).ref_row is not None  # default: in-context
    assert build_prompt(base, tok, "Hi.", None, clone=without).ref_row is None  # default: x-vector only
    assert build_prompt(base, tok, "Hi.", None, clone=with_text, x_vector_only=True).ref_row is None
    with pytest.raises(InvalidRequestError, match="transcript") as e:
        build_prompt(base, tok, "Hi.", None, clone=without, x_vector_only=False)
    assert e.value.param == "ref_text"


def test_voice_design_has_no_speaker_row(design, tok):
    text = ids(tok, "Hello world.")
    p = build_prompt(design, tok, "Hello world.", None, "english", "A warm voice.")
    instruct = tok.encode("<|im_start|>user\nA warm voice.<|im_end|>\n")
    expected = [(i, None) for i in instruct] + ROLE + PREFIX + [(TTS_BOS, PAD)]
    expected += [(i, PAD) for i in text] + [(TTS_EOS, PAD), (TTS_PAD, BOS)]
    assert rows(p) == expected
    assert p.speaker_row is None
    # No description is allowed (as the official): the voice is then the model's choice.
    assert rows(build_prompt(design, tok, "Hello world.", None, "english")) == expected[len(instruct) :]


@pytest.mark.parametrize(
    ("variant", "kwargs", "param", "names"),
    [
        ("base", dict(speaker=None), "voice", ["reference audio", "saved voice"]),
        (
            "base",
            dict(speaker=None, instruct="Whisper.", clone=clone()),
            "instructions",
            ["custom_voice", "voice_design"],
        ),
        ("base", dict(speaker="ryan", clone=clone()), "voice", ["custom_voice"]),
        ("voice_design", dict(speaker="ryan"), "voice", ["custom_voice", "instructions"]),
        ("voice_design", dict(speaker=None, clone=clone()), "ref_audio", ["base"]),
        ("custom_voice", dict(speaker="ryan", clone=clone()), "ref_audio", ["base"]),
    ],
)
def test_fields_the_variant_cannot_use_are_refused(base, design, custom, tok, variant, kwargs, param, names):
    cfg = {"base": base, "voice_design": design, "custom_voice": custom}[variant]
    with pytest.raises(InvalidRequestError) as e:
        build_prompt(cfg, tok, "Hello.", **kwargs)
    assert e.value.param == param
    for name in names:
        assert name in str(e.value)


def safetensors_parts(path: Path) -> tuple[dict, bytes]:
    """A safetensors file as (its JSON header, its tensor bytes)."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + size]), raw[8 + size :]


def test_a_voice_prompt_is_arrays_and_saved_voices_still_load(tmp_path):
    """The cloned voice holds float32/int64 arrays (the API process needs no torch); its file is the
    safetensors file torch wrote before, byte for byte, and such a file loads as it was saved."""
    from safetensors.torch import save_file

    voice = clone()
    assert voice.x_vector.dtype == np.float32 and voice.ref_codes.dtype == np.int64
    x_vector, codes = torch.linspace(-1, 1, 1024), torch.arange(48).reshape(3, 16)
    meta = {"format": "cadence-voice-clone-prompt", "ref_text": "Reference words."}
    save_file({"x_vector": x_vector, "ref_codes": codes}, str(tmp_path / "torch.safetensors"), metadata=meta)
    voice.save(tmp_path / "numpy.safetensors")
    # The same header (as JSON: the library writes the metadata's keys in no fixed order) and the same
    # tensor bytes.
    assert safetensors_parts(tmp_path / "numpy.safetensors") == safetensors_parts(tmp_path / "torch.safetensors")
    loaded = VoiceClonePrompt.load(tmp_path / "torch.safetensors")
    assert np.array_equal(loaded.x_vector, x_vector.numpy()) and np.array_equal(loaded.ref_codes, codes.numpy())
    assert loaded.ref_text == "Reference words." and loaded.seconds == pytest.approx(0.24)
