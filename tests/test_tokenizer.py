"""cadence's TextTokenizer against the official processor, in both pre-tokenizer regex behaviours.

The official wrapper loads its processor with `AutoProcessor.from_pretrained(path,
fix_mistral_regex=True)`. For a local directory whose config.json says transformers_version 4.57.3,
transformers 4.57.3 swaps the Qwen2 pre-tokenizer regex for Mistral's; with 4.57.2 it keeps Qwen2's.
cadence's `regex="mistral"` must reproduce the first, the default `"qwen2"` the second.
"""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest
from conftest import set_transformers_version

from cadence.models.qwen3_tts.tokenizer import TextTokenizer

from official import import_qwen_tts

CORPUS = [
    "Hello, world! This is a test of the text to speech system.",
    "The quick brown fox jumps over the lazy dog's back; it's 3:45 p.m. (really).",
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "我叫通义千问，是阿里云的开源大模型。",
    "こんにちは、世界。今日はいい天気ですね。カタカナもひらがなも。",
    "안녕하세요, 세계! 오늘 날씨가 좋네요.",
    "Digits 0 1 2 3 and 1234567890 and 3.14159 and 1,000,000 and 2026-03-17 and 0x1F.",
    "A very long number: 98765432109876543210987654321.",
    "Punctuation: «quotes» “curly” ‘single’ — dash – en-dash… ellipsis!? ¿Qué? ¡Hola!",
    "Symbols: @#$%^&*()_+-=[]{}|\\;:'\",.<>/?`~ and € £ ¥ ©.",
    "Emoji: 😀 🎉 👍🏽 🇯🇵 and a family 👨\u200d👩\u200d👧\u200d👦 and 🏳️\u200d🌈.",
    "camelCase: iPhone McDonald YouTube getHTTPResponse XMLHttpRequest eBay PowerPoint macOS.",
    "\nLeading newline then text.",
    "\n\nTwo leading newlines.",
    "Windows line\r\nendings\r\nhere.",
    "Tabs\there\tand\t\tthere.",
    "Multiple   spaces    between     words.",
    "  Leading and trailing spaces  ",
    "Special strings <|im_end|> inside and <tts_pad> and <|endoftext|> too.",
    "Almost special <|im_end| and <tts_pad and tts_pad>.",
    "Accents: café naïve résumé Ångström Zürich São Paulo.",
    # Decomposed (NFD) forms: the NFC normaliser must compose them exactly like the official one.
    "Combining: cafe\u0301 nai\u0308ve A\u030angstro\u0308m.",
    "Mixed 中文 and English 和日本語 and 한국어 in one sentence.",
    "Ñandú, Øresund, Łódź, İstanbul, ß and ẞ.",
    "Русский текст: Привет, мир! Ёжик.",
    "Deutsch: Größenordnung, Fußgängerübergänge.",
    # Non-special added tokens (special=false in tokenizer_config.json) and spaced specials.
    "Tools <tool_call>{}</tool_call> and <think>hmm</think> and <|fim_prefix|>x<|fim_suffix|>.",
    "Spaced  <|im_end|>  special and <|im_start|>user\n.",
    # Unicode spaces, full-width forms and ligatures (NFC leaves them; NFKC would not).
    "NBSP\u00a0here, ideographic\u3000space, thin\u2009space, zero\u200bwidth.",
    "Full-width ＡＢＣ１２３ and ligatures ﬁ ﬂ.",
    "Scripts: مرحبا بالعالم שלום עולם สวัสดีครับ नमस्ते दुनिया",
    "Contractions: I'm, you're, he'll, she'd, it's, we've, THEY'LL, Don'T.",
    "Repeats: aaaaaaaaaaaaaaaaaaaa !!!!!!!!!! ........ ---------- 0000000000",
]

CAMEL_CASE = ["iPhone", "McDonald", "YouTube", "getHTTPResponse"]


