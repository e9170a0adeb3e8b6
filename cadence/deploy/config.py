"""The deployment file of `cadence serve --config deploy.yaml` (docs/deploy.md).

Sections: the model (top level), `placement` (where engines run), `engine` (capacity, KV budget,
chunk policy, graph buckets), `server` (HTTP). Every field has the default `cadence serve` uses
without a file, and most have a command-line flag of the same name (`engine.max_streams` is
`--max-streams`); a flag given on the command line overrides the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..cli_options import ATTENTION_BACKENDS, DEFAULT_MODEL, DTYPES, DUMMY_PRESETS, TOKENIZER_REGEXES
from ..engine.config import CODEC_DECODES, CODEC_DTYPES, EngineConfig
from . import yaml_schema
from .placement import ReplicaSpec, check_codec_device, check_device


def _check_buckets(buckets: list[int]) -> None:
    if buckets != sorted(set(buckets)):
        raise ValueError(f"graph buckets must be increasing and distinct, got {buckets}")


def _min(low: float) -> dict[str, Any]:
    return {"min": low}


def _check_replicas(replicas: int | list[str | ReplicaSpec]) -> None:
    if isinstance(replicas, int):
        if replicas < 1:
            raise ValueError(f"must be >= 1, got {replicas}")
        return
    if not replicas:
        raise ValueError("a list of one entry per replica, not an empty list")
    for entry in replicas:
        if isinstance(entry, str):
            check_device(entry)


@dataclass(frozen=True)
class PlacementSection:
    """Where the engines run (cadence/deploy/placement.py): `replicas` engine processes, each on
    `device` with its Codec on `codec_device`, or a list of one entry per replica."""

    replicas: int | list[str | ReplicaSpec] = field(default=1, metadata={"check": _check_replicas})
    device: str = field(default="auto", metadata={"check": check_device})
    codec_device: str | None = field(default=None, metadata={"check": check_codec_device})


# The file's engine keys, in the order its errors list them, with the bounds the file checks:
# EngineConfig's fields, whose types and defaults come from EngineConfig, then the engine process's
# own settings.
ENGINE_KEYS: dict[str, dict[str, Any]] = {
    "max_streams": _min(1),
    "max_queue": _min(0),
    "kv_cache_memory": _min(0),  # GB; None: kv_cache_fraction
    "kv_cache_fraction": _min(0),
    "page_size": _min(1),
    "prefill_token_budget": _min(1),
    "step_on_idle": {},
    "max_input_tokens": _min(1),
    "max_seq_tokens": _min(1),
    "attention_backend": {},
    "enforce_eager": {},
    "graph_buckets": {"min": 1, "check": _check_buckets},
    "chunk_policy": {},
    "pipeline_codec": {},
    "codec_dtype": {},
    "codec_tf32": {},
    "codec_decode": {},
    "codec_graph_stream_frames": _min(0),
    "runaway": {},
    "kernels": {},
}
# Where the file reads a key as another type than EngineConfig declares: a choice as a Literal (so an
# error lists the allowed values), a tuple as a YAML list.
FILE_TYPES: dict[str, Any] = {
    "attention_backend": Literal[ATTENTION_BACKENDS],
    "codec_dtype": Literal[CODEC_DTYPES],
    "codec_decode": Literal[CODEC_DECODES],
    "graph_buckets": list[int] | None,
}
# Keys the engine section had and where they live now.
MOVED_ENGINE_KEYS = {"pdl_max_rows": "kernels.pdl_max_rows", "slab_max_rows": "kernels.slab_max_rows"}
PROCESS_KEYS = [
    ("cpu_threads", int | None, field(default=None, metadata=_min(1))),
    ("warmup_frames", int, field(default=8, metadata=_min(0))),
]


def _engine_section() -> type:
    """EngineSection: ENGINE_KEYS as fields typed and defaulted as EngineConfig's, then PROCESS_KEYS."""
    declared = {f.name: f for f in dataclasses.fields(EngineConfig)}
    types = typing.get_type_hints(EngineConfig)
    fields: list[tuple[str, Any, Any]] = []
    for name, metadata in ENGINE_KEYS.items():
        source = declared[name]
        if source.default_factory is not dataclasses.MISSING:
            default = field(default_factory=source.default_factory, metadata=metadata)
        else:
            default = field(default=source.default, metadata=metadata)
        fields.append((name, FILE_TYPES.get(name, types[name]), default))
    section = dataclasses.make_dataclass("EngineSection", fields + PROCESS_KEYS, frozen=True)
    section.__module__ = __name__
    section.__doc__ = "Capacity and scheduling of each engine (see EngineConfig), and its process's settings."
    section.moved_keys = MOVED_ENGINE_KEYS  # a file still using one is told where it went
    return section


