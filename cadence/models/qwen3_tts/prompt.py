"""The prefill of every 12 Hz variant, exactly as the official `generate` lays it out.

A prompt is a list of rows; each row's embedding is the sum of a text-track embedding T(id) and a
codec-track embedding C(id), either of which may be absent. Decode step k adds `trailing_text[k]`
(or tts_pad once those run out) to the frame's code embeddings. Keeping the prompt as ids, not
embeddings, lets the engine store it compactly and batch the embedding lookups.

The variants differ in the voice's row of the codec prefix and in what follows the text:
- CustomVoice: the preset speaker's id; 1.7B also takes an instruct prefix (style);
- VoiceDesign: no speaker row; the instruct prefix describes the voice;
- Base: a cloned voice's x-vector in the speaker row (a vector, not an id: `speaker_embedding`);
  in the in-context mode the reference transcript precedes the text, and the reference audio's
  frames (each the sum of its 16 code embeddings: `ref_codes`) follow the codec bos, so the model
  continues the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ...errors import InvalidRequestError
from ..interfaces import MoreTextNeeded
from .config import Qwen3TTSConfig
from .tokenizer import TextTokenizer
from .voice_prompt import VoiceClonePrompt


class TextLayout(StrEnum):
    # Whole text in the prompt (official CustomVoice default, non_streaming_mode=True).
    WHOLE = "whole"
    # First text token in the prompt, the rest fed one per frame (non_streaming_mode=False).
    STREAMING = "streaming"


# What each variant's official entry point uses when the caller does not say (non_streaming_mode).
DEFAULT_LAYOUT = {"custom_voice": TextLayout.WHOLE, "voice_design": TextLayout.WHOLE, "base": TextLayout.STREAMING}


@dataclass(frozen=True)
class Prompt:
    text_track: tuple[int | None, ...]
    codec_track: tuple[int | None, ...]  # None: no codec id (nothing, or one of the rows below)
    trailing_text: tuple[int, ...]
    num_text_tokens: int
    # Base: the row whose codec track is a cloned voice's x-vector, and the x-vector.
    speaker_row: int | None = None
    speaker_embedding: tuple[float, ...] = ()
    # Base, in-context: rows ref_row.. whose codec track is a reference frame (16 codes, summed).
    ref_row: int | None = None
    ref_codes: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self):
        assert len(self.text_track) == len(self.codec_track)
        assert self.ref_row is None or self.ref_row + len(self.ref_codes) <= len(self.text_track)

    def __len__(self) -> int:
        return len(self.text_track)


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def ref_text(text: str) -> str:
    """The reference transcript's chat string (Base, in-context); sliced [3:-2] like the official."""
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


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


def check_voice_fields(
    cfg: Qwen3TTSConfig, speaker: str | None, instruct: str | None, clone: VoiceClonePrompt | None
) -> None:
    """Refuse what the checkpoint's variant cannot use, naming the variant that could."""
    kind = cfg.tts_model_type
    if clone is not None and kind != "base":
        raise InvalidRequestError(
            f"a reference voice (cloning) needs a base checkpoint; this is a {kind} checkpoint", "ref_audio"
        )
    if kind == "base" and clone is None:
        raise InvalidRequestError(
            "a base checkpoint speaks only in a cloned voice: give reference audio or a saved voice", "voice"
        )
    if kind == "base" and instruct:
        raise InvalidRequestError(
            "a base checkpoint takes no instructions; style instructions need a 1.7B custom_voice checkpoint, "
            "voice descriptions a voice_design checkpoint",
            "instructions",
        )
    if kind in ("base", "voice_design") and speaker:
        what = "describe the voice in `instructions`" if kind == "voice_design" else "clone one"
        raise InvalidRequestError(
            f"a {kind} checkpoint has no preset speakers ({what}); preset speakers need a custom_voice checkpoint",
            "voice",
        )


class _Rows:
    """The prompt under construction: parallel text and codec tracks."""

    def __init__(self):
        self.text: list[int | None] = []
        self.codec: list[int | None] = []

    def add(self, text_id: int | None, codec_id: int | None) -> None:
        self.text.append(text_id)
        self.codec.append(codec_id)

    def __len__(self) -> int:
        return len(self.text)


@dataclass(frozen=True)
class TextTokens:
    """Text as a prompt takes it, tokenised as the official code does it: the whole chat string,
    sliced by position. `role` is the assistant prefix (a text that starts with a newline merges it
    into the prefix's last token, and parity needs the same ids); `ids` the text's own."""

    role: tuple[int, ...]
    ids: tuple[int, ...]


