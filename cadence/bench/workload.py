"""What to say: utterance sets (Seed-TTS eval lists, text files, the built-in samples) and their lengths.

`--fixed-frames` exists for servers running random weights: such a model rarely emits the end-of-speech
code, so each request is told exactly how many 80 ms frames to produce (`max_new_tokens` + `ignore_eos`).
In `auto` mode that number follows the text's length, as a trained model's output would.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .defaults import LANGUAGE_NAMES
from .samples import SAMPLES

FRAME_RATE_HZ = 12.5  # Qwen3-TTS 12 Hz codec: one frame per 80 ms of audio

# Typical read-speech rates, in characters of each script per second of audio. Alphabetic text is
# counted per character (spaces and punctuation included) rather than per word because word length
# varies across languages far more than characters per second do: English runs ~13-15 chars/s (about
# 150-170 words/min), so 14 chars/s gives 12.5/14 = 0.89 frames/char. Mandarin is ~4-5 syllables
# (= Han characters) per second, Japanese ~7-8 morae (≈ kana) per second, Korean ~5-6 syllable blocks.
CHARS_PER_SECOND = {"alphabetic": 14.0, "han": 4.5, "kana": 7.5, "hangul": 5.5}
EDGE_SILENCE_FRAMES = 3  # ~240 ms of leading and trailing silence a trained model usually adds
LENGTH_JITTER_SIGMA = 0.15  # log-normal spread: the same text is read faster or slower by ~±15%
MAX_AUTO_FRAMES = 2048  # the usual max_new_tokens cap of Qwen3-TTS servers (164 s of audio)


class WorkloadError(ValueError):
    """A dataset path or option that cannot be turned into utterances; the message says what was expected."""


@dataclass(frozen=True)
class Utterance:
    id: str
    text: str
    language: str | None  # ISO 639-1 code, or None when the source does not say
    prompt_text: str | None = None  # Seed-TTS reference transcript (for voice-cloning servers; unused for presets)
    prompt_wav: str | None = None  # Seed-TTS reference audio path, as written in meta.lst


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a trial: which utterance, and how many frames to force (None: let the model stop)."""

    index: int
    utterance: Utterance
    max_new_tokens: int | None


# --- sources --------------------------------------------------------------------------------------


def builtin_samples(languages: list[str] | None = None) -> list[Utterance]:
    """The built-in multilingual set, optionally only some languages (ISO codes)."""
    if languages:
        unknown = sorted(set(languages) - set(LANGUAGE_NAMES))
        if unknown:
            raise WorkloadError(f"unknown language code(s) {unknown}; the built-in set has {sorted(LANGUAGE_NAMES)}")
    out, counts = [], {}
    for lang, text in SAMPLES:
        if languages and lang not in languages:
            continue
        counts[lang] = counts.get(lang, 0) + 1
        out.append(Utterance(f"builtin-{lang}-{counts[lang]}", text, lang))
    return out


