"""`cadence bench` and `cadence bench compare`: argparse wiring over run.py and compare.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from .defaults import (
    AUDIBLE_CONSECUTIVE,
    AUDIBLE_DBFS,
    DEFAULT_MODEL,
    DEFAULT_SAMPLE_RATE,
    DEFAULT_URL,
    LANGUAGE_NAMES,
    MEASURABLE_FORMATS,
)

API_KEY_ENV = "CADENCE_BENCH_API_KEY"  # deliberately not OPENAI_API_KEY: never send that key to a server by default
DEFAULT_CLOSED_REQUESTS = 32
DEFAULT_OPEN_DURATION_S = 60.0

DESCRIPTION = """\
Load-test any server that speaks OpenAI's POST /v1/audio/speech (cadence, vLLM-Omni, SGLang-Omni, ...)
and report streaming latency and throughput, measured on the client with a monotonic clock.

Load models
  closed loop  --concurrency 1 4 16: N workers, each sends its next request when the last one ends.
  open loop    --rate 1 5 10: Poisson arrivals at R requests/s, independent of the server, seeded by
               --seeds; --warmup seconds of arrivals first, excluded from the numbers.
  A trial ends after --num-requests measured requests or --duration seconds, whichever comes first.

Metrics (per request; times in seconds from the start of sending, tables show ms)
  TTFB        first byte of the response body.
  TTFA        first *audible* audio: the client holds the whole first 20 ms window (10 ms hop) whose
              DC-removed RMS is >= --audible-dbfs (default -45 dBFS) for --audible-windows (default 2)
              windows in a row.
  E2E         last byte of the response.
  RTF         wall / audio = E2E / audio duration. Below 1 is faster than real time.
  gaps        waits between consecutive audio chunks.
  underruns   playback starts at the first audio chunk with no jitter buffer; each chunk arriving after
              the audio before it has finished playing is an underrun (count and total stall seconds).
  Aggregates: p50/p90/p95/p99/max over completed requests, completed requests/s and audio seconds per
  wall second over the measuring window, failures counted by class (http_429, timeout, ...).

