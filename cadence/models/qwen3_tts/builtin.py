"""Random weights for serving without a checkpoint (`cadence serve --dummy-weights`, `cadence synth
--dummy-weights`).

The architecture comes from the checkpoint's own config files: those cadence ships for the released
checkpoints (`skeletons.py`; offline, the hub is not asked), a local directory's, or a hub id's small
files. Where none can be had it is the released 0.6B CustomVoice's, with a warning. Weights are drawn
in memory with `checkpoint.randomize`; nothing is written. The result has the real model's shapes,
tokenizer and cost per frame (benchmarking) and says nothing intelligible.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...checkpoints import CheckpointError
from .config import Qwen3TTSConfig
from .frontend import Qwen3TTSFrontend
from .presets import PRESETS, merge
from .skeletons import Skeleton, resolve_skeleton, shipped_skeleton
from .tokenizer import PretokenizerRegex, TextTokenizer

if TYPE_CHECKING:
    import torch

    from .runtime import Qwen3TTS

log = logging.getLogger(__name__)


@dataclass
class Architecture:
    """A model's config files as dicts, where they came from, and the directory of its tokenizer files.
    Plain data: it is handed to the engine process as is."""

    config: dict[str, Any]
    speech_tokenizer: dict[str, Any]
    generation: dict[str, Any]
    source: str
    tokenizer_dir: str  # vocab.json + merges.txt + tokenizer_config.json
    preset: str = "full"  # presets.PRESETS: how `shrink` shrank it

    def shrink(self, preset: str) -> Architecture:
        """The same model shrunk by one of presets.PRESETS ("full" keeps it)."""
        if preset not in PRESETS:
            raise ValueError(f"unknown preset '{preset}'; allowed: {', '.join(PRESETS)}")
        overrides = PRESETS[preset](self.config)
        return Architecture(
            merge(self.config, overrides.get("config.json", {})),
            merge(self.speech_tokenizer, overrides.get("speech_tokenizer/config.json", {})),
            copy.deepcopy(self.generation),
            self.source if preset == "full" else f"{self.source}, {preset} preset",
            self.tokenizer_dir,
            preset,
        )

    def describe(self) -> str:
        """Its size as people say it ("0.6B"; "tiny preset of the 0.6B architecture")."""
        size = self.parse().size_label
        return size if self.preset == "full" else f"{self.preset} preset of the {size} architecture"

    def parse(self) -> Qwen3TTSConfig:
        return Qwen3TTSConfig.from_dicts(self.config, self.speech_tokenizer, self.generation)

    def tokenizer(self, regex: PretokenizerRegex = "qwen2") -> TextTokenizer:
        return TextTokenizer.from_dir(self.tokenizer_dir, regex)

    def frontend(self, regex: PretokenizerRegex = "qwen2") -> Qwen3TTSFrontend:
        return Qwen3TTSFrontend(self.parse(), self.tokenizer(regex))

    def random_model(
        self,
        device: str | torch.device | None = "auto",
        dtype: str | torch.dtype | None = "auto",
        regex: PretokenizerRegex = "qwen2",
        seed: int = 0,
    ) -> Qwen3TTS:
        """Random weights of this architecture, drawn in memory (the same for the same seed)."""
        from .runtime import Qwen3TTS  # torch: only where the model runs

        return Qwen3TTS.random(self.parse(), self.tokenizer(regex), device, dtype, seed, self.source, self.describe())


def skeleton_architecture(skeleton: Skeleton) -> Architecture:
    """The architecture a skeleton describes; what it lacks (a speech tokenizer config, tokenizer
    files, generation defaults) comes from the released files cadence ships, which the whole
    family shares."""
    shipped = shipped_skeleton()
    speech = "speech_tokenizer/config.json"
    if not skeleton.has(speech):
        log.warning("%s has no %s; using the released 12 Hz speech tokenizer's", skeleton.source, speech)
    tokenizer_dir = skeleton.tokenizer_dir()
    if tokenizer_dir is None:
        log.warning("%s has no tokenizer files; using the released Qwen3-TTS tokenizer", skeleton.source)
    generation = skeleton if skeleton.has("generation_config.json") else shipped
    return Architecture(
        skeleton.config(),
        (skeleton if skeleton.has(speech) else shipped).read(speech),
        generation.read("generation_config.json"),
        f"architecture of {skeleton.source}",
        str(tokenizer_dir or shipped.tokenizer_dir()),
    )


def find_architecture(model: str | os.PathLike) -> Architecture:
    """The architecture of `model`: a released checkpoint's name (the shipped files, offline), a
    checkpoint directory, or a hub id whose small files are fetched; the released 0.6B CustomVoice
    when no config files can be had."""
    try:
        skeleton = resolve_skeleton(model)
    except CheckpointError as e:
        fallback = shipped_skeleton()
        log.warning("no config files for '%s' (%s); using %s", model, str(e).splitlines()[0], fallback.source)
        return skeleton_architecture(fallback)
    if not skeleton.has("config.json"):
        fallback = shipped_skeleton()
        log.warning("%s has no config.json; using %s", skeleton.source, fallback.source)
        return skeleton_architecture(fallback)
    return skeleton_architecture(skeleton)