def tokenize_text(tokenizer: TextTokenizer, text: str) -> TextTokens:
    ids = tokenizer.encode(assistant_text(text))
    return TextTokens(tuple(ids[:3]), tuple(ids[3:-5]))


class IncrementalText:
    """Text that arrives in pieces (an LLM's deltas), tokenised exactly as the whole text will be.

    Byte-level BPE never merges across pre-tokens, and text that comes later can change only the
    last pre-token of what has arrived (it may grow, or split: "a  " + "b" is "a", " ", " b"), so
    every token before the last pre-token is final. `push` commits those as they become final, and
    `finish` the rest. Text that could still become an added token ("<|im_" before "end|>") is held
    back as well. The first tokens are found inside the chat string, so that leading newlines merge
    into the role prefix as they do for the whole text. A call costs the uncommitted text only.
    """

    def __init__(self, tokenizer: TextTokenizer):
        self.tokenizer = tokenizer
        self.pending = ""  # arrived, not committed
        self.role: tuple[int, ...] | None = None  # known once a text token is committed
        self.ids: list[int] = []  # committed
        self._added = tokenizer.added_tokens()
        self._prefix = assistant_text("").split("<|im_end|>")[0]  # "<|im_start|>assistant\n"

    @property
    def tokens(self) -> TextTokens:
        assert self.role is not None, "nothing committed yet"
        return TextTokens(self.role, tuple(self.ids))

    def push(self, delta: str) -> list[int]:
        """Add a delta; the ids it made final."""
        self.pending += delta
        return self._commit(self.pending[: self._added_token_cut()], final=False)

    def finish(self) -> list[int]:
        """The end of the text: the ids not committed yet."""
        return self._commit(self.pending, final=True)

    def _commit(self, text: str, final: bool) -> list[int]:
        if not text and self.role is not None:
            return []
        prefix = self._prefix if self.role is None else ""
        ids, words, spans = self.tokenizer.encode_words(prefix + text)
        first = 3 if self.role is None else 0  # the role prefix's tokens
        end = len(ids)
        if not final:
            last = words[-1]
            end = next((i for i in range(first, len(ids)) if words[i] == last), len(ids))
            if end == first:
                return []  # only the last pre-token: nothing is final yet
        if self.role is None:
            self.role = tuple(ids[:3])
        new = ids[first:end]
        used = spans[end][0] - len(prefix) if end < len(ids) else len(text)
        self.pending = self.pending[used:]
        self.ids += new
        return new

    def _added_token_cut(self) -> int:
        """Where text that may still become an added token begins (else the end)."""
        start = self.pending.rfind("<")
        if start < 0:
            return len(self.pending)
        tail = self.pending[start:]
        return start if any(len(t) > len(tail) and t.startswith(tail) for t in self._added) else len(self.pending)


