"""Scale-out benchmark: one `cadence serve` deployment measured by several `cadence bench`
client processes at once, their numbers merged.

One Python client process tops out at a few hundred concurrent streams (its event loop lags, so its
timestamps run late); splitting each concurrency level over `--clients` processes keeps the client
out of the measurement. Also samples the CPU time of the API process and of each engine process
over every trial, to show which process is the bottleneck.

    python benchmarks/scaleout.py --label two-replicas --clients 2 --concurrency 256 512 \\
        --out /tmp/scaleout -- /tmp/full-0.6b --replicas 2 --device cuda --max-streams 256

Everything after `--` goes to `cadence serve`. Writes OUT/LABEL/summary.json and prints one line
per concurrency level; each client's own results stay in OUT/LABEL/c<N>/client<i>/.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.bench.metrics import summarize  # noqa: E402

MODEL_NAME = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (Linux /proc); NaN once it has exited."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / TICK


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def wait_ready(url: str, server: subprocess.Popen, timeout: float = 600) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if server.poll() is not None:
            sys.exit(f"cadence serve exited with {server.returncode} before it was ready")
        try:
            if httpx.get(url + "/ready", timeout=2, trust_env=False).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    sys.exit("cadence serve was not ready in time")


def run_point(args: argparse.Namespace, concurrency: int, out: Path, server_pid: int) -> dict:
    """`concurrency` streams split over args.clients bench processes; their numbers merged."""
    engines = children(server_pid)  # the engine processes (and multiprocessing's resource tracker)
    watched = {"api": server_pid, **{f"engine{i}": p for i, p in enumerate(engines)}}
    cpu_before = {k: cpu_seconds(p) for k, p in watched.items()}
    share = [concurrency // args.clients + (i < concurrency % args.clients) for i in range(args.clients)]
    procs = []
    start = time.monotonic()
    for i, c in enumerate(share):
        cmd = [
            sys.executable, "-m", "cadence.cli", "bench", "--url", args.url, "--model", MODEL_NAME,
            "--voice", "ryan", "--format", "pcm", "--languages", "en", "--fixed-frames", "auto", "--no-progress",
            "--concurrency", str(c), "--num-requests", "100000", "--duration", str(args.duration),
            "--seeds", str(i), "--output-dir", str(out / f"client{i}"), "--label", f"{args.label}-c{concurrency}-{i}",
        ]  # fmt: skip
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            print(err[-2000:], file=sys.stderr)
    wall = time.monotonic() - start
    cpu = {k: round((cpu_seconds(p) - cpu_before[k]) / wall, 2) for k, p in watched.items()}
    points = [json.loads((out / f"client{i}" / "results.json").read_text())["points"][0] for i in range(args.clients)]
    ttfa, rtf = [], []
    for i in range(args.clients):
        with open(out / f"client{i}" / "requests.csv") as f:
            for row in csv.DictReader(f):
                if row["warmup"] == "False" and row["outcome"] == "ok" and row["ttfa_s"]:
                    ttfa.append(float(row["ttfa_s"]))
                    rtf.append(float(row["rtf"]))
    completed = sum(p["completed"] for p in points)
    ttfa_s, rtf_s = summarize(ttfa), summarize(rtf)  # as cadence bench summarises one client's requests
    ms = lambda v: round(v * 1000, 1) if v is not None else None  # noqa: E731
    return {
        "concurrency": concurrency,
        "clients": args.clients,
        "completed": completed,
        "failed": sum(p["failed"] for p in points),
        "requests_per_s": round(sum(p["requests_per_s"] for p in points), 2),
        "audio_s_per_wall_s": round(sum(p["audio_s_per_wall_s"] for p in points), 1),
        "ttfa_ms": {"p50": ms(ttfa_s.p50), "p95": ms(ttfa_s.p95), "p99": ms(ttfa_s.p99)},
        "rtf_p50": round(rtf_s.p50, 3) if rtf_s.p50 is not None else None,
        "underrun_share": round(sum(p["requests_with_underruns"] for p in points) / max(1, completed), 3),
        "cpu_cores_used": cpu,  # CPU seconds per wall second of each process during the trial
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True, help="name of this deployment in the output")
    ap.add_argument("--concurrency", type=int, nargs="+", required=True, help="closed-loop streams in total")
    ap.add_argument("--clients", type=int, default=2, help="bench client processes per level (default 2)")
    ap.add_argument("--duration", type=float, default=20, help="seconds per level (default 20)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--out", type=Path, default=Path("scaleout-results"))
    ap.add_argument("serve_args", nargs=argparse.REMAINDER, help="-- then the arguments of cadence serve")
    args = ap.parse_args()
    serve_args = [a for a in args.serve_args if a != "--"]
    args.url = f"http://127.0.0.1:{args.port}"
    out = args.out / args.label
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "cadence.cli", "serve", *serve_args, "--served-model-name", MODEL_NAME,
           "--port", str(args.port), "--max-queue", "4096"]  # fmt: skip
    with open(out / "serve.log", "w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    summary = {"label": args.label, "serve": serve_args, "points": []}
    try:
        summary["ready_s"] = round(wait_ready(args.url, server), 1)
        print(f"== {args.label}: ready after {summary['ready_s']} s ({' '.join(serve_args)})", flush=True)
        for c in args.concurrency:
            point = run_point(args, c, out / f"c{c}", server.pid)
            summary["points"].append(point)
            print(json.dumps(point), flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        summary["serve_exit"] = server.wait(60)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"serve exited {summary['serve_exit']}")


if __name__ == "__main__":
    main()
