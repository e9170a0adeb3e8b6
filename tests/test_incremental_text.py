"""IncrementalText: text that arrives in pieces is tokenised exactly as the whole text is, however it
is split, and what it commits never changes (the continuous WebSocket input relies on both)."""

from __future__ import annotations

import random

import pytest

from cadence.models.qwen3_tts.prompt import IncrementalText, tokenize_text
from cadence.models.qwen3_tts.tokenizer import TextTokenizer

PIECES = [
    "Hello", " world", ",", ".", "!", "?", " ", "  ", "\n", "\n\n", "\t", "It", "'s", "'", "s", " don't", "3", ".14",
    "1999", "你好", "，", "世界。", "こんにちは", "안녕", "café", "e\u0301", "😀", "🇫🇷", " https://example.com/a?b=1",
    "iPhone", "ABC", "def", "<", "<|im_", "end|>", "<|im_end|>", "a < b", "—", "…", "\"quoted\"", "(x)", "Dr.",
]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint) -> TextTokenizer:
    return TextTokenizer.from_dir(tiny_checkpoint)


def split(text: str, rng: random.Random) -> list[str]:
    mode = rng.choice(["whole", "chars", "words", "random"])
    if mode == "whole":
        return [text]
    if mode == "chars":
        return list(text)
    if mode == "words":
        out, word = [], ""
        for ch in text:
            if ch.isspace() and word:
                out.append(word)
                word = ""
            word += ch
        return [*out, word] if word else out
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 12))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def test_pieces_tokenise_as_the_whole(tokenizer):
    rng = random.Random(0)
    for trial in range(1500):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 25)))
        if rng.random() < 0.2:
            text = "\n" * rng.randint(1, 3) + " " * rng.randint(0, 2) + text  # newlines that join the role prefix
        whole = tokenize_text(tokenizer, text)
        incremental = IncrementalText(tokenizer)
        committed: list[int] = []
        for delta in split(text, rng):
            before = list(incremental.ids)
            committed += incremental.push(delta)
            assert incremental.ids[: len(before)] == before  # nothing committed changes
            assert whole.ids[: len(committed)] == tuple(committed), (trial, text)
        committed += incremental.finish()
        assert tuple(committed) == whole.ids and incremental.role == whole.role, (trial, text)


def test_tokens_commit_while_text_arrives(tokenizer):
    """Latency: a word is committed as soon as the next one begins."""
    incremental = IncrementalText(tokenizer)
    assert incremental.push("Hello") == []  # the word may go on
    first = incremental.push(" wor")
    assert first and tokenizer.decode(first) == "Hello"
    assert tokenizer.decode(incremental.push("ld, how")) == " world,"
    assert tokenizer.decode(incremental.finish()) == " how"


def test_a_possible_special_token_waits(tokenizer):
    incremental = IncrementalText(tokenizer)
    incremental.push("Say <|im_")
    assert tokenizer.decode(incremental.ids) == "Say"
    incremental.push("end|> now")
    rest = incremental.finish()
    assert tuple(incremental.ids) == tokenize_text(tokenizer, "Say <|im_end|> now").ids and rest