def build_prompt(
    cfg: Qwen3TTSConfig,
    tokenizer: TextTokenizer,
    text: str | TextTokens,
    speaker: str | None,
    language: str | None = "auto",
    instruct: str | None = None,
    layout: TextLayout | str | None = None,
    clone: VoiceClonePrompt | None = None,
    x_vector_only: bool | None = None,
    text_open: bool = False,
) -> Prompt:
    """The prefill rows and trailing text of one request. Raises InvalidRequestError.

    speaker: a preset (custom_voice); clone: a cloned voice (base), used in-context unless
    `x_vector_only` (None: in-context when its transcript is known). layout None: the variant's
    official default (whole text for custom_voice and voice_design, streaming for base).

    `text` is a string, or its tokens when they are already known. `text_open`: more text
    follows (the streaming layout only): the trailing text ends without tts_eos, which is appended
    with the rest of the text once it has all arrived; MoreTextNeeded if the prefill needs text that
    has not arrived yet."""
    layout = TextLayout(layout) if layout is not None else DEFAULT_LAYOUT[cfg.tts_model_type]
    if text_open and layout is not TextLayout.STREAMING:
        raise ValueError("text that is still arriving needs the streaming layout")
    if isinstance(text, str) and (not text or not text.strip()):
        raise InvalidRequestError("input text is empty", "input")
    check_voice_fields(cfg, speaker, instruct, clone)
    speaker = resolve_speaker(cfg, speaker) if cfg.tts_model_type == "custom_voice" else None
    lang_id = resolve_language(cfg, language, speaker)
    t = cfg.talker
    in_context = False
    if clone is not None:
        try:
            in_context = clone.in_context(x_vector_only)
        except ValueError as e:
            raise InvalidRequestError(str(e), "ref_text") from None

    tokens = tokenize_text(tokenizer, text) if isinstance(text, str) else text
    role, ids = tokens.role, list(tokens.ids)
    if not ids and text_open:
        raise MoreTextNeeded("no text tokens yet")
    if not ids:
        raise InvalidRequestError("input text has no tokens after the role prefix", "input")

    rows = _Rows()
    if instruct and cfg.supports_instruct:
        for i in tokenizer.encode(instruct_text(instruct)):
            rows.add(i, None)
    for i in role:
        rows.add(i, None)

    voice = _codec_prefix(cfg, rows, lang_id, speaker, clone)
    end = () if text_open else (cfg.tts_eos_token_id,)
    trailing: tuple[int, ...] = ()
    if in_context:
        ref_ids = tokenizer.encode(ref_text(clone.ref_text))[3:-2]
        frames = tuple(tuple(int(c) for c in f) for f in clone.ref_codes.tolist())
        if text_open and len(ref_ids) + len(ids) < len(frames) + 1:
            raise MoreTextNeeded(f"the prefill needs {len(frames) + 1 - len(ref_ids)} text tokens")
        first, trailing = _in_context_rows(cfg, layout, rows, [*ref_ids, *ids, *end], len(frames))
        voice.update(ref_row=first, ref_codes=frames)
    elif layout is TextLayout.WHOLE:
        for i in ids:
            rows.add(i, t.codec_pad_id)
        rows.add(cfg.tts_eos_token_id, t.codec_pad_id)
        rows.add(cfg.tts_pad_token_id, t.codec_bos_id)
    else:
        rows.add(ids[0], t.codec_bos_id)
        trailing = (*ids[1:], *end)
    return Prompt(tuple(rows.text), tuple(rows.codec), trailing, len(ids), **voice)


def _codec_prefix(
    cfg: Qwen3TTSConfig, rows: _Rows, lang_id: int | None, speaker: str | None, clone: VoiceClonePrompt | None
) -> dict:
    """The think prefix (with the language, if one is set), the voice's row (a preset's id, or a
    cloned voice's x-vector) and codec pad, against tts_pad and finally tts_bos on the text track.
    Returns the Prompt fields of a cloned voice's row."""
    t = cfg.talker
    if lang_id is None:
        codec: list[int | None] = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
    else:
        codec = [t.codec_think_id, t.codec_think_bos_id, lang_id, t.codec_think_eos_id]
    voice: dict = {}
    if speaker is not None:
        codec.append(t.spk_id[speaker])
    elif clone is not None:
        voice = dict(speaker_row=len(rows) + len(codec), speaker_embedding=tuple(clone.x_vector.tolist()))
        codec.append(None)  # the x-vector's row
    codec.append(t.codec_pad_id)
    for j, c in enumerate(codec):
        rows.add(cfg.tts_bos_token_id if j == len(codec) - 1 else cfg.tts_pad_token_id, c)
    return voice


def _in_context_rows(
    cfg: Qwen3TTSConfig, layout: TextLayout, rows: _Rows, text_ids: list[int], frames: int
) -> tuple[int, tuple[int, ...]]:
    """Base in-context rows: transcript + text + tts_eos on the text track against codec bos and the
    reference frames. Whole layout: all the text first (against codec pad), then bos and the frames
    against tts_pad. Streaming layout: text and [bos, frames...] side by side from the same row; the
    longer runs on alone (leftover text is fed while decoding, leftover frames get tts_pad).
    Returns the first frame's row and the trailing text."""
    t = cfg.talker
    text = text_ids  # tts_eos last, unless more text follows
    if layout is TextLayout.WHOLE:
        for i in text:
            rows.add(i, t.codec_pad_id)
        rows.add(cfg.tts_pad_token_id, t.codec_bos_id)
        first = len(rows)
        for _ in range(frames):
            rows.add(cfg.tts_pad_token_id, None)
        return first, ()
    rows.add(text[0], t.codec_bos_id)
    first = len(rows)
    for k in range(1, frames + 1):
        rows.add(text[k] if k < len(text) else cfg.tts_pad_token_id, None)
    return first, tuple(text[frames + 1 :])
