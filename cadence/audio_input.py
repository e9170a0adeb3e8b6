"""Reference audio in: untrusted bytes -> mono float32 samples at the model's rate.

The bytes come from clients, so nothing in them chooses how they are read. The container is
recognised from its first bytes against an allow-list (wav, mp3, flac, ogg, m4a/mp4, webm/matroska,
aiff, aac) and opened with that one demuxer, never FFmpeg's probing: a probe would accept playlists
and indirections (concat, hls, image patterns, ...) that open other files or URLs on the server.
The decoder must be an audio codec from an allow-list too, and the samples must be finite and of a
sane amplitude. The bytes are read from memory only: no demuxer on the list opens anything else.

Decoding and resampling run in one pass through PyAV's resampler (libswresample); channels are then
averaged, as the official code averages them. Limits are enforced on the way in: the file's size
before decoding, its duration while decoding (a small file can hold hours of silence), so nothing
unbounded is ever held in memory.

The official package resamples with librosa (soxr); libswresample's filter differs slightly, so a
reference that is not already at 24 kHz gives slightly different samples (tests/test_audio_input.py
measures how much).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np

# The demuxers clients may use, by the name FFmpeg gives them, with what is said of them in errors.
CONTAINERS = {
    "wav": "wav",
    "mp3": "mp3",
    "flac": "flac",
    "ogg": "ogg (vorbis, opus, flac)",
    "mov": "m4a/mp4 (aac, alac)",
    "matroska": "webm/matroska (opus, vorbis)",
    "aiff": "aiff",
    "aac": "aac (adts)",
}
# The audio decoders accepted inside them (pcm_* besides).
CODECS = frozenset({"mp3", "mp3float", "flac", "vorbis", "libvorbis", "opus", "libopus", "aac", "alac"})
# Demuxer options that keep a file self-contained: an mp4's data references may name other files.
DEMUXER_OPTIONS = {"mov": {"enable_drefs": "0", "use_absolute_path": "0"}}
MAX_AMPLITUDE = 32.0  # float samples beyond +30 dBFS are no recording (an int format tops out at 1.0)


class AudioInputError(ValueError):
    """The audio cannot be used: not a format on the list, not decodable, no audio, too short."""


class AudioTooLargeError(ValueError):
    """The audio exceeds a size or duration limit."""


@dataclass(frozen=True)
class AudioLimits:
    max_bytes: int = 10 << 20  # 10 MiB, as OpenAI's voice samples
    max_seconds: float = 30.0  # the in-context mode puts every reference frame in the prompt
    min_seconds: float = 0.5  # the speaker encoder needs some frames to pool over


def accepted_formats() -> str:
    return ", ".join(CONTAINERS.values())


def sniff_container(data: bytes) -> str | None:
    """The allow-listed demuxer whose signature begins `data`, or None."""
    head = data[:64]
    if head[:4] in (b"RIFF", b"RF64", b"BW64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[4:8] == b"ftyp":
        return "mov"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:3] == b"ID3":
        return _after_id3(data)
    return _mpeg_frame(head)


def _after_id3(data: bytes) -> str | None:
    """An ID3v2 tag leads mp3 files (and sometimes flac): what follows it decides."""
    if len(data) < 10:
        return None
    size = 0
    for b in data[6:10]:  # a "syncsafe" integer: 7 bits a byte
        size = (size << 7) | (b & 0x7F)
    rest = data[10 + size : 10 + size + 64]
    if rest[:4] == b"fLaC":
        return "flac"
    return _mpeg_frame(rest) or ("mp3" if not rest else None)


def _mpeg_frame(head: bytes) -> str | None:
    """An MPEG audio frame (mp3) or an ADTS header (aac) by its 12-bit sync word."""
    if len(head) < 2 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return None
    layer = (head[1] >> 1) & 0x3
    return "aac" if layer == 0 and head[1] & 0xF0 == 0xF0 else "mp3" if layer else None


def decode_audio(data: bytes, sample_rate: int, limits: AudioLimits = AudioLimits()) -> np.ndarray:
    """Encoded audio -> float32 mono samples at `sample_rate`. Raises AudioInputError or
    AudioTooLargeError, both with a message fit for the client (it never repeats FFmpeg's, which
    could say what the server's disk holds)."""
    if len(data) > limits.max_bytes:
        raise AudioTooLargeError(f"the audio is {len(data)} bytes; the limit is {limits.max_bytes}")
    if not data:
        raise AudioInputError("the audio is empty")
    container = sniff_container(data)
    if container is None:
        raise AudioInputError(f"the audio is not in an accepted format; send {accepted_formats()}")
    wav = _decode(data, container, sample_rate, limits)
    if wav.size < limits.min_seconds * sample_rate:
        raise AudioInputError(
            f"the audio is {wav.size / sample_rate:.2f} seconds long; at least {limits.min_seconds:g} are needed"
        )
    if not np.isfinite(wav).all():
        raise AudioInputError("the audio holds samples that are not finite numbers (NaN or infinity)")
    if (peak := float(np.abs(wav).max())) > MAX_AMPLITUDE:
        raise AudioInputError(f"the audio's peak amplitude is {peak:.3g}; float samples must lie within ±1")
    return wav


def _decode(data: bytes, container: str, sample_rate: int, limits: AudioLimits) -> np.ndarray:
    max_samples = int(limits.max_seconds * sample_rate)
    parts: list[np.ndarray] = []
    total = 0
    name = CONTAINERS[container]
    try:
        options = DEMUXER_OPTIONS.get(container, {})
        with av.open(io.BytesIO(data), mode="r", format=container, options=options) as demuxer:
            stream = next((s for s in demuxer.streams if s.type == "audio"), None)
            if stream is None:
                raise AudioInputError(f"the {name} file has no audio stream")
            codec = stream.codec_context.name
            if codec not in CODECS and not codec.startswith("pcm_"):
                raise AudioInputError(f"the {name} file holds {codec} audio, which is not accepted")
            # Planar float at the model's rate, every channel kept: libswresample's own downmix
            # weighs stereo by 1/sqrt(2) each, the official code takes the mean.
            resampler = av.AudioResampler(format="fltp", rate=sample_rate)
            for frame in demuxer.decode(stream):
                for out in resampler.resample(frame):
                    parts.append(out.to_ndarray().mean(axis=0))
                    total += parts[-1].size
                if total > max_samples:
                    raise AudioTooLargeError(f"the audio is longer than the limit of {limits.max_seconds:g} seconds")
            parts += [out.to_ndarray().mean(axis=0) for out in resampler.resample(None)]
    except (av.FFmpegError, ValueError) as e:
        if isinstance(e, (AudioInputError, AudioTooLargeError)):
            raise
        raise AudioInputError(f"could not decode the audio as {name}: the data is invalid") from None
    wav = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    if wav.size > max_samples:
        raise AudioTooLargeError(f"the audio is longer than the limit of {limits.max_seconds:g} seconds")
    return wav.astype(np.float32, copy=False)
