"""`cadence serve` options, by group (docs/deploy.md).

Every option a deployment file can set defaults to None, meaning "not given": the file (--config),
or its defaults, fills it (deploy/config.py apply_deploy_file), so that a flag given on the command
line always overrides the file. The help states each default.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..cli_options import (
    add_codec_decode_argument,
    add_device_argument,
    add_engine_arguments,
    add_model_arguments,
)
from ..engine.config import CODEC_DTYPES
from ..kernels.config import SLAB_MAX_ROWS
from ..kernels.tile_table import FALLBACK, FAMILIES
from .cloning import CloningSettings


def add_placement_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("placement (docs/deploy.md)")
    add_device_argument(g, from_file=True, more="; with --replicas, cuda spreads them")
    g.add_argument(
        "--replicas",
        type=int,
        help="engine processes behind this server (default 1), each on --device: `cuda` puts replica i on GPU i",
    )
    g.add_argument(
        "--codec-device",
        help="disaggregated: the Codec partition on a device of its own (cpu, cuda:N); default: with the talker",
    )


def add_model_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model")
    add_model_arguments(g, from_file=True)
    add_engine_arguments(g, from_file=True)
    g.add_argument("--cpu-threads", type=int, help="torch threads for CPU inference (default: cores - 1)")
    g.add_argument("--voice-map", help="OpenAI voice aliases: 'alloy=ryan,nova=serena' or a JSON file (docs/api.md)")


def add_codec_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("codec")
    g.add_argument(
        "--pipeline-codec",
        action=argparse.BooleanOptionalAction,
        help="overlap codec chunks with the talker's step (first chunks are never delayed); "
        "default: with --codec-device",
    )
    g.add_argument(
        "--codec-dtype",
        choices=CODEC_DTYPES,
        help="the codec's precision (default float32, as the official decode). bfloat16/float16 run its "
        "convolutions and linears in half precision, with SnakeBeta, norms, softmax and the output conv in fp32, "
        "and halve its per-stream state: a little more codec throughput at large batches, none at small ones, "
        "and audio up to ~0.08 (bfloat16) or ~0.01 (float16) from the exact fp32 decode, where float32's TF32 "
        "convolutions and linears move it 3-6e-3 (random full-size weights). float16 is the closer; see "
        "docs/deploy.md",
    )
    add_codec_decode_argument(g, from_file=True)
    g.add_argument(
        "--codec-tf32",
        action=argparse.BooleanOptionalAction,
        help="the float32 codec's convolutions and linears on TF32 tensor cores (the default, as PyTorch runs "
        "convolutions; 3-6e-3 max abs from the exact fp32 decode on random full-size weights) or, with "
        "--no-codec-tf32, exact fp32: within 1e-4 of the offline decode, at about a quarter of the codec's speed "
        "on a GPU (docs/benchmarks.md)",
    )
    g.add_argument(
        "--codec-graph-stream-frames",
        type=int,
        metavar="N",
        help="the largest codec CUDA graph in streams x frames a chunk (default 128); larger groups of chunks run "
        "as several graphs. The codec's graph memory grows with it (about 18 MB a stream-frame for the full-size "
        "codec: 128 is about 2 GB) and so does its start-up capture time; 0: no limit (up to 64 streams x 8 frames)",
    )
    g.add_argument(
        "--chunk-deadline",
        type=float,
        metavar="SECONDS",
        help="deadline-aware chunking: decode a stream's frames early, before its chunk has grown, when its "
        "audio ahead of playback would fall below SECONDS (default: 0.2 on a GPU, 0 on a CPU; 0: off, chunks "
        "only grow; the file's engine.chunk_policy.deadline). Under load it spends codec work on the streams "
        "about to run dry, and far fewer requests underrun at equal throughput (docs/benchmarks.md)",
    )


def add_kernel_options(parser: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    g = parser.add_argument_group("GPU kernels and CUDA graphs")
    g.add_argument(
        "--graph-buckets",
        type=_int_list,
        metavar="N,N,...",
        help="batch sizes captured as CUDA graphs (default 1,2,4,...,256 below --max-streams, and --max-streams)",
    )
    kernels = defaults["kernels"]
    g.add_argument(
        "--kernel-profile",
        metavar="|".join(("auto", *FAMILIES, "PATH")),
        help="the tile table the GPU kernels choose their launches from (tiles, CTAs, stages, row ranges): "
        f"auto picks the table of the engine's GPU family from its name ({', '.join(f.upper() for f in FAMILIES)}; "
        f"any other GPU gets the {FALLBACK} table, and the log says so), {' or '.join(FAMILIES)} names a family's, "
        "PATH a .toml table file of your own, in the format of cadence/kernels/profiles/*.toml "
        f"(docs/architecture.md, Where the kernels live; default {kernels.profile})",
    )
    g.add_argument(
        "--pdl-max-rows",
        type=int,
        metavar="N",
        help="talker CUDA graphs of at most N rows launch their Triton kernels with programmatic dependent "
        f"launch on Hopper and newer GPUs; 0: off (default {kernels.pdl_max_rows}: it makes small batches "
        "faster and batches of 128 and more slower)",
    )
    g.add_argument(
        "--slab-max-rows",
        type=int,
        choices=range(SLAB_MAX_ROWS + 1),
        metavar=f"{{0-{SLAB_MAX_ROWS}}}",
        help=f"decode batches of at most N rows (1-{SLAB_MAX_ROWS}; the code predictor's first pass counts two a "
        "stream) run the talker's and code predictor's matrix products as CUDA kernels that load their weights "
        "while the kernel before them finishes (Hopper and newer, bf16): the fastest path for a few streams; "
        f"0: off (default {kernels.slab_max_rows})",
    )


def add_capacity_options(parser: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    g = parser.add_argument_group("engine capacity")
    g.add_argument(
        "--max-streams",
        type=int,
        help="streams generating at once (default: as many as the KV cache holds at 600 tokens a stream, a prompt "
        "and ~40 s of audio, at most 256; the startup log and GET /version say how many)",
    )
    g.add_argument("--max-queue", type=int, help=f"requests waiting beyond that, then 429 ({defaults['max_queue']})")
    g.add_argument("--kv-cache-memory", type=float, help="KV cache size in GB (default: a fraction of free memory)")
    g.add_argument(
        "--kv-cache-fraction",
        type=float,
        help="fraction of the device memory free once the codec is built (CPU: of 1 GB) for the KV cache when "
        f"--kv-cache-memory is not set ({defaults['kv_cache_fraction']})",
    )
    g.add_argument("--page-size", type=int, help=f"tokens per KV-cache page ({defaults['page_size']})")
    g.add_argument(
        "--prefill-token-budget",
        type=int,
        help=f"prompt tokens prefilled per engine step ({defaults['prefill_token_budget']})",
    )
    g.add_argument(
        "--step-on-idle",
        action=argparse.BooleanOptionalAction,
        help="queue an engine step on the GPU only once the last one has run there, taking requests in meanwhile: "
        "a new request's prefill then waits for at most the step in flight (the default). --no-step-on-idle queues "
        "each step behind the one running, which keeps the GPU busy through the host's work between steps and "
        "makes an arrival wait up to one step more (docs/benchmarks.md)",
    )
    g.add_argument("--max-input-tokens", type=int, help=f"longest input in tokens ({defaults['max_input_tokens']})")
    g.add_argument(
        "--max-seq-tokens",
        type=int,
        help=f"longest request: prompt tokens + audio frames, 80 ms each ({defaults['max_seq_tokens']})",
    )
    g.add_argument("--warmup-frames", type=int, help="frames of the warm-up synthesis before /ready (8)")
    g.add_argument(
        "--runaway-guard",
        action=argparse.BooleanOptionalAction,
        help="stop generations that will not end on their own (on by default): more frames than the text can "
        "need, a loop of repeating codes, or seconds of silence; such a request ends with finish_reason runaway "
        "and the check that fired. --no-runaway-guard lets every generation run to EOS or max_new_tokens, as the "
        "official package does; the deployment file's engine.runaway sets each check (docs/deploy.md)",
    )


def add_request_limit_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("request limits")
    g.add_argument(
        "--max-input-chars", type=int, help="longest `input` in characters, then 413 (100000: a book chapter)"
    )
    g.add_argument(
        "--long-form-chars",
        type=int,
        help="an input longer than this is spoken as pieces of at most this many characters, cut at paragraphs "
        "and sentences, one after another in one stream (600; 0: never cut)",
    )
    g.add_argument("--long-form-pause", type=float, help="seconds of silence between the pieces of a long input (0.25)")
    g.add_argument("--max-body-bytes", type=int, help="largest request body, then 413 (1 MiB)")
    g.add_argument("--request-timeout", type=float, help="seconds a request may take in all (600)")
    g.add_argument(
        "--drain-timeout",
        type=float,
        help="on SIGTERM, seconds open streams get to finish; then they are cut off with a 'draining' error (30)",
    )
    g.add_argument(
        "--ws-max-message-bytes",
        type=int,
        help="largest WebSocket message; past it the socket is closed with code 1009 (65536)",
    )
    g.add_argument(
        "--ws-max-buffered-chars",
        type=int,
        help="text a WebSocket session may hold not yet spoken; a delta past it is refused with an error event (65536)",
    )
    g.add_argument(
        "--ws-input-timeout",
        type=float,
        help="seconds a continuous WebSocket utterance waits for more text before it is ended (30)",
    )
    g.add_argument(
        "--max-concurrent-uploads",
        type=int,
        help="Base: requests carrying reference audio that are read and analysed at once; the rest wait (4)",
    )


def add_cloning_options(parser: argparse.ArgumentParser) -> None:
    """Options for Base checkpoints (they are not deployment-file keys: each has its default here)."""
    d = CloningSettings()
    g = parser.add_argument_group("voice cloning (base checkpoints; docs/api.md)")
    g.add_argument("--voices-dir", default=d.voices_dir, help=f"where saved voices live (default {d.voices_dir})")
    g.add_argument(
        "--max-ref-audio-bytes", type=int, default=d.max_audio_bytes, help="largest reference audio, then 413"
    )
    g.add_argument(
        "--max-ref-audio-seconds",
        type=float,
        default=d.max_audio_seconds,
        help=f"longest reference audio, then 413 (default {d.max_audio_seconds:g})",
    )
    g.add_argument(
        "--max-ref-text-tokens",
        type=int,
        default=d.max_ref_text_tokens,
        help=f"longest reference transcript (ref_text) in tokens, then 413 (default {d.max_ref_text_tokens})",
    )
    g.add_argument("--voice-encoder-device", default=d.device, help="device of the voice encoders (default cpu)")


def cloning_settings(args: argparse.Namespace) -> CloningSettings:
    """The voice-cloning options, as settings (each missing one at its default)."""
    d = CloningSettings()
    return CloningSettings(
        getattr(args, "voices_dir", None) or d.voices_dir,
        getattr(args, "max_ref_audio_bytes", None) or d.max_audio_bytes,
        getattr(args, "max_ref_audio_seconds", None) or d.max_audio_seconds,
        getattr(args, "voice_encoder_device", None) or d.device,
        getattr(args, "max_ref_text_tokens", None) or d.max_ref_text_tokens,
    )


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
