"""Skeletons: a checkpoint's config and tokenizer files without its weights.

A random-weight model (`--dummy-weights`, `cadence checkpoint random`, the tests) needs only these
small files. cadence ships those of the released 12 Hz checkpoints (`architectures/`, with their
licence in `architectures/NOTICE.md`), so a released checkpoint's name gives its real architecture
and real tokenizer offline, without asking the Hugging Face hub:

    Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice   Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice
    Qwen/Qwen3-TTS-12Hz-0.6B-Base          Qwen/Qwen3-TTS-12Hz-1.7B-Base
                                           Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign

(the owner may be left out; any case). The family shares one text tokenizer and one speech
tokenizer, kept once; the Base and VoiceDesign configs are their CustomVoice sibling's turned into
that variant (`as_variant`), as released. The two large tokenizer files ship gzip-compressed
(`vocab.json.gz`, `merges.txt.gz`); they are read through gzip and written out decompressed. Any
other name is a local directory or a hub id whose small files are fetched.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...checkpoints import resolve_checkpoint
from .tokenizer import copy_plain, find_file, open_text

ARCHITECTURES = Path(__file__).resolve().parent / "architectures"
_SIZE_DIRS = {"0.6B": "Qwen3-TTS-12Hz-0.6B-CustomVoice", "1.7B": "Qwen3-TTS-12Hz-1.7B-CustomVoice"}
# The text tokenizer and the speech tokenizer's files: the same for every member of the family.
SHARED_FILES = (
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "speech_tokenizer/config.json",
    "speech_tokenizer/preprocessor_config.json",
)
SIZE_FILES = ("config.json", "generation_config.json")
# Shipped gzip-compressed (name + ".gz"): together 4.4 MB plain, 1.8 MB compressed.
COMPRESSED_FILES = ("vocab.json", "merges.txt")
# What a skeleton is read from: a hub download fetches only these.
SMALL_FILES = ("*.json", "*.txt", "speech_tokenizer/*.json")
VARIANTS = ("custom_voice", "base", "voice_design")
HUB_OWNER = "Qwen"


def as_variant(config: dict[str, Any], variant: str) -> dict[str, Any]:
    """config.json of another member of the family with the same talker: Base and VoiceDesign have
    no preset speakers (spk_id {}); Base adds the speaker encoder (x-vector of the talker's width).
    From a CustomVoice skeleton (the only configs public in full) this gives the released layout."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant '{variant}'; allowed: {', '.join(VARIANTS)}")
    out = copy.deepcopy(config)
    if out.get("tts_model_type") == variant:
        return out
    if variant == "custom_voice":
        raise ValueError("a custom_voice checkpoint needs its speaker table; start from a CustomVoice skeleton")
    out["talker_config"]["spk_id"] = {}
    out["talker_config"]["spk_is_dialect"] = {}
    out["tts_model_type"] = variant
    out.pop("speaker_encoder_config", None)
    if variant == "base":
        out["speaker_encoder_config"] = {"enc_dim": out["talker_config"]["hidden_size"], "sample_rate": 24000}
    return out


@dataclass(frozen=True)
class KnownCheckpoint:
    """A released checkpoint whose small files cadence ships."""

    name: str  # the hub repository's name, e.g. Qwen3-TTS-12Hz-1.7B-Base
    size: str  # "0.6B" or "1.7B"
    variant: str  # custom_voice, base or voice_design

    @property
    def hub_id(self) -> str:
        return f"{HUB_OWNER}/{self.name}"

    def files(self) -> dict[str, Path]:
        """Relative name -> shipped file (config.json is the CustomVoice sibling's: see `Skeleton.config`;
        the COMPRESSED_FILES are their .gz copies)."""
        shared = ARCHITECTURES / _SIZE_DIRS["0.6B"]
        own = ARCHITECTURES / _SIZE_DIRS[self.size]

        def stored(name: str) -> str:
            return f"{name}.gz" if name in COMPRESSED_FILES else name

        return {name: shared / stored(name) for name in SHARED_FILES} | {name: own / name for name in SIZE_FILES}


