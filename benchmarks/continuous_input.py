"""Speech from an LLM that is still writing: the WebSocket route's continuous input against its sentence
input, with a simulated LLM writing at a given rate.

    python benchmarks/continuous_input.py --checkpoint DIR --device cuda --rates 20 50 100 --out runs/continuous
    python benchmarks/continuous_input.py --url http://127.0.0.1:8000 --rates 50 --sessions 3 --out /tmp/ci

For each writing rate (LLM tokens a second: the text cut into word pieces of up to four characters,
as an LLM's tokens are) and each input mode, `--sessions` sessions run one after another: the writer
sends the pieces at the rate, then input.done and session.close, while the client records when each
piece of audio arrives. Per session:

- first audio: from the first piece of text sent to the first audible audio received, and from the
  first word's arrival (the piece that begins the second word: only then is the first word whole);
- playback gaps: the audio played from its first piece with no jitter buffer; each time the player
  runs dry is a gap (sentence mode's pauses between sentences count: the listener hears them);
- audio per second: seconds of audio over the wall time from the first text to the last audio.

With `--checkpoint` the script starts `cadence serve` itself. Random weights never stop on their own,
so the server it starts ends each utterance after about three frames per text token (the runaway
guard's frame budget, as real speech runs), in both modes alike. Writes OUT/continuous.json and
OUT/continuous.md, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.bench.metrics import Chunk, Timeline, audible_onset, request_metrics, summarize  # noqa: E402

TEXT = (
    "Streaming speech from a language model should start as soon as the first words are written. "
    "Waiting for a whole sentence adds the time the model takes to write it, and every sentence spoken "
    "on its own starts its melody afresh. When the words are spoken as they arrive, the listener hears "
    "the answer while it is still being written, in one voice that runs on from one sentence to the next."
)
SAMPLE_RATE = 24000
# Random weights never stop on their own: utterances end after ~3 frames a text token, as speech runs.
DEPLOY = "engine:\n  runaway:\n    min_frames: 0\n    frames_per_token: 3.0\n"


@dataclass
class Session:
    mode: str
    rate: float
    first_audio_ms: float | None
    after_first_word_ms: float | None
    gaps: int
    stall_ms: float
    audio_s: float
    audio_per_s: float | None


def llm_pieces(text: str) -> list[str]:
    """The text as an LLM writes it: word pieces of up to four characters, spaces leading."""
    return [m for word in re.findall(r"\s*\S+", text) for m in re.findall(r"\s*\S{1,4}", word)]


def run_session(url: str, mode: str, rate: float, seed: int) -> Session:
    config = {"type": "session.config", "voice": "ryan", "language": "english", "seed": seed, "input_mode": mode}
    pieces = llm_pieces(TEXT)
    chunks: list[Chunk] = []
    pcm: list[bytes] = []
    with connect(url.replace("http", "ws", 1) + "/v1/audio/speech/stream", open_timeout=60, max_size=None) as ws:
        ws.send(json.dumps(config))
        json.loads(ws.recv(timeout=60))
        start = time.perf_counter()

        def write() -> None:
            for i, piece in enumerate(pieces):
                time.sleep(max(0.0, start + i / rate - time.perf_counter()))
                ws.send(json.dumps({"type": "input.text", "text": piece}))
            ws.send(json.dumps({"type": "input.done"}))
            ws.send(json.dumps({"type": "session.close"}))

        writer = threading.Thread(target=write)
        writer.start()
        while True:
            msg = ws.recv(timeout=300)
            if isinstance(msg, bytes):
                chunks.append(Chunk(time.perf_counter() - start, len(msg) // 2))
                pcm.append(msg)
            elif json.loads(msg)["type"] == "session.done":
                break
        writer.join()
    audio = np.frombuffer(b"".join(pcm), dtype="<i2")
    timeline = Timeline(SAMPLE_RATE, chunks=chunks, first_byte_s=chunks[0].t if chunks else None)
    timeline.end_s = chunks[-1].t if chunks else None
    timeline.onset_sample = audible_onset(audio, SAMPLE_RATE)
    timeline.audible_window_samples = int(0.02 * SAMPLE_RATE)
    m = request_metrics(timeline)
    wall = chunks[-1].t if chunks else None
    first_ms = None if m.ttfa_s is None else round(m.ttfa_s * 1000, 1)
    word_ms = None if first_ms is None else round(first_ms - 1000 * first_word_piece(pieces) / rate, 1)
    return Session(
        mode, rate, first_ms, word_ms, m.underruns, round(m.stall_s * 1000, 1), round(m.audio_s, 2),
        round(m.audio_s / wall, 2) if wall else None,
    )  # fmt: skip


def first_word_piece(pieces: list[str]) -> int:
    """The index of the piece that begins the second word: it is sent when the first word is whole."""
    return next(i for i, piece in enumerate(pieces) if i and piece[:1].isspace())


def table(sessions: list[Session], rates: list[float]) -> str:
    lines = [
        "| writer (tokens/s) | mode | first audio p50 / max (ms) | after the first word p50 (ms) | sessions with a gap "
        "| stall p50 (ms) | audio s/s |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for rate in rates:
        for mode in ("sentence", "continuous"):
            group = [s for s in sessions if s.rate == rate and s.mode == mode]
            if not group:
                continue
            first = summarize([s.first_audio_ms for s in group if s.first_audio_ms is not None])
            word = summarize([s.after_first_word_ms for s in group if s.after_first_word_ms is not None])
            stall = summarize([s.stall_ms for s in group])
            speed = summarize([s.audio_per_s for s in group if s.audio_per_s is not None])
            gaps = sum(s.gaps > 0 for s in group)
            lines.append(
                f"| {rate:g} | {mode} | {_num(first.p50)} / {_num(first.max)} | {_num(word.p50)} | "
                f"{gaps} / {len(group)} | {_num(stall.p50)} | {_num(speed.p50, 2)} |"
            )
    return "\n".join(lines)


def _num(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def start_server(args: argparse.Namespace, out: Path) -> tuple[subprocess.Popen, str]:
    url = f"http://127.0.0.1:{args.port}"
    (out / "deploy.yaml").write_text(DEPLOY)
    cmd = [sys.executable, "-m", "cadence.cli", "serve", args.checkpoint, "--device", args.device]
    cmd += ["--port", str(args.port), "--config", str(out / "deploy.yaml"), *args.server_args]
    server = subprocess.Popen(cmd, stdout=(out / "serve.log").open("w"), stderr=subprocess.STDOUT)
    for _ in range(900):
        if server.poll() is not None:
            raise SystemExit(f"cadence serve exited:\n{(out / 'serve.log').read_text()[-3000:]}")
        try:
            if httpx.get(url + "/ready", timeout=5).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit("cadence serve was not ready in 900 s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a running server (else --checkpoint starts one)")
    p.add_argument("--checkpoint", help="start `cadence serve` on this checkpoint")
    p.add_argument("--device", default="cuda")
    p.add_argument("--port", type=int, default=8124)
    p.add_argument("--rates", type=float, nargs="+", default=[20.0, 50.0, 100.0], help="LLM tokens a second")
    p.add_argument("--sessions", type=int, default=5, help="sessions a rate and mode (default 5)")
    p.add_argument("--out", required=True)
    p.add_argument("server_args", nargs="*", default=[], help="after --: more options for cadence serve")
    args = p.parse_args(argv)
    if not (args.url or args.checkpoint):
        p.error("give --url or --checkpoint")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server, url = start_server(args, out) if args.checkpoint else (None, args.url)
    try:
        sessions = [
            run_session(url, mode, rate, seed)
            for rate in args.rates
            for mode in ("sentence", "continuous")
            for seed in range(args.sessions)
        ]
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(120)
    (out / "continuous.json").write_text(json.dumps([asdict(s) for s in sessions], indent=2) + "\n")
    text = table(sessions, args.rates)
    (out / "continuous.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
