"""A real `cadence serve` process for the server tests, and helpers to watch it.

Each server runs the tiny random checkpoint on the CPU. Nothing here measures time: waits poll for
an outcome with a generous deadline and fail with the server's log when it never comes.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import av
import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
SAMPLE_RATE = 24000
FRAME = 1920  # samples per 80 ms frame
START_TIMEOUT_S = 300  # loading and warming a tiny model on 2 busy CPU cores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m cadence.cli serve [CHECKPOINT] --device cpu ARGS...` on a free port. `entry` runs
    another script in place of `-m cadence.cli` (one that injects faults); `cwd`: the server's working
    directory (the repository's by default)."""

    def __init__(
        self,
        checkpoint: Path | None,
        log_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        entry: Path | None = None,
        cwd: Path = REPO,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"serve-{self.port}.log"
        model = [str(checkpoint)] if checkpoint is not None else []
        program = [str(entry)] if entry is not None else ["-m", "cadence.cli"]
        cmd = [sys.executable, *program, "serve", *model, "--port", str(self.port)]
        cmd += ["--device", "cpu", *args]
        self._log = self.log_path.open("w")
        env = {**os.environ, **(env or {})}
        if cwd != REPO or entry is not None:  # cadence itself still comes from this checkout
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> Server:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"cadence serve exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            try:
                return httpx.get(self.url + "/ready", timeout=5, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, START_TIMEOUT_S, "the server to become ready", self)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"cadence serve did not exit within {timeout} s:\n{self.log()[-4000:]}") from None
        finally:
            self._log.close()

    def children(self) -> dict[int, str]:
        """pid -> command line of the server's child processes (the engine, multiprocessing's tracker)."""
        out = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid:
                    pid = int(stat.parent.name)
                    out[pid] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, IndexError, ValueError):
                continue
        return out

    def engine_pid(self) -> int:
        engines = [pid for pid, cmd in self.children().items() if "spawn_main" in cmd]
        assert len(engines) == 1, self.children()
        return engines[0]

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, trust_env=False, **kw)

    def ws_url(self, path: str = "/v1/audio/speech/stream") -> str:
        return self.url.replace("http://", "ws://") + path

    def access_log(self) -> list[dict]:
        """The server's access-log lines (cadence.access), parsed."""
        out = []
        for line in self.log().splitlines():
            _, sep, payload = line.partition(" cadence.access: ")
            if sep:
                out.append(json.loads(payload))
        return out

    def metrics(self, headers: dict[str, str] | None = None) -> dict[str, float]:
        """Every sample of GET /metrics as 'name{label="value",...}' -> value."""
        text = httpx.get(self.url + "/metrics", headers=headers, timeout=30, trust_env=False).text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return out


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, server: Server | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            tail = f"\nserver log:\n{server.log()[-4000:]}" if server else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{tail}")
        time.sleep(0.2)


def decode_audio(data: bytes) -> tuple[int, np.ndarray]:
    """Any container/codec PyAV reads -> (sample rate, mono float samples)."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [f.to_ndarray().reshape(f.samples, -1).mean(axis=1) for f in container.decode(stream)]
        rate = stream.codec_context.sample_rate
    return rate, np.concatenate(frames) if frames else np.zeros(0)


def pcm_samples(data: bytes) -> np.ndarray:
    assert len(data) % 2 == 0
    return np.frombuffer(data, dtype="<i2")
