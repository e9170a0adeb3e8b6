"""The HTTP path's share of the time to first audio: `cadence serve` measured one request at a time
from a raw-socket client, against the server's own account in its access log. Numbers, not assertions.

    python benchmarks/http_path.py                                  # a tiny random checkpoint, CPU
    python benchmarks/http_path.py --model DIR --device cuda
    python benchmarks/http_path.py --stacks installed plain --rounds 3

Each request is a short streamed pcm synthesis on a fresh connection (opened before the clock
starts), read to its end. For each: the client's time from sending it to the first byte of audio; the server's time
to first audio (the access log's `ttfa_ms`: from the route's start to the first chunk in the API
process); their difference, the HTTP path outside the route (the request read and parsed, routing,
the key check, the response started and written, the socket both ways); and the access log's `api`
and `to_api` stages, the API process's other parts. A stack is how uvicorn runs: `installed` (uvloop
and httptools where installed, as `cadence serve` runs) or `plain` (asyncio's event loop and h11,
uvicorn's fallbacks). Rounds interleave the stacks, each round a server of each.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from served_protocol import access_lines, wait_ready

# `plain` hides uvloop and httptools from the server process, so uvicorn takes its fallbacks.
PRELUDES = {"installed": "", "plain": "import sys; sys.modules['uvloop'] = None; sys.modules['httptools'] = None; "}
SERVE = "import runpy, sys; sys.argv = ['cadence'] + sys.argv[1:]; runpy.run_module('cadence.cli', run_name='__main__')"


@dataclass
class Samples:
    """Milliseconds a request, pooled over rounds."""

    client: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)
    outside: list[float] = field(default_factory=list)
    api: list[float] = field(default_factory=list)
    to_api: list[float] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(stack: str, model: str, device: str, port: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-c", PRELUDES[stack] + SERVE, "serve", model, "--device", device, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc, log)
    except SystemExit:
        proc.kill()
        raise
    return proc


def first_byte(port: int, request: bytes) -> tuple[float, str]:
    """Seconds from sending `request` to the first byte of its body, and its x-request-id. The rest
    of the (chunked) body is read too, so the request completes as a client's would."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start, elapsed = time.monotonic(), None
        s.sendall(request)
        data = b""
        while not data.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of a chunked body
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit(f"the server closed the connection: {data[:300]!r}")
            data += chunk
            if elapsed is None and b"\r\n\r\n" in data and data.split(b"\r\n\r\n", 1)[1]:
                elapsed = time.monotonic() - start
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    if not head.startswith("HTTP/1.1 200"):
        raise SystemExit(f"the request failed: {head}")
    ids = [line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.lower().startswith("x-request-id:")]
    return elapsed, ids[0]


def measure(stack: str, args: argparse.Namespace, request: bytes, out: Samples, folder: Path, round_: int) -> None:
    port, log = free_port(), folder / f"serve-{stack}-{round_}.log"
    proc = start(stack, args.model, args.device, port, log)
    try:
        timed = []
        for _ in range(args.requests):
            time.sleep(args.pause)  # the engine idle, the previous request's log line written
            timed.append(first_byte(port, request))
        time.sleep(1.0)
    finally:
        proc.terminate()
        proc.wait(60)
    lines = {entry["id"]: entry for entry in access_lines(log, 0.0, math.inf)}
    for seconds, rid in timed:
        entry = lines[rid]
        out.client.append(seconds * 1e3)
        out.server.append(entry["ttfa_ms"])
        out.outside.append(seconds * 1e3 - entry["ttfa_ms"])
        out.api.append(entry["first_audio_ms"]["api"])
        out.to_api.append(entry["first_audio_ms"]["to_api"])


def tiny_checkpoint(folder: Path) -> str:
    out = folder / "tiny"
    skeleton = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
    cmd = ["checkpoint", "random", "--from", skeleton, "--preset", "tiny", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "cadence.cli", "-q", *cmd], check=True)
    return str(out)


def table(results: dict[str, Samples]) -> str:
    def cell(values: list[float]) -> str:
        ordered = sorted(values)
        return f"{statistics.median(values):.2f} / {ordered[int(0.95 * (len(ordered) - 1))]:.2f}"

    rows = [
        ("client: sent to first audio byte", "client"),
        ("server: route start to first chunk (ttfa_ms)", "server"),
        ("outside the route (client - server)", "outside"),
        ("api stage", "api"),
        ("to_api stage", "to_api"),
    ]
    lines = ["| ms, p50 / p95 | " + " | ".join(results) + " |", "|---|" + "---:|" * len(results)]
    lines += [f"| {name} | " + " | ".join(cell(getattr(s, key)) for s in results.values()) + " |" for name, key in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="checkpoint directory (default: a tiny random checkpoint made in a temp dir)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--stacks", nargs="+", choices=list(PRELUDES), default=["installed", "plain"])
    p.add_argument("--rounds", type=int, default=2, help="rounds; each starts a server of each stack")
    p.add_argument("--requests", type=int, default=60, help="requests a server")
    p.add_argument("--pause", type=float, default=0.2, help="seconds between requests")
    p.add_argument("--frames", type=int, default=8, help="frames a request (max_new_tokens, ignore_eos)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        args.model = args.model or tiny_checkpoint(folder)
        fields = {"model": "tts-1", "input": "Hello there, how are you today?", "voice": "ryan",
                  "response_format": "pcm", "max_new_tokens": args.frames, "ignore_eos": True}  # fmt: skip
        body = json.dumps(fields).encode()
        request = (b"POST /v1/audio/speech HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body)) + body  # fmt: skip
        results = {stack: Samples() for stack in args.stacks}
        for round_ in range(args.rounds):
            for stack in args.stacks:
                measure(stack, args, request, results[stack], folder, round_)
                print(f"round {round_ + 1}: {stack} done", file=sys.stderr)
    print(f"{args.requests * args.rounds} requests a stack, {args.device}, one at a time:\n")
    print(table(results))


if __name__ == "__main__":
    main()