def load_seed_tts(path: str | Path, language: str | None = None) -> list[Utterance]:
    """Rows `utt_id|prompt_text|prompt_wav_path|target_text` of a Seed-TTS eval `meta.lst`.

    `path` is the meta.lst file or the directory holding it (e.g. seedtts_testset/en). The language is
    `language` if given, else the directory's name when it is `en` or `zh`, else unknown.
    """
    path = Path(path)
    meta = path / "meta.lst" if path.is_dir() else path
    if not meta.is_file():
        raise WorkloadError(
            f"Seed-TTS list not found: {meta} (expected a meta.lst file, or a directory such as "
            "seedtts_testset/en that contains one, with rows utt_id|prompt_text|prompt_wav|text)"
        )
    if language is None and meta.parent.name in ("en", "zh"):
        language = meta.parent.name
    out = []
    for number, line in enumerate(meta.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < 4 or not fields[3].strip():
            raise WorkloadError(f"{meta}:{number}: expected utt_id|prompt_text|prompt_wav|text, got {line[:80]!r}")
        out.append(Utterance(fields[0], fields[3].strip(), language, fields[1], fields[2]))
    if not out:
        raise WorkloadError(f"{meta} holds no rows")
    return out


def load_text_file(path: str | Path, language: str | None = None) -> list[Utterance]:
    """One utterance per non-empty line of a UTF-8 text file."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"text file not found: {path} (expected a UTF-8 file with one utterance per line)")
    lines = [(n, line.strip()) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)]
    out = [Utterance(f"line-{n}", text, language) for n, text in lines if text]
    if not out:
        raise WorkloadError(f"{path} holds no non-empty lines")
    return out


def load_workload(
    kind: str,
    path: str | Path | None = None,
    language: str | None = None,
    languages: list[str] | None = None,
    limit: int | None = None,
) -> list[Utterance]:
    """The utterances of a run: kind is `builtin`, `seed-tts` or `text`; `limit` keeps the first N."""
    if kind == "builtin":
        utterances = builtin_samples(languages)
    elif kind in ("seed-tts", "text"):
        if path is None:
            what = "a meta.lst file or its directory" if kind == "seed-tts" else "a text file, one utterance per line"
            raise WorkloadError(f"--dataset {kind} needs --dataset-path ({what})")
        loader = load_seed_tts if kind == "seed-tts" else load_text_file
        utterances = loader(path, language)
    else:
        raise WorkloadError(f"unknown dataset kind {kind!r}; expected builtin, seed-tts or text")
    if limit is not None:
        if limit < 1:
            raise WorkloadError(f"--limit must be at least 1, got {limit}")
        utterances = utterances[:limit]
    return utterances


# --- lengths --------------------------------------------------------------------------------------


def script_of(char: str) -> str | None:
    """Which speaking-rate class a character belongs to; None for control and format characters."""
    if char.isspace():
        return "alphabetic"  # spaces are part of the chars/s figure for alphabetic text
    name = unicodedata.name(char, "")
    if name.startswith("CJK UNIFIED IDEOGRAPH") or name.startswith("CJK COMPATIBILITY IDEOGRAPH"):
        return "han"
    if name.startswith(("HIRAGANA", "KATAKANA")):
        return "kana"
    if name.startswith("HANGUL"):
        return "hangul"
    if unicodedata.category(char).startswith("C"):
        return None  # control and format characters
    return "alphabetic"


def expected_frames(text: str) -> float:
    """Frames a trained model would produce for `text` at a typical reading rate."""
    seconds = sum(1.0 / CHARS_PER_SECOND[s] for s in map(script_of, text.strip()) if s is not None)
    return EDGE_SILENCE_FRAMES + seconds * FRAME_RATE_HZ


def draw_frames(text: str, rng: np.random.Generator) -> int:
    """A seeded random frame count around `expected_frames(text)` (log-normal, ~±15%)."""
    frames = expected_frames(text) * rng.lognormal(0.0, LENGTH_JITTER_SIGMA)
    return int(min(MAX_AUTO_FRAMES, max(1, round(frames))))


def parse_fixed_frames(value: str) -> int | str:
    """`--fixed-frames` argument: `auto` (follow the text) or a positive number of frames."""
    if value == "auto":
        return "auto"
    try:
        frames = int(value)
    except ValueError:
        frames = 0
    if frames < 1:
        raise WorkloadError(f"--fixed-frames takes 'auto' or a positive whole number of 80 ms frames, got {value!r}")
    return frames


def plan_request(utterances: list[Utterance], index: int, seed: int, fixed_frames: int | str | None) -> PlannedRequest:
    """Request `index` of a trial: utterances in order (cycling), frames drawn from (seed, index).

    Seeding by index rather than by draw order keeps a request's length the same whatever order the
    load generator happens to send requests in.
    """
    utterance = utterances[index % len(utterances)]
    if fixed_frames is None:
        frames = None
    elif fixed_frames == "auto":
        frames = draw_frames(utterance.text, np.random.default_rng([seed, index]))
    else:
        frames = int(fixed_frames)
    return PlannedRequest(index, utterance, frames)
