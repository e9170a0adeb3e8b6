"""PCM conversions and WAV files (stdlib `wave`: no extra dependency for the simplest format)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch


def to_int16(wav: torch.Tensor | np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] -> int16 PCM (rounded, clipped)."""
    if isinstance(wav, torch.Tensor):
        wav = wav.detach().float().cpu().numpy()
    scaled = np.multiply(wav, 32767.0, dtype=np.result_type(wav, np.float32))  # one scratch array, then in place
    np.rint(scaled, out=scaled)  # round half to even, as np.round
    np.clip(scaled, -32768, 32767, out=scaled)
    return scaled.astype(np.int16)


def write_wav(path: str | Path, pcm: np.ndarray, sample_rate: int) -> None:
    """Write mono int16 PCM as a WAV file."""
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(sample_rate)
        f.writeframes(np.ascontiguousarray(pcm, dtype="<i2").tobytes())


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a mono int16 WAV file -> (pcm, sample_rate)."""
    with wave.open(str(path), "rb") as f:
        if f.getsampwidth() != 2 or f.getnchannels() != 1:
            raise ValueError(f"{path}: expected mono 16-bit PCM")
        return np.frombuffer(f.readframes(f.getnframes()), dtype="<i2").copy(), f.getframerate()
