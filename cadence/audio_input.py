"""Reference audio in: any file PyAV (ffmpeg) reads -> mono float32 samples at the model's rate.

wav, mp3, flac, ogg (vorbis, opus), m4a, webm, ... are decoded and resampled in one pass through
PyAV's resampler (libswresample); channels are then averaged, as the official code averages them.
Limits are enforced on the way in: the file's size before decoding, its duration while decoding (a
small file can hold hours of silence), so nothing unbounded is ever held in memory.

The official package resamples with librosa (soxr); libswresample's filter differs slightly, so a
reference that is not already at 24 kHz gives slightly different samples (tests/test_audio_input.py
measures how much).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np


class AudioInputError(ValueError):
    """The audio cannot be used: not decodable, no audio stream, or too short."""


class AudioTooLargeError(ValueError):
    """The audio exceeds a size or duration limit."""


@dataclass(frozen=True)
class AudioLimits:
    max_bytes: int = 10 << 20  # 10 MiB, as OpenAI's voice samples
    max_seconds: float = 30.0  # the in-context mode puts every reference frame in the prompt
    min_seconds: float = 0.5  # the speaker encoder needs some frames to pool over


def decode_audio(data: bytes, sample_rate: int, limits: AudioLimits = AudioLimits()) -> np.ndarray:
    """Encoded audio -> float32 mono samples in [-1, 1] at `sample_rate`. Raises AudioInputError or
    AudioTooLargeError, both with a message fit for the client."""
    if len(data) > limits.max_bytes:
        raise AudioTooLargeError(f"the audio is {len(data)} bytes; the limit is {limits.max_bytes}")
    if not data:
        raise AudioInputError("the audio is empty")
    max_samples = int(limits.max_seconds * sample_rate)
    parts: list[np.ndarray] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            stream = next((s for s in container.streams if s.type == "audio"), None)
            if stream is None:
                raise AudioInputError("the file has no audio stream")
            # Planar float at the model's rate, every channel kept: libswresample's own downmix
            # weighs stereo by 1/sqrt(2) each, the official code takes the mean.
            resampler = av.AudioResampler(format="fltp", rate=sample_rate)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    parts.append(out.to_ndarray().mean(axis=0))
                    total += parts[-1].size
                if total > max_samples:
                    raise AudioTooLargeError(f"the audio is longer than the limit of {limits.max_seconds:g} seconds")
            parts += [out.to_ndarray().mean(axis=0) for out in resampler.resample(None)]
    except av.FFmpegError as e:
        raise AudioInputError(f"could not decode the audio ({_reason(e)}); send wav, mp3, flac or ogg") from None
    wav = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    if wav.size > max_samples:
        raise AudioTooLargeError(f"the audio is longer than the limit of {limits.max_seconds:g} seconds")
    if wav.size < limits.min_seconds * sample_rate:
        raise AudioInputError(
            f"the audio is {wav.size / sample_rate:.2f} seconds long; at least {limits.min_seconds:g} are needed"
        )
    return wav.astype(np.float32, copy=False)


def _reason(e: av.FFmpegError) -> str:
    return getattr(e, "strerror", None) or str(e)
