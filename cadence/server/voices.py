"""The preset voices, and the table that maps OpenAI's voice names onto them.

Clients written for OpenAI send alloy, nova, onyx, ... ; each is mapped to a preset of similar
character (gender, register) so such clients work unchanged. The table is configurable: `cadence
serve --voice-map nova=serena,onyx=uncle_fu` or `--voice-map voices.json` (a JSON object), which
overrides or adds entries. Names are case-insensitive.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidRequestError
from ..models.interfaces import ClonedVoice
from .voice_library import VoiceLibrary


@dataclass(frozen=True)
class Voice:
    id: str  # the preset's name in the checkpoint (spk_id key)
    name: str
    gender: str
    description: str
    native_language: str
    dialect: str | None = None


# research/qwen3tts_model.md §5 (the official README's table and config).
PRESETS: dict[str, Voice] = {
    v.id: v
    for v in [
        Voice("vivian", "Vivian", "female", "bright, slightly edgy young female", "Chinese"),
        Voice("serena", "Serena", "female", "warm, gentle young female", "Chinese"),
        Voice("uncle_fu", "Uncle_Fu", "male", "seasoned male, low mellow timbre", "Chinese"),
        Voice("dylan", "Dylan", "male", "youthful Beijing male", "Chinese", "Beijing dialect"),
        Voice("eric", "Eric", "male", "lively Chengdu male, slightly husky", "Chinese", "Sichuan dialect"),
        Voice("ryan", "Ryan", "male", "dynamic male, strong rhythm", "English"),
        Voice("aiden", "Aiden", "male", "sunny American male", "English"),
        Voice("ono_anna", "Ono_Anna", "female", "playful Japanese female", "Japanese"),
        Voice("sohee", "Sohee", "female", "warm Korean female", "Korean"),
    ]
}

# OpenAI voice -> preset. OpenAI describes alloy, echo, fable, onyx, nova and shimmer; the newer
# names are matched by their published character. English-native presets first where they fit.
OPENAI_VOICES: dict[str, str] = {
    "alloy": "ryan",  # neutral, balanced
    "ash": "aiden",  # clear, friendly male
    "ballad": "dylan",  # soft, expressive male
    "coral": "vivian",  # bright, warm female
    "echo": "eric",  # resonant male
    "fable": "aiden",  # storytelling male
    "nova": "serena",  # warm, friendly female
    "onyx": "uncle_fu",  # deep, low male
    "sage": "sohee",  # calm, gentle female
    "shimmer": "ono_anna",  # light, bright female
    "verse": "ryan",  # expressive, rhythmic male
}


def parse_voice_map(spec: str | None) -> dict[str, str]:
    """`--voice-map`: "name=preset,name=preset" or the path of a JSON object {name: preset}."""
    if not spec:
        return {}
    path = Path(spec)
    if spec.strip().endswith(".json") or path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ValueError(f"{spec}: the voice map must be a JSON object of name -> preset")
        return {str(k).lower(): v.lower() for k, v in data.items()}
    out: dict[str, str] = {}
    for item in spec.split(","):
        name, sep, preset = item.partition("=")
        if not sep or not name.strip() or not preset.strip():
            raise ValueError(f"--voice-map entry '{item}' is not name=preset")
        out[name.strip().lower()] = preset.strip().lower()
    return out


class VoiceTable:
    """Resolves a request's voice: a preset of the checkpoint, an alias of one, or (a model that
    clones) a saved voice. The model's frontend asks it (interfaces.Voices)."""

    def __init__(self, speakers: Iterable[str], overrides: dict[str, str] | None = None):
        self.library: VoiceLibrary | None = None  # a Base server's saved voices (set by `cadence serve`)
        self.speakers = sorted(s.lower() for s in speakers)
        bad = {k: v for k, v in (overrides or {}).items() if v not in self.speakers}
        if bad:
            raise ValueError(f"--voice-map maps to unknown presets {bad}; presets: {', '.join(self.speakers)}")
        aliases = {**OPENAI_VOICES, **(overrides or {})}
        # A checkpoint without some preset (a fine-tune) keeps only the aliases it can honour.
        self.aliases = {k: v for k, v in aliases.items() if v in self.speakers and k not in self.speakers}

    def resolve(self, voice: str) -> str:
        name = voice.strip().lower()
        if name in self.speakers:
            return name
        if name in self.aliases:
            return self.aliases[name]
        raise InvalidRequestError(f"unknown voice '{voice}'", "voice", [*self.speakers, *sorted(self.aliases)])

    def saved(self, voice: str) -> tuple[str, ClonedVoice]:
        """A saved voice by id or name: (its name, the voice); InvalidRequestError listing the saved
        names otherwise."""
        found = self.library.get(voice) if self.library is not None else None
        if found is None:
            names = self.library.names() if self.library is not None else []
            hint = "" if names else " (none saved yet: POST /v1/audio/voices, or send ref_audio)"
            raise InvalidRequestError(f"unknown voice '{voice}'{hint}", "voice", names)
        return found.name, found.prompt

    def describe(self) -> list[dict]:
        """GET /v1/audio/voices entries: every preset, with what is known of it and its aliases; on a
        Base server, the saved voices."""
        if self.library is not None:
            return [v.card() for v in self.library.list()]
        out = []
        for speaker in self.speakers:
            v = PRESETS.get(speaker)
            out.append(
                {
                    "id": speaker,
                    "name": v.name if v else speaker,
                    "gender": v.gender if v else None,
                    "description": v.description if v else None,
                    "native_language": v.native_language if v else None,
                    "dialect": v.dialect if v else None,
                    "aliases": sorted(k for k, p in self.aliases.items() if p == speaker),
                }
            )
        return out
