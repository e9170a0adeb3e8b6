"""The served-performance protocol as one command: a `cadence serve` for a model size, Poisson arrivals
at each rate, and the table of time to first audible audio and playback gaps against offered load.

    python benchmarks/served_protocol.py --size 1.7b --out runs/h100-1.7b
    python benchmarks/served_protocol.py --size 0.6b --rates 1 10 --requests 200 --seeds 0 --out runs/quick
    python benchmarks/served_protocol.py --size 1.7b --dataset seed-tts --dataset-path seedtts_testset/en ...
    python benchmarks/served_protocol.py --merge run-a/protocol.json run-b/protocol.json --out runs/h100-1.7b

It starts `cadence serve` on a full-size random checkpoint of the size (or `--checkpoint DIR`), its
processes pinned to every CPU core but the last `--client-cores`, which the bench client takes, so the
client never competes with the server; its open-loop arrivals are dealt over one client process a
core (`--client-processes`), so that no single Python event loop falls behind at 60-80 requests/s.
Then `cadence bench` runs open loop (Poisson arrivals) at each rate with each seed: `--requests`
measured arrivals per trial (or `--max-seconds`, whichever comes first) after `--warmup` seconds of
warm-up arrivals. The defaults are the protocol of the served
comparison in docs/benchmarks.md: rates 1, 4, 10, 20, 40, 60 and 80 requests/s, seeds 0, 1 and 2,
1,000 requests a rate, voice ryan, raw pcm, the built-in English sentences with `--fixed-frames auto`
(random weights do not stop on their own). `--dataset seed-tts` takes the peer's prompt list instead.

Writes OUT/bench/<rate>/ (the bench's results.json, requests.csv and plots), OUT/protocol.json and
OUT/protocol.md (one column a rate: TTFA p50/p95/p99, requests with a playback gap, failures,
delivered requests/s; then where the first audio's time goes: the p50 and p95 of each stage of its
path in the server, from the access log, and of what lies outside them, the client's TTFA less the
server's own for the same request), OUT/protocol.png (TTFA percentiles and the share of
requests with a gap against load) and OUT/serve.log. protocol.json keeps each seed's p95 TTFA,
gaps, failures and client stall on its own (the table shows the first two by seed), every completed
request's TTFA and first-audio stages, and describes each request whose playback ran dry (its arrival in the
trial, TTFA, stalls, longest wait between chunks at the client and, from the access log, at the
server; the table's "longest playback stall"), and each server process's garbage collections while
the rate ran (from /metrics: how many, and the longest since start), the pauses that stop every
stream of a process at once, and the client's own longest event-loop stall. So
`--merge` can write the table and plot of several runs without measuring anything: rates measured
in separate runs (device calls too short for all of them) side by side, and a rate measured by
several runs with different seeds pooled over all their requests, so the full protocol can be
gathered a few rates or seeds a call. A rate two runs measured with the same seed is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from protocol_table import OUTSIDE, GapRequest, GcDuring, Row, SeedResult, merge, table, write  # noqa: E402

from cadence.bench.aggregate import Aggregate, aggregate  # noqa: E402
from cadence.bench.client import ServerConfig  # noqa: E402
from cadence.bench.load import LoadConfig, Trial  # noqa: E402
from cadence.bench.metrics import RequestMetrics, request_metrics  # noqa: E402
from cadence.bench.run import BenchConfig, WorkloadSpec, run_bench  # noqa: E402
from cadence.bench.workload import parse_fixed_frames  # noqa: E402

SIZES = {"0.6b": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "1.7b": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"}
RATES = [1.0, 4.0, 10.0, 20.0, 40.0, 60.0, 80.0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="1.7b", help="model size (default 1.7b)")
    p.add_argument("--checkpoint", help="a checkpoint directory instead of a full-size random one of --size")
    p.add_argument("--url", help="measure a server already running here instead of starting one (its log: --log)")
    p.add_argument("--log", help="with --url: the server's log, for the first-audio stages")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--merge", nargs="+", metavar="PROTOCOL_JSON", help="only tabulate these runs' protocol.json")
    p.add_argument("--device", default="cuda", help="the server's device (default cuda)")
    p.add_argument("--rates", type=float, nargs="+", default=RATES, help="requests/s (default 1 4 10 20 40 60 80)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one trial a seed (default 0 1 2)")
    p.add_argument("--requests", type=int, default=1000, help="measured arrivals per trial (default 1000)")
    p.add_argument("--max-seconds", type=float, help="end each trial's arrivals after this many seconds too")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of warm-up arrivals per trial (default 5)")
    p.add_argument("--client-cores", type=int, default=2, help="CPU cores kept for the client (default 2)")
    p.add_argument(
        "--client-processes",
        type=int,
        help="client processes the arrivals are dealt over (cadence bench --client-processes; default: one a "
        "client core)",
    )
    p.add_argument("--dataset", default="builtin", choices=["builtin", "seed-tts"], help="the prompts")
    p.add_argument("--dataset-path", help="seed-tts: meta.lst or its directory")
    p.add_argument("--fixed-frames", default="auto", help="auto, N, or none (real weights stop on their own)")
    p.add_argument("--port", type=int, default=8123)
    p.add_argument(
        "server_args", nargs="*", default=[], help="after --: options for cadence serve (default: its defaults)"
    )
    return p.parse_args(argv)


def split_cores(client_cores: int) -> tuple[set[int], set[int]]:
    """(server cores, client cores): the client gets the last ones; on a tiny machine they share."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= client_cores:
        return set(cores), set(cores)
    return set(cores[:-client_cores]), set(cores[-client_cores:])


