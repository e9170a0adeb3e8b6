"""The served-performance protocol as one command: a `cadence serve` for a model size, Poisson arrivals
at each rate, and the table of time to first audible audio and playback gaps against offered load.

    python benchmarks/served_protocol.py --size 1.7b --out runs/h100-1.7b
    python benchmarks/served_protocol.py --size 0.6b --rates 1 10 --requests 200 --seeds 0 --out runs/quick
    python benchmarks/served_protocol.py --size 1.7b --dataset seed-tts --dataset-path seedtts_testset/en ...
    python benchmarks/served_protocol.py --merge run-a/protocol.json run-b/protocol.json --out runs/h100-1.7b

It starts `cadence serve` on a full-size random checkpoint of the size (or `--checkpoint DIR`), its
processes pinned to every CPU core but the last `--client-cores`, which the bench client takes, so the
client never competes with the server. Then `cadence bench` runs open loop (Poisson arrivals) at each
rate with each seed: `--requests` measured arrivals per trial (or `--max-seconds`, whichever comes
first) after `--warmup` seconds of warm-up arrivals. The defaults are the protocol of the served
comparison in docs/benchmarks.md: rates 1, 4, 10, 20, 40, 60 and 80 requests/s, seeds 0, 1 and 2,
1,000 requests a rate, voice ryan, raw pcm, the built-in English sentences with `--fixed-frames auto`
(random weights do not stop on their own). `--dataset seed-tts` takes the peer's prompt list instead.

Writes OUT/bench/<rate>/ (the bench's results.json, requests.csv and plots), OUT/protocol.json and
OUT/protocol.md (one column a rate: TTFA p50/p95/p99, requests with a playback gap, failures,
delivered requests/s; then where the first audio's time goes: the p50 and p95 of each stage of its
path in the server, from the access log), OUT/protocol.png (TTFA percentiles and the share of
requests with a gap against load) and OUT/serve.log. `--merge` writes the table and plot of several
runs' protocol.json (rates measured in separate runs, e.g. device calls too short for all of them)
without measuring anything: each rate's row is taken whole from the run that measured it.
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

from cadence.bench.aggregate import Aggregate  # noqa: E402
from cadence.bench.client import ServerConfig  # noqa: E402
from cadence.bench.load import LoadConfig  # noqa: E402
from cadence.bench.metrics import summarize  # noqa: E402
from cadence.bench.run import BenchConfig, WorkloadSpec, run_bench  # noqa: E402
from cadence.bench.workload import parse_fixed_frames  # noqa: E402

SIZES = {"0.6b": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "1.7b": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"}
RATES = [1.0, 4.0, 10.0, 20.0, 40.0, 60.0, 80.0]
STAGES = ("api", "to_engine", "queue", "prefill", "codec", "to_api")  # the access log's first_audio_ms


@dataclass(frozen=True)
class Row:
    """One rate of the protocol's table."""

    rate: float
    sent: int
    completed: int
    failed: int
    ttfa_ms: tuple[float | None, float | None, float | None]  # p50, p95, p99
    with_gap: int  # completed requests whose playback stalled at least once
    requests_per_s: float | None
    stages_ms: dict[str, tuple[float, float]]  # the server's first-audio path: stage -> (p50, p95)

    @classmethod
    def of(cls, a: Aggregate, stages_ms: dict[str, tuple[float, float]]) -> Row:
        ms = [None if v is None else round(v * 1000, 1) for v in (a.ttfa_s.p50, a.ttfa_s.p95, a.ttfa_s.p99)]
        return cls(
            a.load, a.sent, a.completed, a.failed, tuple(ms), a.requests_with_underruns, a.requests_per_s, stages_ms
        )


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
            ),  # fmt: skip
            workload=WorkloadSpec(
                kind=args.dataset, path=args.dataset_path, languages=["en"] if args.dataset == "builtin" else None
            ),
            output_dir=out / "bench" / f"{rate:g}",
            label=f"cadence-{args.size}",
            progress=sys.stderr.isatty(),
        )
        start = time.time()
        result = run_bench(config)
        stages = first_audio_stages(log, start, time.time())
        rows += [Row.of(a, stages) for a in result.points() if a.mode == "open"]
    return rows


ACCESS_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO cadence\.access: (\{.*\})$")


