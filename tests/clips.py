"""Test audio: a fixed speech-like signal, and the same written in each accepted format (PyAV)."""

from __future__ import annotations

import io

import av
import numpy as np

# format -> (container, codec)
FORMATS = {
    "wav": ("wav", "pcm_s16le"),
    "flac": ("flac", "flac"),
    "mp3": ("mp3", "libmp3lame"),
    "ogg": ("ogg", "libopus"),
    "m4a": ("mp4", "aac"),
    "alac": ("ipod", "alac"),
    "webm": ("webm", "libopus"),
    "aiff": ("aiff", "pcm_s16be"),
    "aac": ("adts", "aac"),
}


def reference_audio(seconds: float = 2.5, sample_rate: int = 24000, seed: int = 0) -> np.ndarray:
    """A fixed, speech-like test signal (float32 mono): a gliding harmonic voice with vibrato and a
    syllable-rate envelope, plus a little noise. Deterministic, so its codes and x-vector are too."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t) + 3 * np.sin(2 * np.pi * 5.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 9))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 3.1 * t) ** 2
    noise = np.random.default_rng(seed).standard_normal(t.size)
    return (0.25 * voice * envelope + 0.02 * noise).astype(np.float32)


def encode_file(wav: np.ndarray, sample_rate: int = 24000, fmt: str = "wav", channels: int = 1) -> bytes:
    """`wav` (float32 mono) as a file of `fmt` (wav: 16-bit PCM); `channels` 2 duplicates it."""
    container, codec = FORMATS[fmt]
    pcm = np.clip(np.round(wav * 32767), -32768, 32767).astype(np.int16)
    layout = "mono" if channels == 1 else "stereo"
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        rate = 48000 if codec == "libopus" else sample_rate  # opus runs at 48 kHz
        stream = out.add_stream(codec, rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(np.repeat(pcm, channels)[None], format="s16", layout=layout)  # interleaved
        frame.sample_rate = sample_rate
        resampler = av.AudioResampler(format=stream.format.name, layout=layout, rate=rate)
        for f in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(f):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()
