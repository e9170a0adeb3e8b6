"""`cadence serve`: the OpenAI-compatible speech server (API process + engine-core process)."""

from __future__ import annotations

import argparse
import asyncio
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

from ..cli_options import DEFAULT_MODEL

if TYPE_CHECKING:
    from ..deploy.placement import Placement
    from ..engine.process_config import EngineProcessConfig, ModelSource
    from ..models.interfaces import ModelCapabilities
    from .state import ServerState

log = logging.getLogger("cadence.server")

API_KEY_ENV = "CADENCE_API_KEY"
DRAIN_GRACE_S = 5.0  # after the drain timeout, for cut-off streams to send their error and close


def register(subparsers: argparse._SubParsersAction) -> None:
    from ..deploy.config import DeployFile, option_dests
    from . import serve_options as o

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
    o.add_placement_options(p)
    o.add_model_options(p)
    o.add_codec_options(p)
    o.add_kernel_options(p, defaults)
    o.add_capacity_options(p, defaults)
    o.add_request_limit_options(p)
    o.add_cloning_options(p)
    # None marks an option not given on the command line: the deployment file, else DeployFile's
    # default, fills it (cmd_serve), so that a flag always overrides the file.
    p.set_defaults(func=cmd_serve, **dict.fromkeys(option_dests()))


def cmd_serve(args: argparse.Namespace) -> int:
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
        server.run()  # on uvicorn's choice of event loop: uvloop where it is installed
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
    from ..cli_options import engine_config_from_args
    from ..deploy.placement import resolve_placements
    from ..engine.process_config import EngineProcessConfig
    from ..models import registry
    from .state import ServerSettings, ServerState
    from .voices import VoiceTable, parse_voice_map

    # The API process needs only config and tokenizer (the model family's frontend); the weights load
    # in the engine process.
    source = _model_source(args)
    family = registry.family(source.family)
    frontend = family.load_frontend(source)
    try:
        voices = VoiceTable(frontend.capabilities().voices, parse_voice_map(args.voice_map))
        engine = engine_config_from_args(args)
        engine.kernels.check_file()
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
    attach_cloning(state, args, source)  # a model that clones (Base): voice encoder, saved voices
    return state


def attach_cloning(state: ServerState, args: argparse.Namespace, source: ModelSource) -> None:
    """Give a server whose model clones voices its voice encoder and saved voices."""
    from ..models import registry
    from .cloning import VoiceCloning
    from .serve_options import cloning_settings

    if not state.frontend.capabilities().clones_voices:
        return
    load_encoder = registry.family(source.family).load_voice_encoder
    if load_encoder is None:
        raise ServeConfigError(f"the model family {source.family} clones voices but gives no voice encoder")
    settings = cloning_settings(args)
    cloning = VoiceCloning.create(load_encoder(source, settings.device), settings)
    cloning.count_tokens = state.frontend.count_tokens
    cloning.uploads = asyncio.Semaphore(state.settings.max_concurrent_uploads)
    state.cloning = cloning
    state.voices.library = cloning.library
    log.info("voice cloning: encoders on %s, saved voices in %s", cloning.encoder.device, cloning.library.directory)


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


def example_request(caps: ModelCapabilities, model: str, random_weights: bool) -> dict | None:
    """A speech request the served model takes as it is, for the start-up banner: a built-in voice,
    or a voice description; None for a model that speaks only cloned voices (reference audio)."""
    # a whole file: a streamed WAV's header cannot know its length (see docs/api.md)
    example: dict = {"model": model, "input": "Hello from cadence.", "response_format": "wav", "stream": False}
    if caps.voices:
        example["voice"] = "ryan" if "ryan" in caps.voices else caps.voices[0]
    elif caps.instructions == "voice description":
        example["instructions"] = "A warm, calm narrator's voice."
    else:
        return None
    if random_weights:
        example["max_new_tokens"] = 50  # random weights seldom stop on their own: 4 s of audio
    return example


def _banner(args: argparse.Namespace, state: ServerState, info) -> None:
    settings = state.settings
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    url = f"http://{host}:{args.port}"
    auth = f' -H "Authorization: Bearer ${API_KEY_ENV}"' if settings.api_key else ""
    # a request holds at most max_seq_tokens (prompt + frames): more cache than that per stream is not audio
    per_stream = min(info.kv_tokens / max(1, info.max_streams), args.max_seq_tokens) * 0.08
    streams = f"{info.max_streams} stream{'s' if info.max_streams != 1 else ''}"
    weights = "RANDOM weights: the audio is noise" if info.random_weights else "checkpoint weights"
    example = example_request(state.frontend.capabilities(), info.model, info.random_weights)
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
    if example is None:
        lines.append("  try: save a voice from reference audio (docs/api.md: Voice cloning and saved voices)")
    else:
        body, json_type = json.dumps(example), "-H 'Content-Type: application/json'"
        lines.append(f"  try: curl {url}/v1/audio/speech{auth} {json_type} -d '{body}' -o hello.wav")
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

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
        parser = self.config.http_protocol_class.__module__.rsplit(".", 1)[-1].removesuffix("_impl")
        log.info("HTTP served on the %s event loop, requests parsed by %s", loop, parser)

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