Outputs (in --output-dir): results.json (config, environment, aggregates), requests.csv (one row per
request, warm-up flagged), ttfa_cdf.png, ttfa_vs_<concurrency|rate>.png, throughput_vs_<...>.png.
"""

EPILOG = """\
examples:
  cadence bench --url http://127.0.0.1:8000 --concurrency 1 4 16 --num-requests 64
  cadence bench --rate 1 5 10 --duration 300 --warmup 30 --seeds 0 1 2 \\
      --dataset seed-tts --dataset-path seedtts_testset/en --voice ryan
  cadence bench --url http://gpu-box:8091 --model Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice \\
      --stream-format sse --fixed-frames auto --concurrency 8 --label vllm-omni
  cadence bench compare runs/cadence/results.json runs/vllm-omni/results.json
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `bench` (and `bench compare`) to cadence's subcommands."""
    p = subparsers.add_parser(
        "bench",
        help="load-test an OpenAI-compatible speech server and report TTFA, RTF, underruns",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_server_args(p)
    _add_workload_args(p)
    _add_load_args(p)
    _add_output_args(p)
    p.set_defaults(func=cmd_bench)

    sub = p.add_subparsers(dest="bench_command", metavar="{compare}")
    c = sub.add_parser(
        "compare",
        help="print two runs side by side with ratios",
        description="Print the load points two results.json files share, metric by metric, with b/a ratios "
        "and which run is better (lower latency and RTF = wall/audio, higher throughput).",
    )
    c.add_argument("a", help="results.json of the first run (a)")
    c.add_argument("b", help="results.json of the second run (b)")
    c.set_defaults(func=cmd_compare)


def _add_server_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server")
    g.add_argument("--url", default=DEFAULT_URL, help="base URL (default %(default)s)")
    g.add_argument("--endpoint", default="/v1/audio/speech", help="speech path under --url (default %(default)s)")
    g.add_argument("--model", default=DEFAULT_MODEL, help="`model` field sent (default %(default)s)")
    g.add_argument("--api-key", default=os.environ.get(API_KEY_ENV), help=f"Bearer token (default: ${API_KEY_ENV})")
    g.add_argument("--voice", default="ryan", help="`voice` field (default %(default)s)")
    g.add_argument(
        "--language",
        default="data",
        help="`language` field: data = each utterance's language (Auto where the dataset does not say), "
        "none = leave the field out, anything else is sent as given (e.g. Auto, English) (default data)",
    )
    g.add_argument(
        "--format",
        dest="response_format",
        default="pcm",
        choices=MEASURABLE_FORMATS,
        help="`response_format`: pcm (raw 16-bit mono) or wav (streaming header + PCM) (default pcm)",
    )
    g.add_argument(
        "--stream-format",
        default="audio",
        choices=["audio", "sse"],
        help="audio = raw streamed body; sse = speech.audio.delta events (default audio)",
    )
    g.add_argument(
        "--sample-rate",
        type=int,
        default=DEFAULT_SAMPLE_RATE,
        help="Hz of pcm bodies; a WAV header overrides it (default %(default)s)",
    )
    g.add_argument(
        "--field",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra JSON field, repeatable; VALUE is parsed as JSON when it can be (seed=1, stream=true)",
    )
    g.add_argument("--extra-json", help="a JSON object of extra fields, merged before --field")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds for a whole request (default 120)")


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload")
    g.add_argument(
        "--dataset",
        default="builtin",
        choices=["builtin", "seed-tts", "text"],
        help="builtin = 40 sentences in 10 languages; seed-tts = a Seed-TTS eval meta.lst "
        "(utt_id|prompt_text|prompt_wav|text); text = one utterance per line (default builtin)",
    )
    g.add_argument("--dataset-path", help="seed-tts: meta.lst or the directory holding it; text: the file")
    g.add_argument(
        "--dataset-language",
        choices=sorted(LANGUAGE_NAMES),
        help="language of a seed-tts/text dataset (seed-tts guesses from an en/ or zh/ directory)",
    )
    g.add_argument(
        "--languages", nargs="+", metavar="CODE", help=f"builtin only: keep these ({' '.join(LANGUAGE_NAMES)})"
    )
    g.add_argument("--limit", type=int, help="use only the first N utterances (requests cycle through them)")
    g.add_argument(
        "--fixed-frames",
        metavar="auto|N",
        help="force every answer's length (sends max_new_tokens + ignore_eos), for random-weight "
        "servers: N frames of 80 ms, or auto = drawn per request from the text's length (seeded)",
    )


def _add_load_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("load")
    g.add_argument("--concurrency", type=int, nargs="+", default=[], metavar="N", help="closed-loop points")
    g.add_argument("--rate", type=float, nargs="+", default=[], metavar="R", help="open-loop points, requests/s")
    g.add_argument(
        "--num-requests",
        type=int,
        help=f"measured requests per trial (default {DEFAULT_CLOSED_REQUESTS} for closed-loop-only runs)",
    )
    g.add_argument(
        "--duration",
        type=float,
        help=f"seconds per trial: open-loop arrival window after warm-up, closed-loop sending time "
        f"(default {DEFAULT_OPEN_DURATION_S:g} when --rate is given)",
    )
    g.add_argument("--warmup", type=float, default=5.0, help="open loop: seconds of warm-up arrivals (default 5)")
    g.add_argument("--warmup-requests", type=int, default=2, help="closed loop: warm-up requests (default 2)")
    g.add_argument("--seeds", type=int, nargs="+", default=[0], help="one trial per seed per point (default 0)")
    g.add_argument("--max-inflight", type=int, default=4096, help="most requests pending at once (default 4096)")
    g.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="open loop: deal each trial's arrivals over this many client processes, each with its own event loop "
        "and connections, so that one busy Python loop does not delay sends and timestamps at high rates "
        "(default 1; closed loops run in one). Watch client_loop_lag_s: give it more when that grows",
    )
    g.add_argument("--audible-dbfs", type=float, default=AUDIBLE_DBFS, help="audible threshold (default -45)")
    g.add_argument(
        "--audible-windows",
        type=int,
        default=AUDIBLE_CONSECUTIVE,
        help="consecutive audible 20 ms windows needed (default 2)",
    )