def checkpoint_for(args: argparse.Namespace, out: Path) -> Path:
    if args.checkpoint:
        return Path(args.checkpoint)
    path = out / f"random-{args.size}"
    if not (path / "model.safetensors").exists():
        cmd = [sys.executable, "-m", "cadence.cli", "-q", "checkpoint", "random", "--from", SIZES[args.size]]
        subprocess.run([*cmd, "--preset", "full", "--out", str(path), "--seed", "0"], check=True)
    return path


def start_server(args: argparse.Namespace, checkpoint: Path, cores: set[int], log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cadence.cli", "serve", str(checkpoint), "--device", args.device]
    cmd += ["--port", str(args.port), "--served-model-name", "protocol", *args.server_args]
    print("$", " ".join(cmd), file=sys.stderr)
    return subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, preexec_fn=lambda: os.sched_setaffinity(0, cores)
    )


def wait_ready(url: str, server: subprocess.Popen, log: Path, timeout: float = 900) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if server.poll() is not None:
            raise SystemExit(f"cadence serve exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/ready", timeout=5).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"cadence serve was not ready within {timeout:g} s")


def run_protocol(args: argparse.Namespace, url: str, out: Path, log: Path) -> list[Row]:
    """One bench run a rate (all seeds), so that the server's access-log lines of each rate can be
    told apart by time."""
    fixed = None if args.fixed_frames == "none" else parse_fixed_frames(args.fixed_frames)
    rows = []
    for rate in args.rates:
        config = BenchConfig(
            server=ServerConfig(base_url=url, model="protocol", voice="ryan", language="English", timeout_s=120),
            load=LoadConfig(
                rates=[rate],
                num_requests=args.requests,
                duration_s=args.max_seconds,
                warmup_s=args.warmup,
                seeds=list(args.seeds),
                fixed_frames=fixed,
                client_processes=args.client_processes,
            ),  # fmt: skip
            workload=WorkloadSpec(
                kind=args.dataset, path=args.dataset_path, languages=["en"] if args.dataset == "builtin" else None
            ),
            output_dir=out / "bench" / f"{rate:g}",
            label=f"cadence-{args.size}",
            progress=sys.stderr.isatty(),
        )
        start, gc_before = time.time(), gc_counters(url)
        result = run_bench(config)
        lines = access_lines(log, start, time.time())
        gc = gc_during(gc_before, gc_counters(url))
        server = ServerSide(first_audio_stages(lines), server_ttfa(lines), server_chunk_gaps(lines), gc)
        rows += [row_of(a, result.trials, server) for a in result.points() if a.mode == "open"]
    return rows


GcCounters = dict[str, tuple[float, float, float]]  # process -> (collections, seconds, longest seconds)


def gc_counters(url: str) -> GcCounters:
    """Each server process's garbage-collection gauges from /metrics; empty where it has none."""
    names = {"cadence_gc_collections": 0, "cadence_gc_seconds": 1, "cadence_gc_longest_pause_seconds": 2}
    values: dict[str, list[float]] = {}
    text = httpx.get(url + "/metrics", timeout=30, trust_env=False).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names and "process" in sample.labels:
                values.setdefault(sample.labels["process"], [0.0, 0.0, 0.0])[names[sample.name]] = sample.value
    return {process: (v[0], v[1], v[2]) for process, v in values.items()}


def gc_during(before: GcCounters, after: GcCounters) -> dict[str, GcDuring]:
    return {
        p: GcDuring(
            int(after[p][0] - before[p][0]), round((after[p][1] - before[p][1]) * 1e3, 2), round(after[p][2] * 1e3, 2)
        )
        for p in after
        if p in before
    }


@dataclass(frozen=True)
class ServerSide:
    """What the server says of a rate's requests: their first-audio stages (ms), each one's time to
    first audio and longest wait between chunks (ms, by request id), and its processes' garbage
    collections."""

    stages: dict[str, list[float]]
    ttfa: dict[str, float]
    chunk_gaps: dict[str, float]
    gc: dict[str, GcDuring]