def chat(text: str) -> str:
    """The string the official wrapper tokenises for every request."""
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def _checkpoint_dir(skeleton: Path, out: Path, version: str) -> Path:
    """Tokenizer files plus a config.json whose transformers_version decides the official regex."""
    out.mkdir(parents=True)
    for name in ("config.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(skeleton / name, out / name)
    set_transformers_version(out, version)
    return out


def _official_processor(path: Path):
    """Loaded exactly as `Qwen3TTSModel.from_pretrained` loads it (without building the model)."""
    qwen_tts = import_qwen_tts()
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor
    from transformers import AutoConfig, AutoModel, AutoProcessor

    assert qwen_tts.Qwen3TTSModel is not None
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig, exist_ok=True)
    AutoModel.register(Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, exist_ok=True)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor, exist_ok=True)
    return AutoProcessor.from_pretrained(str(path), fix_mistral_regex=True)


class Pair:
    """cadence's tokenizer and the official processor for one regex behaviour."""

    def __init__(self, cadence: TextTokenizer, official):
        self.cadence = cadence
        self.official = official

    def official_ids(self, text: str) -> list[int]:
        return self.official(text=text, return_tensors="pt")["input_ids"][0].tolist()


@pytest.fixture(scope="module")
def mistral(skeleton_06b, tmp_path_factory) -> Pair:
    path = _checkpoint_dir(skeleton_06b, tmp_path_factory.mktemp("tok") / "v4573", "4.57.3")
    return Pair(TextTokenizer.from_dir(path, "mistral"), _official_processor(path))


@pytest.fixture(scope="module")
def qwen2(skeleton_06b, tmp_path_factory) -> Pair:
    path = _checkpoint_dir(skeleton_06b, tmp_path_factory.mktemp("tok") / "v4572", "4.57.2")
    return Pair(TextTokenizer.from_dir(path), _official_processor(path))


@pytest.fixture(params=["qwen2", "mistral"])
def pair(request) -> Pair:
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("text", CORPUS + CAMEL_CASE, ids=range(len(CORPUS) + len(CAMEL_CASE)))
def test_ids_equal_official(pair, text):
    assert pair.cadence.encode(text) == pair.official_ids(text)


@pytest.mark.parametrize("text", CORPUS + CAMEL_CASE, ids=range(len(CORPUS) + len(CAMEL_CASE)))
def test_chat_string_ids_equal_official(pair, text):
    assert pair.cadence.encode(chat(text)) == pair.official_ids(chat(text))


def _fuzz_corpus(n: int, seed: int) -> list[str]:
    """Random strings mixing the character classes the two regexes treat differently (case runs,
    letters/marks, digits, punctuation, whitespace kinds, scripts, emoji, special-token strings)."""
    import random

    pools = [
        "abcxyzXYZ",
        " \t\n\r\u00a0\u3000\u2009",
        "0123456789",
        ".,!?;:'\"-()[]{}<>/\\|@#$%^&*_+=~`",
        "你好世界中文",
        "こんにちはカタカナ",
        "한국어",
        "éèàçñüößÅ\u0301\u0308",
        "😀🎉👍🏽\u200d👨👩",
        "ابجد",
        "ไทย",
        "हिन्दी",
        "ＡＢＣｆ",
        "\u200b\ufeff",
    ]
    words = ["<|im_end|>", "<tts_pad>", "<tool_call>", "</think>", "'s", "'LL", "Hello", "iPhone", "McDonald"]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(words) if rng.random() < 0.15 else rng.choice(rng.choice(pools)) for _ in range(30)]
        out.append("".join(parts[: rng.randint(1, 30)]))
    return out


def test_fuzzed_ids_equal_official(pair):
    mismatches = [t for t in _fuzz_corpus(400, seed=0) if pair.cadence.encode(t) != pair.official_ids(t)]
    assert mismatches == []


