"""The CustomVoice prefill: row-by-row layout (research/qwen3tts_model.md §4.2), request validation,
instruct handling, and the prefill embeddings against the official model's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cadence.errors import InvalidRequestError
from cadence.models.qwen3_tts import Qwen3TTS, Qwen3TTSConfig, TextLayout
from cadence.models.qwen3_tts.prompt import Prompt, assistant_text, build_prompt, instruct_text
from cadence.models.qwen3_tts.tokenizer import TextTokenizer

from official import Official

# Ids of the real checkpoint (research §1); the layout tests spell them out instead of reading them
# back from the config under test.
IM_START, ASSISTANT, NEWLINE = 151644, 77091, 198
TTS_PAD, TTS_BOS, TTS_EOS = 151671, 151672, 151673
PAD, BOS = 2148, 2149
THINK, NOTHINK, THINK_BOS, THINK_EOS = 2154, 2155, 2156, 2157
ENGLISH, CHINESE, SICHUAN, BEIJING = 2050, 2055, 2062, 2074
RYAN, ERIC, DYLAN = 3061, 2875, 2878
LANGUAGES = ["auto", "chinese", "english", "french", "german", "italian"]
LANGUAGES += ["japanese", "korean", "portuguese", "russian", "spanish"]
SPEAKERS = ["aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian"]


@pytest.fixture(scope="module")
def cfg(skeleton_06b) -> Qwen3TTSConfig:
    return Qwen3TTSConfig.from_dir(skeleton_06b)


@pytest.fixture(scope="module")
def tok(skeleton_06b) -> TextTokenizer:
    return TextTokenizer.from_dir(skeleton_06b)


def rows(p: Prompt) -> list[tuple[int | None, int | None]]:
    return list(zip(p.text_track, p.codec_track, strict=True))


def text_ids(tok: TextTokenizer, text: str) -> list[int]:
    ids = tok.encode(assistant_text(text))
    return ids[3:-5]


ROLE = [(IM_START, None), (ASSISTANT, None), (NEWLINE, None)]


def test_whole_layout_with_language(cfg, tok):
    ids = text_ids(tok, "Hello world, this is a test.")
    n = len(ids)
    assert n > 3
    p = build_prompt(cfg, tok, "Hello world, this is a test.", "ryan", "english", layout="whole")
    expected = ROLE + [
        (TTS_PAD, THINK),
        (TTS_PAD, THINK_BOS),
        (TTS_PAD, ENGLISH),
        (TTS_PAD, THINK_EOS),
        (TTS_PAD, RYAN),
        (TTS_BOS, PAD),
        *[(i, PAD) for i in ids],
        (TTS_EOS, PAD),
        (TTS_PAD, BOS),  # the logits here sample frame 0
    ]
    assert rows(p) == expected
    assert len(p) == n + 11
    assert p.num_text_tokens == n
    assert p.trailing_text == ()  # every decode step adds tts_pad


def test_whole_layout_auto(cfg, tok):
    ids = text_ids(tok, "Hello world.")
    p = build_prompt(cfg, tok, "Hello world.", "ryan", "auto", layout=TextLayout.WHOLE)
    expected = ROLE + [
        (TTS_PAD, NOTHINK),
        (TTS_PAD, THINK_BOS),
        (TTS_PAD, THINK_EOS),
        (TTS_PAD, RYAN),
        (TTS_BOS, PAD),
        *[(i, PAD) for i in ids],
        (TTS_EOS, PAD),
        (TTS_PAD, BOS),
    ]
    assert rows(p) == expected
    assert len(p) == len(ids) + 10


def test_streaming_layout_with_language(cfg, tok):
    text = "Hello world, this is a streaming test."
    ids = text_ids(tok, text)
    p = build_prompt(cfg, tok, text, "ryan", "english", layout="streaming")
    expected = ROLE + [
        (TTS_PAD, THINK),
        (TTS_PAD, THINK_BOS),
        (TTS_PAD, ENGLISH),
        (TTS_PAD, THINK_EOS),
        (TTS_PAD, RYAN),
        (TTS_BOS, PAD),
        (ids[0], BOS),  # first text token rides on the codec bos row
    ]
    assert rows(p) == expected
    assert len(p) == 10  # independent of the text length
    assert p.trailing_text == (*ids[1:], TTS_EOS)
    assert p.num_text_tokens == len(ids)
    # A longer text gives the same prefill length and a longer trailing text.
    longer = build_prompt(cfg, tok, text + " And some more words.", "ryan", "english", layout="streaming")
    assert len(longer) == 10
    assert len(longer.trailing_text) > len(p.trailing_text)


def test_streaming_layout_auto_and_single_token(cfg, tok):
    ids = text_ids(tok, "Hi")
    assert len(ids) == 1
    p = build_prompt(cfg, tok, "Hi", "ryan", "auto", layout="streaming")
    expected = ROLE + [
        (TTS_PAD, NOTHINK),
        (TTS_PAD, THINK_BOS),
        (TTS_PAD, THINK_EOS),
        (TTS_PAD, RYAN),
        (TTS_BOS, PAD),
        (ids[0], BOS),
    ]
    assert rows(p) == expected
    assert len(p) == 9
    assert p.trailing_text == (TTS_EOS,)


def _language_row(p: Prompt) -> tuple[int | None, ...]:
    """The codec ids of the think/nothink prefix (rows 3 .. before the speaker)."""
    return tuple(p.codec_track[3 : p.codec_track.index(PAD) - 1])


@pytest.mark.parametrize(
    ("speaker", "language", "prefix"),
    [
        ("eric", "chinese", (THINK, THINK_BOS, SICHUAN, THINK_EOS)),
        ("eric", "auto", (THINK, THINK_BOS, SICHUAN, THINK_EOS)),  # think prefix even for auto
        ("eric", "english", (THINK, THINK_BOS, ENGLISH, THINK_EOS)),
        ("dylan", "chinese", (THINK, THINK_BOS, BEIJING, THINK_EOS)),
        ("dylan", "auto", (THINK, THINK_BOS, BEIJING, THINK_EOS)),
        ("dylan", "english", (THINK, THINK_BOS, ENGLISH, THINK_EOS)),
        ("ryan", "chinese", (THINK, THINK_BOS, CHINESE, THINK_EOS)),
        ("ryan", "auto", (NOTHINK, THINK_BOS, THINK_EOS)),
        ("vivian", "chinese", (THINK, THINK_BOS, CHINESE, THINK_EOS)),
    ],
)
def test_dialect_rule(cfg, tok, speaker, language, prefix):
    p = build_prompt(cfg, tok, "你好", speaker, language)
    assert _language_row(p) == prefix
    assert p.codec_track[3 + len(prefix)] == cfg.talker.spk_id[speaker]


def test_speakers_and_languages_are_case_insensitive(cfg, tok):
    ref = build_prompt(cfg, tok, "Hello.", "eric", "chinese")
    for speaker, language in [("Eric", "Chinese"), ("ERIC", "CHINESE"), ("eRiC", "chinese")]:
        assert build_prompt(cfg, tok, "Hello.", speaker, language) == ref
    assert build_prompt(cfg, tok, "Hello.", "Ryan", "AUTO") == build_prompt(cfg, tok, "Hello.", "ryan", "auto")
    # None means auto, like the official wrapper's default.
    assert build_prompt(cfg, tok, "Hello.", "ryan", None) == build_prompt(cfg, tok, "Hello.", "ryan", "auto")
    assert build_prompt(cfg, tok, "Hello.", "Uncle_Fu", "English").codec_track[7] == 3010


def test_every_speaker_and_language_is_accepted(cfg, tok):
    assert cfg.speakers == SPEAKERS
    assert sorted(cfg.languages) == sorted(LANGUAGES)
    for speaker in SPEAKERS:
        p = build_prompt(cfg, tok, "Hello.", speaker, "english")
        assert cfg.talker.spk_id[speaker] in p.codec_track
    for language in LANGUAGES:
        build_prompt(cfg, tok, "Hello.", "ryan", language)


@pytest.mark.parametrize("text", ["", " ", "   \t ", "\n", "\r\n"])
def test_empty_text_is_refused(cfg, tok, text):
    with pytest.raises(InvalidRequestError) as e:
        build_prompt(cfg, tok, text, "ryan", "english")
    assert e.value.param == "input"


@pytest.mark.parametrize("speaker", ["bob", "", None, "ryan "])
def test_unknown_speaker_lists_valid_ones(cfg, tok, speaker):
    with pytest.raises(InvalidRequestError) as e:
        build_prompt(cfg, tok, "Hello.", speaker, "english")
    assert e.value.param == "voice"
    assert e.value.allowed == SPEAKERS
    assert "ryan" in str(e.value) and "uncle_fu" in str(e.value)


@pytest.mark.parametrize("language", ["klingon", "en", "sichuan_dialect", "beijing_dialect", "english "])
def test_unknown_language_lists_valid_ones(cfg, tok, language):
    # Dialects are not languages a request may name (official: get_supported_languages hides them).
    with pytest.raises(InvalidRequestError) as e:
        build_prompt(cfg, tok, "Hello.", "ryan", language)
    assert e.value.param == "language"
    assert sorted(e.value.allowed) == sorted(LANGUAGES)
    assert "english" in str(e.value) and "auto" in str(e.value)


def test_unknown_layout(tiny_model):
    with pytest.raises(InvalidRequestError) as e:
        tiny_model.prompt("Hello.", "ryan", "english", layout="chunked")
    assert e.value.param == "layout"
    assert e.value.allowed == ["whole", "streaming"]


def test_leading_newline_slices_like_the_official(cfg, tok):
    # "\n" + text merges with the role's newline into "\n\n" (271): the role prefix changes, the text
    # loses its newline; sliced by position exactly as the official code does.
    p = build_prompt(cfg, tok, "\nHello.", "ryan", "english")
    assert p.text_track[:3] == (IM_START, ASSISTANT, 271)
    assert p.num_text_tokens == len(tok.encode("Hello."))


# -- instruct ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_17b(skeleton_17b, tmp_path_factory) -> Path:
    from cadence.models.qwen3_tts.checkpoint import write_random_checkpoint

    return write_random_checkpoint(skeleton_17b, tmp_path_factory.mktemp("tiny17"), "tiny", seed=1, progress=False)


@pytest.fixture(scope="module")
def model_17b(tiny_17b) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(tiny_17b, "cpu", "fp32")


INSTRUCT = "Speak slowly, in a warm and calm voice."


def test_instruct_ignored_on_06b(tiny_model):
    assert tiny_model.config.tts_model_size == "0b6"
    assert tiny_model.instruct_ignored(INSTRUCT)
    assert not tiny_model.instruct_ignored(None)
    assert not tiny_model.instruct_ignored("")
    with_instruct = tiny_model.prompt("Hello.", "ryan", "english", instruct=INSTRUCT)
    assert with_instruct == tiny_model.prompt("Hello.", "ryan", "english")


@pytest.mark.parametrize("layout", ["whole", "streaming"])
def test_instruct_prepended_on_17b(model_17b, layout):
    assert model_17b.config.tts_model_size == "1b7"
    assert not model_17b.instruct_ignored(INSTRUCT)
    plain = model_17b.prompt("Hello.", "ryan", "english", layout=layout)
    p = model_17b.prompt("Hello.", "ryan", "english", instruct=INSTRUCT, layout=layout)
    prefix = model_17b.tokenizer.encode(instruct_text(INSTRUCT))
    assert prefix[:3] == [IM_START, 872, NEWLINE]  # <|im_start|>user\n
    assert prefix[-2:] == [151645, NEWLINE]
    k = len(prefix)
    assert list(p.text_track[:k]) == prefix
    assert p.codec_track[:k] == (None,) * k  # text track only
    assert rows(p)[k:] == rows(plain)
    assert p.trailing_text == plain.trailing_text


# -- embeddings against the official model ------------------------------------------------------------


class _Captured(Exception):
    """Raised by the stand-in for the official talker.generate once it has seen its inputs."""


def official_prefill(official: Official, text: str, speaker: str, language: str, streaming: bool, instruct=None):
    """(inputs_embeds [L,H], trailing_text_hidden [K,H], tts_pad_embed [H]) exactly as the official
    `generate_custom_voice` hands them to `talker.generate`, which is intercepted before it runs."""
    captured: dict = {}
    talker = official.model.talker
    original = talker.generate

    def intercept(**kwargs):
        captured.update(kwargs)
        raise _Captured

    talker.generate = intercept
    try:
        with pytest.raises(_Captured):
            official.wrapper.generate_custom_voice(
                text, speaker, language, instruct=instruct, non_streaming_mode=not streaming
            )
    finally:
        talker.generate = original
    assert captured["attention_mask"].all()  # one request: no left padding
    return captured["inputs_embeds"][0], captured["trailing_text_hidden"][0], captured["tts_pad_embed"].reshape(-1)


def cadence_prefill(model: Qwen3TTS, tok: TextTokenizer, text, speaker, language, streaming, instruct=None):
    p = build_prompt(model.config, tok, text, speaker, language, instruct, "streaming" if streaming else "whole")
    return p, model.prefill_embeddings(p), model.trailing_embeddings(p)


@pytest.fixture(scope="module")
def official_06b(tiny_checkpoint) -> Official:
    return Official(tiny_checkpoint)


@pytest.fixture(scope="module")
def mistral_tok(tiny_checkpoint) -> TextTokenizer:
    # The tiny checkpoint's config says transformers 4.57.3: the official processor uses Mistral's regex.
    return TextTokenizer.from_dir(tiny_checkpoint, "mistral")


PARITY_CASES = [
    # text, speaker, language, streaming layout
    ("Hello world, this is my new iPhone.", "ryan", "english", False),
    ("你好，世界！今天天气很好。", "vivian", "auto", False),
    ("Eric speaks Sichuanese for auto.", "eric", "auto", True),
    ("A streaming layout prompt with several tokens.", "aiden", "English", True),
    ("Hi", "dylan", "chinese", True),
]


@pytest.mark.parametrize(("text", "speaker", "language", "streaming"), PARITY_CASES)
def test_prefill_embeddings_equal_official(tiny_model, mistral_tok, official_06b, text, speaker, language, streaming):
    o_embeds, o_trailing, o_pad = official_prefill(official_06b, text, speaker, language, streaming)
    p, embeds, trailing = cadence_prefill(tiny_model, mistral_tok, text, speaker, language, streaming)
    assert embeds.shape == o_embeds.shape
    torch.testing.assert_close(embeds, o_embeds, rtol=1e-5, atol=1e-6)
    # cadence's trailing rows end with the tts_pad used once the text runs out.
    torch.testing.assert_close(trailing[-1], o_pad, rtol=1e-5, atol=1e-6)
    if streaming:
        assert len(p.trailing_text) == o_trailing.shape[0]
        torch.testing.assert_close(trailing[:-1], o_trailing, rtol=1e-5, atol=1e-6)
    else:
        assert p.trailing_text == ()
        torch.testing.assert_close(o_trailing, o_pad[None], rtol=0, atol=0)


def test_prefill_comparison_can_fail(tiny_model, mistral_tok, official_06b):
    """A different speaker changes exactly one row, and the comparison sees it."""
    o_embeds, _, _ = official_prefill(official_06b, "Hello.", "ryan", "english", False)
    _, embeds, _ = cadence_prefill(tiny_model, mistral_tok, "Hello.", "aiden", "english", False)
    differs = (embeds - o_embeds).abs().amax(-1) > 1e-3
    assert differs.tolist() == [i == 7 for i in range(len(embeds))]


@pytest.fixture(scope="module")
def official_17b(tiny_17b) -> Official:
    return Official(tiny_17b)


@pytest.mark.parametrize("streaming", [False, True])
def test_instruct_prefill_equals_official_17b(model_17b, official_17b, streaming):
    tok = model_17b.tokenizer  # no camelCase in these texts: both regexes give the same ids
    text = "Instructions come first, then the role."
    o_embeds, o_trailing, _ = official_prefill(official_17b, text, "serena", "english", streaming, INSTRUCT)
    p, embeds, trailing = cadence_prefill(model_17b, tok, text, "serena", "english", streaming, INSTRUCT)
    assert official_17b.ids(instruct_text(INSTRUCT)) == tok.encode(instruct_text(INSTRUCT))
    assert len(p) > len(cadence_prefill(model_17b, tok, text, "serena", "english", streaming)[0])
    torch.testing.assert_close(embeds, o_embeds, rtol=1e-5, atol=1e-6)
    if streaming:
        torch.testing.assert_close(trailing[:-1], o_trailing, rtol=1e-5, atol=1e-6)
