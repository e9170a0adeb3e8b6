"""`cadence serve`: the OpenAI-compatible speech server (API process + engine-core process)."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import uvicorn

if TYPE_CHECKING:
    from ..deploy.placement import Placement
    from ..engine.process_config import EngineProcessConfig, ModelSource
    from .state import ServerState

log = logging.getLogger("cadence.server")

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
API_KEY_ENV = "CADENCE_API_KEY"
DRAIN_GRACE_S = 5.0  # after the drain timeout, for cut-off streams to send their error and close


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..deploy.config import DeployFile, option_dests
    from ..engine.config import CODEC_DECODES, CODEC_DTYPES
    from .cloning import add_arguments as add_cloning_arguments

    defaults = DeployFile().flat()  # shown in the help; the options themselves default to None (not given)
    p = subparsers.add_parser(
        "serve",
        help="serve an OpenAI-compatible speech API",
        description="Serve MODEL over HTTP: POST /v1/audio/speech (OpenAI's API, streaming), "
        "WS /v1/audio/speech/stream (text in as it is written), /v1/models, /v1/audio/voices, /health, "
        "/ready, /metrics. See docs/api.md; the deployment file (--config): docs/deploy.md.",
    )
    p.add_argument(
        "model",
        nargs="?",
        help=f"checkpoint directory or Hugging Face id, downloaded on first use (default: {DEFAULT_MODEL})",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="deployment file (YAML, docs/deploy.md): every option below; options given here override it",
    )
    p.add_argument("--host", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, help="(default 8000)")
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"require 'Authorization: Bearer KEY' on every /v1 route (default: ${API_KEY_ENV}, else none)",
    )
    p.add_argument("--served-model-name", help="the model id clients see and send (default: MODEL as given)")
    p.add_argument(
        "--ui",
        action=argparse.BooleanOptionalAction,
        help="the playground page at / to try the server in a browser (default on; --no-ui turns it off)",
    )
    g = p.add_argument_group("placement (docs/deploy.md)")
    g.add_argument("--device", help="cpu, cuda, cuda:N or auto (default auto); with --replicas, cuda spreads them")
    g.add_argument(
        "--replicas",
        type=int,
        help="engine processes behind this server (default 1), each on --device: `cuda` puts replica i on GPU i",
    )
    g.add_argument(
        "--codec-device",
        help="disaggregated: the Codec partition on a device of its own (cpu, cuda:N); default: with the talker",
    )
    g = p.add_argument_group("model")
    g.add_argument("--dtype", choices=["auto", "bf16", "fp32"], help="talker precision (default auto)")
    g.add_argument(
        "--dummy-weights",
        action=argparse.BooleanOptionalAction,
        help="random weights of MODEL's architecture, for benchmarking and trying the API without weights (the "
        "audio is noise). The released Qwen/Qwen3-TTS-12Hz-* checkpoints' config and tokenizer files ship with "
        "cadence, so their names work offline; another MODEL's are read from its directory or its hub page.",
    )
    g.add_argument(
        "--dummy-preset",
        choices=["full", "tiny"],
        help="with --dummy-weights: full size, or a tiny model that runs fast on a CPU (default full)",
    )
    g.add_argument(
        "--attention-backend",
        choices=["auto", "sdpa", "triton", "torch"],
        help="talker decode walk: auto = fused Triton kernels under CUDA graphs on a GPU, else eager sdpa",
    )
    g.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, help="no CUDA graphs (debugging)")
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
    g.add_argument(
        "--codec-decode",
        choices=CODEC_DECODES,
        help="exact (default): every streamed chunk equals the decode of the whole utterance, at any length. "
        "chunked: past 300 frames (24 s) the official package's decode, which restarts the codec every 300 "
        "frames with 25 frames of context and so differs from the exact audio there; for bit-parity with qwen-tts",
    )
    g.add_argument(
        "--codec-tf32",
        action=argparse.BooleanOptionalAction,
        help="the float32 codec's convolutions and linears on TF32 tensor cores (the default, as PyTorch runs "
        "convolutions; 3-6e-3 max abs from the exact fp32 decode, measured on random full-size weights) or, "
        "with --no-codec-tf32, exact fp32 (within 1e-4 of the offline decode; on an H200 about a quarter of the "
        "codec's speed: 505 against 2,070 audio s/s at 64 streams x 8 frames)",
    )
    g.add_argument(
        "--chunk-deadline",
        type=float,
        metavar="SECONDS",
        help="deadline-aware chunking: decode a stream's frames early, before its chunk has grown, when its "
        "audio ahead of playback would fall below SECONDS (default: 0.2 on a GPU, 0 on a CPU; 0: off, chunks "
        "only grow; the file's engine.chunk_policy.deadline). On an H200 under 128-256 streams it cut playback "
        "underruns from 87-98%% of requests to 1-22%% at equal throughput (docs/benchmarks.md)",
    )
    g.add_argument(
        "--graph-buckets",
        type=_int_list,
        metavar="N,N,...",
        help="batch sizes captured as CUDA graphs (default 1,2,4,...,256 below --max-streams, and --max-streams)",
    )
    g.add_argument(
        "--pdl-max-rows",
        type=int,
        metavar="N",
        help="talker CUDA graphs of at most N rows launch their Triton kernels with programmatic dependent "
        f"launch on Hopper and newer GPUs; 0: off (default {defaults['pdl_max_rows']}: it makes small batches "
        "faster and batches of 128 and more slower)",
    )
    g.add_argument(
        "--slab-max-rows",
        type=int,
        choices=[0, 1, 2],
        help="decode batches of at most N rows (1 or 2) run the talker's and code predictor's matrix products "
        "as CUDA kernels that load their weights while the kernel before them finishes (Hopper and newer, bf16): "
        f"the fastest path for one or two streams; 0: off (default {defaults['slab_max_rows']})",
    )
    g.add_argument("--cpu-threads", type=int, help="torch threads for CPU inference (default: cores - 1)")
    g.add_argument("--tokenizer-regex", choices=["qwen2", "mistral"], help="see `cadence synth -h` (default qwen2)")
    g.add_argument("--voice-map", help="OpenAI voice aliases: 'alloy=ryan,nova=serena' or a JSON file (docs/api.md)")
    g = p.add_argument_group("capacity and limits")
    g.add_argument("--max-streams", type=int, help=f"streams generating at once ({defaults['max_streams']})")
    g.add_argument("--max-queue", type=int, help=f"requests waiting beyond that, then 429 ({defaults['max_queue']})")
    g.add_argument("--kv-cache-memory", type=float, help="KV cache size in GB (default: a fraction of free memory)")
    g.add_argument(
        "--kv-cache-fraction",
        type=float,
        help=f"fraction of the device memory free once the codec is built (CPU: of 1 GB) for the KV cache when "
        f"--kv-cache-memory is not set "
        f"({defaults['kv_cache_fraction']})",
    )
    g.add_argument("--page-size", type=int, help=f"tokens per KV-cache page ({defaults['page_size']})")
    g.add_argument(
        "--prefill-token-budget",
        type=int,
        help=f"prompt tokens prefilled per engine step ({defaults['prefill_token_budget']})",
    )
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
    g.add_argument("--max-input-tokens", type=int, help=f"longest input in tokens ({defaults['max_input_tokens']})")
    g.add_argument(
        "--max-seq-tokens",
        type=int,
        help=f"longest request: prompt tokens + audio frames, 80 ms each ({defaults['max_seq_tokens']})",
    )
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
    g.add_argument("--warmup-frames", type=int, help="frames of the warm-up synthesis before /ready (8)")
    g.add_argument(
        "--runaway-guard",
        action=argparse.BooleanOptionalAction,
        help="stop generations that will not end on their own (on by default): more frames than the text can "
        "need, a loop of repeating codes, or seconds of silence; such a request ends with finish_reason runaway "
        "and the check that fired. --no-runaway-guard lets every generation run to EOS or max_new_tokens, as the "
        "official package does; the deployment file's engine.runaway sets each check (docs/deploy.md)",
    )
    # None marks an option not given on the command line: the deployment file, else DeployFile's
    # default, fills it (cmd_serve), so that a flag always overrides the file.
    add_cloning_arguments(p)
    p.set_defaults(func=cmd_serve, **dict.fromkeys(option_dests()))


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from ..deploy.config import apply_deploy_file
    from .api import create_app

    try:
        apply_deploy_file(args)
        state = build_state(args)
    except (ServeConfigError, OSError, ValueError) as e:  # SchemaError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    state.on_ready = lambda info: _banner(args, state, info)
    if not _is_loopback(args.host) and not state.settings.api_key:
        log.warning("listening on %s without an API key: anyone who can reach it can use it", args.host)

    config = uvicorn.Config(
        create_app(state),
        host=args.host,
        port=args.port,
        log_config=None,  # cadence's logging format for uvicorn's lines too
        access_log=False,  # cadence.access writes one structured line per synthesis instead
        # The server cuts open streams off at --drain-timeout (ServerState.begin_drain); uvicorn's own
        # limit is the backstop behind it, once those streams have said why they end.
        timeout_graceful_shutdown=args.drain_timeout + DRAIN_GRACE_S,
        ws="websockets-sansio",
        ws_max_size=state.settings.ws_max_message_bytes,
    )
    server = DrainingServer(config, state)
    logging.getLogger("uvicorn.error").addFilter(_DenialIsNotAnError())
    log.info("loading %s; GET /ready answers 200 once the model is warm", state.settings.model_name)
    try:
        asyncio.run(server.serve())
    finally:
        state.engine.kill()  # only if a forced exit skipped the graceful shutdown
    if server.force_exit and state.exit_code == 0:
        return 130  # a second Ctrl-C cut the drain short
    return state.exit_code


class ServeConfigError(Exception):
    """A configuration `cadence serve` refuses before starting anything (exit 2)."""


def build_state(args: argparse.Namespace) -> ServerState:
    """Everything the API process holds, from resolved options (apply_deploy_file first). Raises
    ServeConfigError for settings that cannot work; checkpoint errors propagate as they are."""
    from dataclasses import replace
    from pathlib import Path

    from ..deploy.placement import resolve_placements
    from ..engine.config import EngineConfig
    from ..engine.process_config import EngineProcessConfig
    from ..models import registry
    from .cloning import attach as attach_cloning
    from .state import ServerSettings, ServerState
    from .voices import VoiceTable, parse_voice_map

    # The API process needs only config and tokenizer (the model family's frontend); the weights load
    # in the engine process.
    source = _model_source(args)
    family = registry.family(source.family)
    frontend = family.load_frontend(source)
    try:
        voices = VoiceTable(frontend.config.speakers, parse_voice_map(args.voice_map))
        engine = EngineConfig(
            max_streams=args.max_streams,
            max_queue=args.max_queue,
            kv_cache_memory=args.kv_cache_memory,
            kv_cache_fraction=args.kv_cache_fraction,
            page_size=args.page_size,
            prefill_token_budget=args.prefill_token_budget,
            max_input_tokens=args.max_input_tokens,
            max_seq_tokens=args.max_seq_tokens,
            attention_backend=args.attention_backend,
            enforce_eager=args.enforce_eager,
            graph_buckets=tuple(args.graph_buckets) if args.graph_buckets else None,
            chunk_policy=args.chunk_policy
            if args.chunk_deadline is None
            else replace(args.chunk_policy, deadline=args.chunk_deadline),
            pipeline_codec=args.pipeline_codec,
            codec_dtype=args.codec_dtype,
            codec_tf32=args.codec_tf32,
            codec_decode=args.codec_decode,
            runaway=args.runaway if args.runaway_guard is None else replace(args.runaway, enabled=args.runaway_guard),
            pdl_max_rows=args.pdl_max_rows,
            slab_max_rows=args.slab_max_rows,
        )
        placements = resolve_placements(args.replicas, args.device, args.codec_device)
    except (ValueError, OSError) as e:
        raise ServeConfigError(str(e)) from None
    _warn_shared_devices(placements, engine)
    name = args.served_model_name or args.model
    settings = ServerSettings(
        model_name=name,
        api_key=args.api_key or None,
        max_input_chars=args.max_input_chars,
        long_form_chars=args.long_form_chars,
        long_form_pause=args.long_form_pause,
        max_body_bytes=args.max_body_bytes,
        request_timeout=args.request_timeout,
        drain_timeout=args.drain_timeout,
        ws_max_message_bytes=args.ws_max_message_bytes,
        ws_max_buffered_chars=args.ws_max_buffered_chars,
        ws_input_timeout=args.ws_input_timeout,
        max_concurrent_uploads=args.max_concurrent_uploads,
        ui=args.ui,
    )
    process = EngineProcessConfig(
        model_name=name,
        model=source,
        loader=family.load_runtime,
        engine=engine,
        warmup_frames=args.warmup_frames,
        cpu_threads=args.cpu_threads,
        log_level=logging.getLogger().level,
    )
    state = ServerState(settings, frontend, voices, _replica_configs(process, placements))
    checkpoint = Path(source.checkpoint) if source.checkpoint else None
    attach_cloning(state, args, checkpoint)  # a Base checkpoint: voice encoders, saved voices
    return state


def _model_source(args: argparse.Namespace) -> ModelSource:
    """The checkpoint (a hub id's files download once, with a progress bar), or with --dummy-weights
    the architecture to draw random weights for, as its model family locates it."""
    from ..models import registry

    random_preset = args.dummy_preset if args.dummy_weights else None
    return registry.model_source(
        args.model, random_preset=random_preset, dtype=args.dtype, tokenizer_regex=args.tokenizer_regex
    )


def _replica_configs(process: EngineProcessConfig, placements: list[Placement]) -> list[EngineProcessConfig]:
    """One engine process a replica: the same model and engine config on the replica's devices."""
    from dataclasses import replace

    several = len(placements) > 1
    return [
        replace(
            process,
            model=replace(process.model, device=p.device),
            codec_device=p.codec_device,
            replica=i if several else None,
        )
        for i, p in enumerate(placements)
    ]


def _warn_shared_devices(placements, engine) -> None:
    devices = [p.device for p in placements if p.device.startswith("cuda")]
    if len(set(devices)) < len(devices) and engine.kv_cache_memory is None:
        # Replicas load at once and would each take the same fraction of what is free.
        log.warning("several replicas share a GPU: set kv_cache_memory (GB per replica) so that their KV caches fit")


def _banner(args: argparse.Namespace, state: ServerState, info) -> None:
    settings = state.settings
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    url = f"http://{host}:{args.port}"
    auth = f' -H "Authorization: Bearer ${API_KEY_ENV}"' if settings.api_key else ""
    # a request holds at most max_seq_tokens (prompt + frames): more cache than that per stream is not audio
    per_stream = min(info.kv_tokens / max(1, info.max_streams), args.max_seq_tokens) * 0.08
    streams = f"{info.max_streams} stream{'s' if info.max_streams != 1 else ''}"
    weights = "RANDOM weights: the audio is noise" if info.random_weights else "checkpoint weights"
    # a whole file: a streamed WAV's header cannot know its length (see docs/api.md)
    example = {"model": info.model, "input": "Hello from cadence.", "voice": "ryan", "response_format": "wav"}
    example["stream"] = False
    if info.random_weights:
        example["max_new_tokens"] = 50  # random weights seldom stop on their own: 4 s of audio
    where = info.device if not info.codec_device else f"{info.device} (codec on {info.codec_device})"
    lines = [
        f"cadence is serving {info.model} ({info.model_size}, {weights}) on {where} in {info.dtype}",
        f"  listening on http://{args.host}:{args.port} (OpenAI base URL {url}/v1)",
        f"  capacity: {streams} generating + {info.max_queue} queued; KV cache "
        f"{info.kv_bytes / 2**30:.2f} GB = {info.kv_tokens} tokens (up to ~{per_stream:.0f} s of audio a stream "
        "when all are busy)",
        f"  warm-up took {info.warmup_seconds:.2f} s; docs: docs/api.md",
    ]
    if len(state.engine.replicas) > 1:
        devices = ", ".join(r.placement for r in state.engine.replicas)
        lines.insert(2, f"  {len(state.engine.replicas)} replicas on {devices}; capacity and KV cache per replica:")
    if settings.ui:
        lines.append(f"  playground: open {url}/ in a browser")
    lines += [
        f"  try: curl {url}/v1/audio/speech{auth} -H 'Content-Type: application/json' -d '{json.dumps(example)}' "
        "-o hello.wav",
    ]
    print("\n".join(lines), flush=True)


class _DenialIsNotAnError(logging.Filter):
    """uvicorn's websockets-sansio protocol logs an error for a WebSocket handshake the app refuses
    with an HTTP response (401/503 through the ASGI denial extension), though nothing went wrong;
    it logs the refusal itself at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing handshake" not in record.getMessage()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with cadence's shutdown: a signal starts the drain (new requests get 503,
    open streams finish within --drain-timeout), and a drained server exits 0."""

    def __init__(self, config, state):
        super().__init__(config)
        self.state = state
        state.request_exit = self.request_exit

    def request_exit(self) -> None:
        self.state.begin_drain()
        self.should_exit = True

    def handle_exit(self, sig: int, frame) -> None:
        self.state.begin_drain()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises a caught signal once it has shut down, so SIGTERM would still kill the
        # process (exit -15) after a clean drain; here the exit code says how the server ended.
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