EngineSection = _engine_section()


@dataclass(frozen=True)
class ServerSection:
    """The HTTP side."""

    host: str = "127.0.0.1"
    port: int = field(default=8000, metadata=_min(0))
    max_input_chars: int = field(default=100_000, metadata=_min(1))
    long_form_chars: int = field(default=600, metadata=_min(0))
    long_form_pause: float = field(default=0.25, metadata=_min(0))
    max_body_bytes: int = field(default=1 << 20, metadata=_min(1))
    request_timeout: float = field(default=600.0, metadata=_min(0))
    drain_timeout: float = field(default=30.0, metadata=_min(0))
    ws_max_message_bytes: int = field(default=1 << 16, metadata=_min(64))
    ws_max_buffered_chars: int = field(default=1 << 16, metadata=_min(1))
    ws_input_timeout: float = field(default=30.0, metadata=_min(0))
    max_concurrent_uploads: int = field(default=4, metadata=_min(1))
    ui: bool = True


@dataclass(frozen=True)
class DeployFile:
    model: str = DEFAULT_MODEL
    served_model_name: str | None = None
    dtype: Literal[DTYPES] = "auto"
    dummy_weights: bool = False
    dummy_preset: Literal[DUMMY_PRESETS] = "full"
    tokenizer_regex: Literal[TOKENIZER_REGEXES] = "qwen2"
    voice_map: dict[str, str] | str | None = None  # {alias: preset}, or --voice-map's string
    placement: PlacementSection = field(default_factory=PlacementSection)
    engine: EngineSection = field(default_factory=EngineSection)
    server: ServerSection = field(default_factory=ServerSection)

    def flat(self) -> dict[str, Any]:
        """Field name -> value, sections flattened: the names are the `cadence serve` option dests."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in SECTIONS:
                out.update({s.name: getattr(value, s.name) for s in dataclasses.fields(value)})
            else:
                out[f.name] = value
        if isinstance(out["voice_map"], dict):  # --voice-map's syntax
            out["voice_map"] = ",".join(f"{k}={v}" for k, v in out["voice_map"].items())
        return out


SECTIONS = ("placement", "engine", "server")


def load_deploy_file(path: str | Path) -> DeployFile:
    """Raises yaml_schema.SchemaError (with the line) or OSError."""
    return yaml_schema.load(Path(path), DeployFile)


def option_dests() -> list[str]:
    """The `cadence serve` options a deployment file can set."""
    return list(DeployFile().flat())


def apply_deploy_file(args: argparse.Namespace) -> DeployFile:
    """Fill every option not given on the command line (None) from `args.config`, or from the
    defaults when there is no file; returns the file's content."""
    deploy = load_deploy_file(args.config) if args.config else DeployFile()
    listed = deploy.placement.replicas
    if isinstance(listed, list) and args.replicas is None:
        # --device and --codec-device place every replica of the file's list
        if args.device is not None:
            args.replicas = len(listed)
        elif args.codec_device is not None:
            args.replicas = [ReplicaSpec(r, None) if isinstance(r, str) else ReplicaSpec(r.device) for r in listed]
    for dest, value in deploy.flat().items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)
    return deploy