def first_audio_stages(log: Path, start: float, end: float) -> dict[str, tuple[float, float]]:
    """p50 and p95 (ms) of each first-audio stage over the access-log lines written in [start, end]
    (warm-up requests included: the log cannot tell them apart)."""
    from datetime import datetime

    values: dict[str, list[float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = ACCESS_LINE.match(line)
        if not m:
            continue
        when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        entry = json.loads(m.group(2))
        if start <= when <= end and entry.get("status") == 200:
            for stage, ms in entry.get("first_audio_ms", {}).items():
                values.setdefault(stage, []).append(ms / 1000)
    out = {}
    for stage, seconds in values.items():
        s = summarize(seconds)
        out[stage] = (round(s.p50 * 1000, 2), round(s.p95 * 1000, 2))
    return out


def table(rows: list[Row]) -> str:
    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v:.1f}"

    lines = [
        "| requests/s | " + " | ".join(f"{r.rate:g}" for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
        "| p50 / p95 / p99 TTFA (ms) | " + " | ".join(" / ".join(ms(v) for v in r.ttfa_ms) for r in rows) + " |",
        "| requests with a playback gap | " + " | ".join(f"{r.with_gap} / {r.completed}" for r in rows) + " |",
        "| failed / sent | " + " | ".join(f"{r.failed} / {r.sent}" for r in rows) + " |",
        "| delivered requests/s | "
        + " | ".join("–" if r.requests_per_s is None else f"{r.requests_per_s:.2f}" for r in rows)
        + " |",
    ]
    stages = [s for s in STAGES if any(s in r.stages_ms for r in rows)]
    if stages:
        lines += ["", "Where the first audio's time goes in the server, p50 / p95 (ms):", ""]
        lines += ["| stage | " + " | ".join(f"{r.rate:g}/s" for r in rows) + " |", "|---|" + "---:|" * len(rows)]
        for stage in stages:
            cells = [" / ".join(f"{v:.1f}" for v in r.stages_ms[stage]) if stage in r.stages_ms else "–" for r in rows]
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> Path | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    x = [r.rate for r in rows]
    for i, name in enumerate(("p50", "p95", "p99")):
        left.plot(x, [float("nan") if r.ttfa_ms[i] is None else r.ttfa_ms[i] for r in rows], marker="o", label=name)
    left.set(xlabel="offered load (requests/s)", ylabel="TTFA (ms)", title="Time to first audible audio")
    left.legend()
    right.plot(x, [100 * r.with_gap / max(1, r.completed) for r in rows], marker="o", color="tab:red")
    right.set(xlabel="offered load (requests/s)", ylabel="% of requests", title="Requests with a playback gap")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def merge(paths: list[Path], out: Path) -> list[Row]:
    """The rows of several runs' protocol.json as one table (OUT/protocol.json, .md, .png), by rate.
    A rate measured by two runs is refused: their percentiles cannot be combined from summaries."""
    runs = [json.loads(p.read_text()) for p in paths]
    rows: dict[float, Row] = {}
    for path, run in zip(paths, runs, strict=True):
        for data in run["rows"]:
            row = Row(**{**data, "ttfa_ms": tuple(data["ttfa_ms"]),
                         "stages_ms": {k: tuple(v) for k, v in data["stages_ms"].items()}})  # fmt: skip
            if row.rate in rows:
                raise SystemExit(f"{path}: rate {row.rate:g} is measured by another run too")
            rows[row.rate] = row
    merged = [rows[r] for r in sorted(rows)]
    summary = {"merged": [str(p) for p in paths], "runs": [{k: v for k, v in r.items() if k != "rows"} for r in runs]}
    (out / "protocol.json").write_text(json.dumps({**summary, "rows": [r.__dict__ for r in merged]}, indent=2) + "\n")
    (out / "protocol.md").write_text(table(merged) + "\n")
    plot(merged, out / "protocol.png")
    return merged


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        print(table(merge([Path(p) for p in args.merge], out)))
        return 0
    server_cores, client_cores = split_cores(args.client_cores)
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
        print(f"client on cores {sorted(client_cores)}", file=sys.stderr)
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
        "rows": [r.__dict__ for r in rows],
    }
    (out / "protocol.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "protocol.md").write_text(table(rows) + "\n")
    plot(rows, out / "protocol.png")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