def row_of(a: Aggregate, trials: list[Trial], server: ServerSide) -> Row:
    """The table's row of one rate: the bench's pooled counts, with each completed request's TTFA
    kept for pooling with other runs and the requests whose playback ran dry described."""
    mine = [t for t in trials if t.point.mode == a.mode and t.point.value == a.load]
    ttfa, outside, gaps = [], [], []
    for trial in mine:
        for record in trial.measured:
            if not record.ok:
                continue
            m, rid = request_metrics(record.exchange.timeline), record.exchange.request_id or ""
            if m.ttfa_s is not None:
                ttfa.append(m.ttfa_s * 1000)
                if (own := server.ttfa.get(rid)) is not None:
                    outside.append(m.ttfa_s * 1000 - own)
            if m.underruns:
                server_gap = server.chunk_gaps.get(rid)
                gaps.append(gap_request(trial.seed, record.scheduled_s, m, server_gap))
    counts = (a.sent, a.completed, a.requests_with_underruns)
    stall = ms(a.client_loop_lag_s.max)  # the client's longest event-loop stall, its trials pooled
    by_seed = [seed_result(t) for t in mine]
    stages = server.stages | ({OUTSIDE: outside} if outside else {})
    return Row.measured(a.load, a.seeds, counts, a.window_s, ttfa, stages, gaps, server.gc, stall, by_seed)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def seed_result(trial: Trial) -> SeedResult:
    """One trial of a rate on its own."""
    a = aggregate([trial])
    return SeedResult(trial.seed, ms(a.ttfa_s.p95), a.requests_with_underruns, a.failed, ms(a.client_loop_lag_s.max))


def gap_request(seed: int, arrival_s: float | None, m: RequestMetrics, server_gap_ms: float | None) -> GapRequest:
    return GapRequest(
        seed, round(arrival_s or 0.0, 3), ms(m.ttfa_s), m.underruns, ms(m.stall_s), ms(m.max_gap_s), server_gap_ms
    )


ACCESS_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO cadence\.access: (\{.*\})$")


def access_lines(log: Path, start: float, end: float) -> list[dict]:
    """The access-log lines of successful requests written in [start, end] (warm-up requests
    included: the log cannot tell them apart)."""
    from datetime import datetime

    lines = []
    for line in log.read_text(errors="replace").splitlines():
        m = ACCESS_LINE.match(line)
        if not m:
            continue
        when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        entry = json.loads(m.group(2))
        if start <= when <= end and entry.get("status") == 200:
            lines.append(entry)
    return lines


def first_audio_stages(lines: list[dict]) -> dict[str, list[float]]:
    """Each first-audio stage (ms) of those lines."""
    values: dict[str, list[float]] = {}
    for entry in lines:
        for stage, ms in entry.get("first_audio_ms", {}).items():
            values.setdefault(stage, []).append(float(ms))
    return values


def server_ttfa(lines: list[dict]) -> dict[str, float]:
    """Request id -> the server's own time to first audio (ms): the route's start to the first chunk."""
    return {e["id"]: float(e["ttfa_ms"]) for e in lines if e.get("id") and e.get("ttfa_ms") is not None}


def server_chunk_gaps(lines: list[dict]) -> dict[str, float]:
    """Request id -> the longest wait between two of its chunks reaching the API process (ms)."""
    return {e["id"]: float(e["max_chunk_gap_ms"]) for e in lines if e.get("id") and "max_chunk_gap_ms" in e}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        try:
            print(table(merge([Path(p) for p in args.merge], out)))
        except ValueError as e:
            raise SystemExit(f"served_protocol.py --merge: {e}") from None
        return 0
    server_cores, client_cores = split_cores(args.client_cores)
    args.client_processes = args.client_processes or len(client_cores)
    server, ready_s, checkpoint = None, None, args.checkpoint
    if args.url:
        url, log = args.url.rstrip("/"), Path(args.log) if args.log else out / "no-server-log"
        log.touch()
    else:
        checkpoint = checkpoint_for(args, out)
        url, log = f"http://127.0.0.1:{args.port}", out / "serve.log"
        server = start_server(args, checkpoint, server_cores, log)
    try:
        if server is not None:
            ready_s = round(wait_ready(url, server, log), 1)
            print(f"server ready in {ready_s:.0f} s", file=sys.stderr)
        print(f"client on cores {sorted(client_cores)}, {args.client_processes} process(es)", file=sys.stderr)
        os.sched_setaffinity(0, client_cores)
        rows = run_protocol(args, url, out, log)
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(120)
            except subprocess.TimeoutExpired:
                server.kill()
    summary = {
        "size": args.size,
        "checkpoint": str(checkpoint),
        "server_args": args.server_args,
        "ready_s": ready_s,
        "requests_per_trial": args.requests,
        "seeds": args.seeds,
        "client_processes": args.client_processes,
    }
    write(out, summary, rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