KNOWN_CHECKPOINTS = (
    KnownCheckpoint("Qwen3-TTS-12Hz-0.6B-CustomVoice", "0.6B", "custom_voice"),
    KnownCheckpoint("Qwen3-TTS-12Hz-0.6B-Base", "0.6B", "base"),
    KnownCheckpoint("Qwen3-TTS-12Hz-1.7B-CustomVoice", "1.7B", "custom_voice"),
    KnownCheckpoint("Qwen3-TTS-12Hz-1.7B-Base", "1.7B", "base"),
    KnownCheckpoint("Qwen3-TTS-12Hz-1.7B-VoiceDesign", "1.7B", "voice_design"),
)
DEFAULT_CHECKPOINT = KNOWN_CHECKPOINTS[0]


def known_checkpoint(model: str | os.PathLike) -> KnownCheckpoint | None:
    """The released checkpoint `model` names ("Qwen/NAME" or NAME, any case), unless a local
    directory of that name exists (a directory always wins)."""
    if Path(model).expanduser().is_dir():
        return None
    owner, _, name = str(model).rpartition("/")
    if owner.lower() not in ("", HUB_OWNER.lower()):
        return None
    return next((c for c in KNOWN_CHECKPOINTS if c.name.lower() == name.lower()), None)


@dataclass(frozen=True)
class Skeleton:
    """A checkpoint's small files: relative name -> file on disk (only those that exist)."""

    files: dict[str, Path]
    source: str  # where they came from, for messages
    variant: str | None = None  # turn config.json into this member of the family (known Base/VoiceDesign)

    def has(self, name: str) -> bool:
        return name in self.files

    def read(self, name: str) -> dict[str, Any]:
        with open_text(self.files[name]) as f:
            return json.load(f)

    def config(self, variant: str | None = None) -> dict[str, Any]:
        """config.json, as `variant` (default: the skeleton's own)."""
        config = self.read("config.json")
        variant = variant or self.variant
        return as_variant(config, variant) if variant else config

    def tokenizer_dir(self) -> Path | None:
        """The directory holding vocab.json, merges.txt and tokenizer_config.json, if one does."""
        names = ("vocab.json", "merges.txt", "tokenizer_config.json")
        dirs = {self.files[n].parent for n in names if n in self.files}
        return dirs.pop() if len(dirs) == 1 and all(n in self.files for n in names) else None

    def copy(self, name: str, target: Path) -> None:
        """Write the file `name` to `target`, decompressed if it is stored compressed."""
        copy_plain(self.files[name], target)

    def write(self, out: str | Path, variant: str | None = None) -> Path:
        """The files as a checkpoint directory without weights (config.json as `variant`), every one
        of them plain, as a released checkpoint has them."""
        out = Path(out)
        (out / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
        for name in self.files:
            if name != "config.json":
                self.copy(name, out / name)
        text = json.dumps(self.config(variant), indent=2, ensure_ascii=False) + "\n"
        (out / "config.json").write_text(text, encoding="utf-8")
        return out


def shipped_skeleton(checkpoint: KnownCheckpoint = DEFAULT_CHECKPOINT) -> Skeleton:
    files = checkpoint.files()
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:  # a broken installation, not a user error
        raise FileNotFoundError(f"cadence's shipped config files are missing: {', '.join(missing)}; reinstall cadence")
    return Skeleton(files, f"{checkpoint.hub_id} (config files shipped with cadence)", checkpoint.variant)


def directory_skeleton(path: Path) -> Skeleton:
    names = [*SIZE_FILES, *SHARED_FILES, "preprocessor_config.json", "speech_tokenizer/configuration.json"]
    found = {n: find_file(path, n) for n in names}
    return Skeleton({n: f for n, f in found.items() if f is not None}, str(path))


def resolve_skeleton(model: str | os.PathLike) -> Skeleton:
    """The small files of `model`: a local directory; a released checkpoint's name (shipped, offline);
    else a hub id, of which only the small files are fetched. Raises CheckpointError."""
    if (known := known_checkpoint(model)) is not None:
        return shipped_skeleton(known)
    return directory_skeleton(resolve_checkpoint(model, SMALL_FILES))
