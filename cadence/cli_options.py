"""Command-line options that `cadence synth`, `cadence serve` and the benchmarks share.

Each `add_*` function adds one block of options to a parser or an argument group. With
`from_file=True` (`cadence serve`) the options default to None, meaning "not given": a deployment
file, or its defaults, fills them (deploy/config.py), and their help states the default. The
functions here import no torch, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from .engine.config import CODEC_DECODES
from .sampling import SamplingOverrides, sampling_fields

if TYPE_CHECKING:
    from .engine.config import EngineConfig

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
DTYPES = ("auto", "bf16", "fp32")
DUMMY_PRESETS = ("full", "tiny")
TOKENIZER_REGEXES = ("qwen2", "mistral")
ATTENTION_BACKENDS = ("auto", "sdpa", "triton", "torch")
# KernelConfig's fields (EngineConfig.kernels) and the option of each
KERNEL_FLAGS = {"profile": "kernel_profile", "pdl_max_rows": "pdl_max_rows", "slab_max_rows": "slab_max_rows"}

ArgumentTarget = argparse.ArgumentParser | argparse._ArgumentGroup


def _default(value: Any, from_file: bool) -> Any:
    return None if from_file else value


def add_device_argument(target: ArgumentTarget, *, from_file: bool = False, more: str = "") -> None:
    """--device; `more`: what it means beyond one device (serve's replicas)."""
    target.add_argument(
        "--device", default=_default("auto", from_file), help=f"cpu, cuda, cuda:N or auto (default auto){more}"
    )


def add_model_arguments(target: ArgumentTarget, *, from_file: bool = False) -> None:
    """How the model loads: --dtype, --tokenizer-regex, --dummy-weights, --dummy-preset (the model
    itself is each command's own: `cadence synth --model`, `cadence serve MODEL`)."""
    target.add_argument(
        "--dtype",
        choices=DTYPES,
        default=_default("auto", from_file),
        help="talker precision: auto is bf16 on a GPU, fp32 on a CPU (default auto)",
    )
    target.add_argument(
        "--tokenizer-regex",
        choices=TOKENIZER_REGEXES,
        default=_default("qwen2", from_file),
        help="pre-tokenizer regex: qwen2 (the model's training regex, default) or mistral (what the "
        "official package applies to local checkpoint directories under transformers 4.57.3)",
    )
    target.add_argument(
        "--dummy-weights",
        action=argparse.BooleanOptionalAction,
        default=_default(False, from_file),
        help="random weights of the model's architecture, for benchmarking and trying cadence without weights "
        "(the audio is noise). The released Qwen/Qwen3-TTS-12Hz-* checkpoints' config and tokenizer files ship "
        "with cadence, so their names work offline; another model's are read from its directory or its hub page",
    )
    target.add_argument(
        "--dummy-preset",
        choices=DUMMY_PRESETS,
        default=_default("full", from_file),
        help="with --dummy-weights: full size, or a tiny model that runs fast on a CPU (default full)",
    )


def add_engine_arguments(target: ArgumentTarget, *, from_file: bool = False) -> None:
    """How the talker's decode step runs: --attention-backend, --enforce-eager."""
    target.add_argument(
        "--attention-backend",
        choices=ATTENTION_BACKENDS,
        default=_default("auto", from_file),
        help="the talker's decode step: auto is fused Triton kernels under CUDA graphs on a GPU, else eager sdpa "
        "(default auto)",
    )
    target.add_argument(
        "--enforce-eager",
        action=argparse.BooleanOptionalAction,
        default=_default(False, from_file),
        help="no CUDA graphs (debugging)",
    )


def add_codec_decode_argument(target: ArgumentTarget, *, from_file: bool = False) -> None:
    target.add_argument(
        "--codec-decode",
        choices=CODEC_DECODES,
        default=_default("exact", from_file),
        help="exact (default): every streamed chunk equals the decode of the whole utterance, at any length. "
        "chunked: past 300 frames (24 s) the official package's decode, which restarts the codec every 300 "
        "frames with 25 frames of context and so differs from the exact audio there; for bit-parity with qwen-tts",
    )


def add_sampling_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """--greedy and one option a SamplingOverrides field (--temperature, --subtalker-top-k, ...), each
    defaulting to the checkpoint's generation_config.json. Returns the group, for options that
    belong with them."""
    group = parser.add_argument_group(
        "sampling (defaults: the checkpoint's generation_config.json; the first codebook is the talker's, "
        "codebooks 1-15 the code predictor's, the subtalker_* settings of the official package)"
    )
    group.add_argument("--greedy", action="store_true", help="argmax everywhere (deterministic)")
    for field in sampling_fields():
        flag = "--" + field.name.replace("_", "-")
        if field.type is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, help=field.help)
        else:
            group.add_argument(flag, type=field.type, help=field.help)
    return group


def sampling_from_args(args: argparse.Namespace) -> SamplingOverrides:
    """The sampling options add_sampling_arguments added, as the request's overrides."""
    return SamplingOverrides(**{field.name: getattr(args, field.name) for field in sampling_fields()})


def engine_config_from_args(args: argparse.Namespace, **fixed: Any) -> EngineConfig:
    """An EngineConfig from parsed options: each field from the option of its name where one is
    given (not None), `fixed` over both, EngineConfig's defaults for the rest. --chunk-deadline and
    --[no-]runaway-guard adjust the chunk policy and the runaway guard that the options (or a
    deployment file) give, and --kernel-profile, --pdl-max-rows and --slab-max-rows the kernel settings
    (EngineConfig.kernels); an empty --graph-buckets list means the default buckets."""
    from .engine.config import ChunkPolicy, EngineConfig, RunawayGuard
    from .kernels.config import KernelConfig

    values = {}
    for field in dataclasses.fields(EngineConfig):
        value = getattr(args, field.name, None)
        if value is not None:
            values[field.name] = value
    if "graph_buckets" in values:
        values["graph_buckets"] = tuple(values["graph_buckets"]) or None
    if (deadline := getattr(args, "chunk_deadline", None)) is not None:
        values["chunk_policy"] = dataclasses.replace(values.get("chunk_policy", ChunkPolicy()), deadline=deadline)
    if (guard := getattr(args, "runaway_guard", None)) is not None:
        values["runaway"] = dataclasses.replace(values.get("runaway", RunawayGuard()), enabled=guard)
    flags = {name: getattr(args, dest, None) for name, dest in KERNEL_FLAGS.items()}
    if given := {name: value for name, value in flags.items() if value is not None}:
        values["kernels"] = dataclasses.replace(values.get("kernels", KernelConfig()), **given)
    return EngineConfig(**{**values, **fixed})