def _add_output_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("output")
    g.add_argument(
        "--output-dir",
        help="where files go (default bench-results/<local time> in the current directory; a checkout's "
        ".gitignore leaves bench-results/ out of git)",
    )
    g.add_argument("--label", help="name of this run in tables and compare (e.g. cadence-h200)")
    g.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    g.add_argument("--no-progress", action="store_true", help="no live progress bars")


def parse_fields(fields: list[str], extra_json: str | None) -> dict[str, Any]:
    """--extra-json then each --field KEY=VALUE (VALUE as JSON when it parses, else a string)."""
    out: dict[str, Any] = {}
    if extra_json:
        try:
            parsed = json.loads(extra_json)
        except json.JSONDecodeError as e:
            raise ValueError(f"--extra-json is not valid JSON: {e}") from e
        if not isinstance(parsed, dict):
            raise ValueError("--extra-json must be a JSON object, e.g. '{\"seed\": 1}'")
        out.update(parsed)
    for item in fields:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--field takes KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def build_config(args: argparse.Namespace):
    """BenchConfig from parsed arguments; ValueError (or WorkloadError) names the bad option."""
    from .client import ServerConfig
    from .load import LoadConfig
    from .metrics import AudibleRule
    from .run import BenchConfig, WorkloadSpec
    from .workload import parse_fixed_frames

    concurrencies, rates = list(args.concurrency), list(args.rate)
    if not concurrencies and not rates:
        concurrencies = [1]
    num_requests, duration = args.num_requests, args.duration
    if num_requests is None and duration is None:
        if rates:
            duration = DEFAULT_OPEN_DURATION_S
        else:
            num_requests = DEFAULT_CLOSED_REQUESTS
    server = ServerConfig(
        base_url=args.url,
        endpoint=args.endpoint,
        model=args.model,
        api_key=args.api_key,
        voice=args.voice,
        language=args.language,
        response_format=args.response_format,
        stream_format=args.stream_format,
        sample_rate=args.sample_rate,
        extra_fields=parse_fields(args.field, args.extra_json),
        timeout_s=args.timeout,
    )
    load = LoadConfig(
        concurrencies=concurrencies,
        rates=rates,
        num_requests=num_requests,
        duration_s=duration,
        warmup_s=args.warmup,
        warmup_requests=args.warmup_requests,
        seeds=list(args.seeds),
        max_inflight=args.max_inflight,
        client_processes=args.client_processes,
        fixed_frames=parse_fixed_frames(args.fixed_frames) if args.fixed_frames is not None else None,
    )
    load.validate()
    if args.audible_windows < 1:
        raise ValueError("--audible-windows must be at least 1")
    out = Path(args.output_dir) if args.output_dir else Path("bench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    workload = WorkloadSpec(args.dataset, args.dataset_path, args.dataset_language, args.languages, args.limit)
    return BenchConfig(
        server=server,
        load=load,
        workload=workload,
        audible=AudibleRule(threshold_dbfs=args.audible_dbfs, consecutive=args.audible_windows),
        output_dir=out,
        label=args.label,
        plots=not args.no_plots,
        progress=not args.no_progress,
    )


def cmd_bench(args: argparse.Namespace) -> int:
    import logging

    from rich.console import Console

    from .report import print_summary
    from .run import run_bench
    from .workload import WorkloadError

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would bury the progress bars
    try:
        config = build_config(args)
        console = Console()
        result = run_bench(config, console, argv=sys.argv)
    except (ValueError, WorkloadError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_summary(result, console)
    console.print(f"wrote {', '.join(str(f) for f in result.files)}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .compare import CompareError, run_compare

    try:
        return run_compare(args.a, args.b)
    except CompareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
