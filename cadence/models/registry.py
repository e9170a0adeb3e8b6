"""The model registry: the families cadence serves, by name. No torch.

A model family is one package under cadence/models/ and one `register(...)` line in
cadence/models/__init__.py. It says which checkpoints it loads and gives two loaders: the
frontend (API process: config, tokenizer, request validation, no weights; the `Frontend` protocol of
interfaces.py, the only way the server reaches a model) and the runtime (engine process: weights and
the engine's partitions, cadence/engine/partition.py). A family whose models clone voices gives a
third, for the voice encoder a cloning server runs in its API process. The engine never imports a
model package: the engine process receives the runtime loader as a function reference.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.process_config import ModelSource
from .interfaces import Frontend, VoiceEncoder

if TYPE_CHECKING:
    from ..engine.partition import ModelRuntime


@dataclass(frozen=True)
class ModelFamily:
    name: str
    # config.json (as a dict) -> whether this family loads the checkpoint
    accepts: Callable[[dict[str, Any]], bool]
    # (model as the user names it, random-weights preset or None) -> where it comes from: a checkpoint
    # directory (downloaded if need be), or an architecture to draw random weights for
    locate: Callable[[str, str | None], ModelSource]
    load_frontend: Callable[[ModelSource], Frontend]  # API process; imports no torch
    load_runtime: Callable[[ModelSource], ModelRuntime]  # engine process; a module-level function
    # (model, device) -> its voice encoder, where capabilities().clones_voices; may import torch
    load_voice_encoder: Callable[[ModelSource, str], VoiceEncoder] | None = None


FAMILIES: dict[str, ModelFamily] = {}  # in registration order: the first is the default


def register(family: ModelFamily) -> None:
    if family.name in FAMILIES:
        raise ValueError(f"model family '{family.name}' is registered already")
    FAMILIES[family.name] = family


def family(name: str) -> ModelFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family '{name}'; registered: {', '.join(FAMILIES)}") from None


def family_for(model: str) -> ModelFamily:
    """The family that loads `model`: for a directory with a config.json, the first family that
    accepts it; otherwise (a hub id, a released checkpoint's name) the default family, which also
    takes a directory no family claims and says what is wrong with it."""
    if not FAMILIES:
        raise RuntimeError("no model family is registered")
    config = Path(model).expanduser() / "config.json"
    if config.is_file():
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict):
            for f in FAMILIES.values():
                if f.accepts(data):
                    return f
    return next(iter(FAMILIES.values()))


def model_source(
    model: str,
    *,
    random_preset: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    tokenizer_regex: str = "qwen2",
    seed: int = 0,
) -> ModelSource:
    """Where `model` comes from, as its family locates it (downloading a hub id's files once), with
    the devices and settings it is to load with. `random_preset`: random weights of its architecture."""
    source = family_for(model).locate(model, random_preset)
    return replace(source, device=device, dtype=dtype, tokenizer_regex=tokenizer_regex, seed=seed)


def load_frontend(source: ModelSource) -> Frontend:
    return family(source.family).load_frontend(source)


def load_runtime(source: ModelSource) -> ModelRuntime:
    return family(source.family).load_runtime(source)
