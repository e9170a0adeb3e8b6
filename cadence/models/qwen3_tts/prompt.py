"""The CustomVoice prefill, exactly as the official wrapper lays it out.

A prompt is a list of rows; each row's embedding is the sum of a text-track embedding T(id) and a
codec-track embedding C(id), either of which may be absent. Decode step k adds `trailing_text[k]`
(or tts_pad once those run out) to the frame's code embeddings. Keeping the prompt as ids, not
embeddings, lets the engine store it compactly and batch the embedding lookups.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ...errors import InvalidRequestError
from .config import Qwen3TTSConfig
from .tokenizer import TextTokenizer


class TextLayout(StrEnum):
    # Whole text in the prompt (official CustomVoice default, non_streaming_mode=True).
    WHOLE = "whole"
    # First text token in the prompt, the rest fed one per frame (non_streaming_mode=False).
    STREAMING = "streaming"


@dataclass(frozen=True)
class Prompt:
    text_track: tuple[int | None, ...]
    codec_track: tuple[int | None, ...]
    trailing_text: tuple[int, ...]
    num_text_tokens: int

    def __post_init__(self):
        assert len(self.text_track) == len(self.codec_track)

    def __len__(self) -> int:
        return len(self.text_track)


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def resolve_language(cfg: Qwen3TTSConfig, language: str | None, speaker: str | None) -> int | None:
    """codec language id for the think prefix, or None for 'auto' (nothink prefix)."""
    lang = (language or "auto").lower()
    if lang != "auto" and (lang not in cfg.talker.codec_language_id or "dialect" in lang):
        raise InvalidRequestError(f"unknown language '{language}'", "language", cfg.languages)
    lang_id = None if lang == "auto" else cfg.talker.codec_language_id[lang]
    # Dialect speakers (Eric: Sichuan, Dylan: Beijing) speak their dialect for Chinese and auto.
    dialect = cfg.talker.spk_is_dialect.get(speaker) if speaker else False
    if lang in ("chinese", "auto") and isinstance(dialect, str):
        lang_id = cfg.talker.codec_language_id[dialect]
    return lang_id


def resolve_speaker(cfg: Qwen3TTSConfig, speaker: str | None) -> str:
    name = (speaker or "").lower()
    if name not in cfg.talker.spk_id:
        raise InvalidRequestError(f"unknown voice '{speaker}'", "voice", cfg.speakers)
    return name


def build_prompt(
    cfg: Qwen3TTSConfig,
    tokenizer: TextTokenizer,
    text: str,
    speaker: str,
    language: str | None = "auto",
    instruct: str | None = None,
    layout: TextLayout | str = TextLayout.WHOLE,
) -> Prompt:
    """The prefill rows and trailing text of one CustomVoice request. Raises InvalidRequestError."""
    layout = TextLayout(layout)
    if not text or not text.strip():
        raise InvalidRequestError("input text is empty", "input")
    speaker = resolve_speaker(cfg, speaker)
    lang_id = resolve_language(cfg, language, speaker)
    t = cfg.talker

    # Tokenise the whole chat string and slice by position, as the official code does: a text that
    # starts with a newline merges it into the role prefix, and parity needs the same ids.
    ids = tokenizer.encode(assistant_text(text))
    role, text_ids = ids[:3], ids[3:-5]
    if not text_ids:
        raise InvalidRequestError("input text has no tokens after the role prefix", "input")

    text_track: list[int | None] = []
    codec_track: list[int | None] = []

    def row(text_id: int | None, codec_id: int | None) -> None:
        text_track.append(text_id)
        codec_track.append(codec_id)

    if instruct and cfg.supports_instruct:
        for i in tokenizer.encode(instruct_text(instruct)):
            row(i, None)
    for i in role:
        row(i, None)

    if lang_id is None:
        codec = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
    else:
        codec = [t.codec_think_id, t.codec_think_bos_id, lang_id, t.codec_think_eos_id]
    codec += [t.spk_id[speaker], t.codec_pad_id]
    for j, c in enumerate(codec):
        row(cfg.tts_bos_token_id if j == len(codec) - 1 else cfg.tts_pad_token_id, c)

    if layout is TextLayout.WHOLE:
        for i in text_ids:
            row(i, t.codec_pad_id)
        row(cfg.tts_eos_token_id, t.codec_pad_id)
        row(cfg.tts_pad_token_id, t.codec_bos_id)
        trailing: tuple[int, ...] = ()
    else:
        row(text_ids[0], t.codec_bos_id)
        trailing = (*text_ids[1:], cfg.tts_eos_token_id)
    return Prompt(tuple(text_track), tuple(codec_track), trailing, len(text_ids))
