"""Saved voices (models that clone, such as Qwen3-TTS Base): cloned voices kept on disk with their
precomputed prompt.

A saved voice is what the voice encoder made of its reference audio (Qwen3-TTS: x-vector and codes)
plus its transcript, so a request that names it pays no audio decoding and no encoder pass. On disk,
one directory per voice:

    <voices dir>/<id>/voice.json          id, name, created_at, transcript, consent, seconds, width
    <voices dir>/<id>/prompt.safetensors  the cloned voice as the model family writes it (ClonedVoice.save)

The reference audio itself is not kept. A voice is written to a temporary directory and renamed
into place, so a crash never leaves half a voice; both files are readable by the server's user only
(0600, in a 0700 directory): a transcript and a consent record are personal data. Voices whose
width does not fit the loaded model's (saved with another model size) are skipped with a warning,
not deleted.

A name has one form, used when it is saved, looked up and deleted: Unicode NFKC without surrounding
whitespace, compared case-insensitively. A name that is not already in that form is refused at
creation (a trailing space or newline would otherwise make a voice that cannot be named again).

Several servers may share one directory (Ray Serve replicas on a shared volume): before answering,
the library looks at the directory's modification time and, when it changed, takes in the voices
others saved and forgets those others deleted. One stat per lookup; names are unique per server
(two servers saving the same new name at the same moment both succeed).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import unicodedata
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..models.interfaces import ClonedVoice

log = logging.getLogger("cadence.server")

NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9 _.\-]{0,62}[A-Za-z0-9_.\-])?")  # fullmatch: 1 to 64
ID_PREFIX = "voice_"
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


class VoiceExistsError(ValueError):
    """A saved voice of that name exists already."""


@dataclass(frozen=True)
class SavedVoice:
    id: str
    name: str
    created_at: int
    consent: str  # what the client sent as its consent (a flag, or a consent recording's id)
    prompt: ClonedVoice

    def card(self) -> dict:
        """The API's description: OpenAI's voice object plus what cloning with it can do."""
        modes = ["in_context", "x_vector_only"] if self.prompt.ref_text else ["x_vector_only"]
        return {
            "id": self.id,
            "object": "audio.voice",
            "type": "audio_sample",
            "name": self.name,
            "created_at": self.created_at,
            "ref_text": self.prompt.ref_text,
            "seconds": round(self.prompt.seconds, 2),
            "modes": modes,
        }


class VoiceLibrary:
    """`width`: the loaded model's (ClonedVoice.width); `load_voice`: a file ClonedVoice.save wrote
    -> the voice (the model's VoiceEncoder.load_voice)."""

    def __init__(
        self,
        directory: str | Path,
        width: int,
        load_voice: Callable[[Path], ClonedVoice],
        max_voices: int = 1000,
    ):
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        self.width = width
        self.load_voice = load_voice
        self.max_voices = max_voices
        self._voices: dict[str, SavedVoice] = {}
        self._skipped: set[str] = set()  # ids on disk that cannot be used here (warned about once)
        self._seen_mtime: int | None = None
        self._sync()
        if self._voices:
            log.info("%d saved voices in %s", len(self._voices), self.directory)

    def _sync(self) -> None:
        """Match the directory when it changed since the last look (voices other servers saved or
        deleted; see the module docstring)."""
        try:
            mtime = self.directory.stat().st_mtime_ns
        except OSError:
            return
        if mtime == self._seen_mtime:
            return
        self._seen_mtime = mtime
        on_disk = {p.parent.name for p in self.directory.glob(f"{ID_PREFIX}*/voice.json")}
        for gone in self._voices.keys() - on_disk:
            del self._voices[gone]
        for vid in sorted(on_disk - self._voices.keys() - self._skipped):
            voice = self._read(self.directory / vid)
            if voice is None:
                self._skipped.add(vid)
            else:
                self._voices[vid] = voice

    def _read(self, folder: Path) -> SavedVoice | None:
        try:
            info = json.loads((folder / "voice.json").read_text(encoding="utf-8"))
            prompt = self.load_voice(folder / "prompt.safetensors")
        except (OSError, ValueError, KeyError) as e:
            log.warning("skipping saved voice %s: %s", folder.name, e)
            return None
        if prompt.width != self.width:
            log.warning(
                "skipping saved voice %s (%s): made with a %d-wide model, this one is %d wide",
                info.get("id"), info.get("name"), prompt.width, self.width,
            )  # fmt: skip
            return None
        return SavedVoice(info["id"], info["name"], int(info["created_at"]), info.get("consent", ""), prompt)

    def list(self) -> list[SavedVoice]:
        self._sync()
        return sorted(self._voices.values(), key=lambda v: (v.created_at, v.id))

    def get(self, key: str) -> SavedVoice | None:
        """By id, or by name (case-insensitive, in the one normal form)."""
        self._sync()
        key = normalize_name(key)
        if key in self._voices:
            return self._voices[key]
        folded = key.casefold()
        return next((v for v in self._voices.values() if normalize_name(v.name).casefold() == folded), None)

    def names(self) -> list[str]:
        return [v.name for v in self.list()]

    def add(self, name: str, prompt: ClonedVoice, consent: str) -> SavedVoice:
        """Store a voice. Raises ValueError (bad name, library full) or VoiceExistsError."""
        check_name(name)
        if self.get(name) is not None:
            raise VoiceExistsError(f"a saved voice named '{name}' exists; delete it first or choose another name")
        if len(self._voices) >= self.max_voices:
            raise ValueError(f"the library holds its maximum of {self.max_voices} voices; delete some first")
        voice = SavedVoice(f"{ID_PREFIX}{uuid.uuid4().hex[:16]}", name, int(time.time()), consent, prompt)
        tmp = self.directory / f".tmp-{voice.id}"
        tmp.mkdir(mode=PRIVATE_DIR)
        try:
            prompt.save(tmp / "prompt.safetensors")
            info = {
                "id": voice.id, "name": name, "created_at": voice.created_at, "consent": consent,
                "ref_text": prompt.ref_text, "seconds": round(prompt.seconds, 2), "x_vector_dim": self.width,
            }  # fmt: skip
            _write_private(tmp / "voice.json", json.dumps(info, indent=2, ensure_ascii=False) + "\n")
            (tmp / "prompt.safetensors").chmod(PRIVATE_FILE)
            tmp.chmod(PRIVATE_DIR)  # whatever the umask did to mkdir's mode
            tmp.rename(self.directory / voice.id)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._voices[voice.id] = voice
        return voice

    def delete(self, key: str) -> SavedVoice | None:
        voice = self.get(key)
        if voice is None:
            return None
        shutil.rmtree(self.directory / voice.id, ignore_errors=True)
        del self._voices[voice.id]
        return voice


def normalize_name(name: str) -> str:
    """The one form of a voice name (stored, looked up, deleted): NFKC, no surrounding whitespace."""
    return unicodedata.normalize("NFKC", name).strip()


def check_name(name: str) -> None:
    if name and normalize_name(name) != name:
        raise ValueError(
            f"invalid voice name {name!r}: it would be stored as {normalize_name(name)!r}; send it in that form"
        )
    if not NAME.fullmatch(name or ""):
        raise ValueError(
            f"invalid voice name {name!r}: 1 to 64 letters, digits, spaces, '_', '-' or '.', starting with a "
            "letter or digit and not ending in a space"
        )
    if name.startswith(ID_PREFIX):
        raise ValueError(f"invalid voice name '{name}': names starting with '{ID_PREFIX}' are reserved for ids")


def _write_private(path: Path, text: str) -> None:
    """A new file only the server's user may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
