"""Running the `cadence` command line as a user does: a fresh process, offline, and what it wrote."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SAMPLES_PER_FRAME = 1920


def cadence(*args: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m cadence.cli ARGS` in a fresh process, offline (nothing here may touch the hub), with
    this process's thread count so that its float results are comparable with in-process ones."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(torch.get_num_threads())}
    return subprocess.run(
        [sys.executable, "-m", "cadence.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def read_wav(path: Path) -> tuple[np.ndarray, int, int, int]:
    """(int16 samples, channels, sample width in bytes, rate) with nothing but the stdlib reader."""
    with wave.open(str(path), "rb") as f:
        pcm = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
        assert len(pcm) == f.getnframes() * f.getnchannels()
        return pcm, f.getnchannels(), f.getsampwidth(), f.getframerate()


def reported_frames(stderr: str) -> tuple[int, str]:
    m = re.search(r"(\d+) frames, .* finish_reason=(\w+)", stderr)
    assert m, stderr
    return int(m.group(1)), m.group(2)