def test_regexes_differ_on_camel_case(qwen2, mistral):
    """The two behaviours are really different, so the comparisons above can fail."""
    # (getHTTPResponse is split at the same places by both: no BPE merge crosses those boundaries.)
    for word in ("iPhone", "McDonald", "YouTube"):
        text = f"I like {word}."
        assert qwen2.official_ids(text) != mistral.official_ids(text), word
        assert qwen2.cadence.encode(text) != mistral.cadence.encode(text), word
    # "iPhone": one token with the training regex, split as "i" + "Phone" by the Mistral one.
    assert len(qwen2.cadence.encode(" iPhone")) == 1
    assert [mistral.cadence.decode([i]) for i in mistral.cadence.encode(" iPhone")] == [" i", "Phone"]
    # The fuzzed corpus exercises the difference too.
    fuzz = _fuzz_corpus(400, seed=0)
    assert sum(qwen2.cadence.encode(t) != mistral.cadence.encode(t) for t in fuzz) > 40
    # Plain text and Chinese do not depend on the regex.
    for text in (CORPUS[0], CORPUS[2]):
        assert qwen2.cadence.encode(text) == mistral.cadence.encode(text)


def test_regex_option(skeleton_06b):
    with pytest.raises(ValueError, match="qwen2"):
        TextTokenizer.from_dir(skeleton_06b, "gpt2")  # type: ignore[arg-type]
    assert TextTokenizer.from_dir(skeleton_06b).regex == "qwen2"


def test_added_tokens(qwen2, skeleton_06b):
    tok = qwen2.cadence
    spec = json.loads((skeleton_06b / "tokenizer_config.json").read_text(encoding="utf-8"))["added_tokens_decoder"]
    assert sorted(int(i) for i in spec) == list(range(151643, 151676))
    for token_id, token in spec.items():
        assert tok.token_to_id(token["content"]) == int(token_id)
        assert tok.encode(token["content"]) == [int(token_id)]
    expected = {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<|audio_start|>": 151669,
        "<|audio_end|>": 151670,
        "<tts_pad>": 151671,
        "<tts_text_bos>": 151672,
        "<tts_text_eod>": 151673,
        "<tts_text_bos_single>": 151674,
        "<|audio_pad|>": 151675,
    }
    assert {k: tok.token_to_id(k) for k in expected} == expected
    assert tok.vocab_size == 151676
    # The official tokenizer agrees on the added-token table.
    assert {k: qwen2.official.tokenizer.convert_tokens_to_ids(k) for k in expected} == expected


def test_prompt_tokens(qwen2):
    tok = qwen2.cadence
    assert tok.encode("assistant") == [77091]
    assert tok.encode("user") == [872]
    assert tok.encode("\n") == [198]
    assert tok.encode("\n\n") == [271]
    ids = tok.encode(chat("Hello."))
    assert ids[:3] == [151644, 77091, 198]
    assert ids[-5:] == [151645, 198, 151644, 77091, 198]
    # A leading newline merges into the role prefix ("\n\n" = 271): why prompts slice the whole string.
    assert tok.encode(chat("\nHello."))[:3] == [151644, 77091, 271]


def test_special_strings_inside_text_are_specials(qwen2):
    ids = qwen2.cadence.encode("a<|im_end|>b<tts_pad>c")
    assert 151645 in ids and 151671 in ids
    assert len(ids) == 5


@pytest.mark.parametrize("text", CORPUS, ids=range(len(CORPUS)))
def test_decode_round_trip(pair, text):
    ids = pair.cadence.encode(text)
    # The normaliser is NFC, so the decoded text is the NFC form of the input.
    assert pair.cadence.decode(ids) == unicodedata.normalize("NFC", text)
    assert pair.cadence.decode(ids) == pair.official.tokenizer.decode(ids)


def test_nfc_normalisation(qwen2):
    composed, decomposed = "caf\u00e9 na\u00efve", "cafe\u0301 nai\u0308ve"
    assert qwen2.cadence.encode(decomposed) == qwen2.cadence.encode(composed)


def test_missing_tokenizer_files_are_named(skeleton_06b, tmp_path):
    shutil.copyfile(skeleton_06b / "vocab.json", tmp_path / "vocab.json")
    with pytest.raises(FileNotFoundError, match="merges.txt"):
        TextTokenizer.from_dir(tmp_path)
