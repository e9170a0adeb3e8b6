"""Incremental audio encoders: int16 PCM chunks in, bytes of the response format out, as they come.

- pcm: raw 24 kHz s16le mono;
- wav: a RIFF header, then s16le. Streamed, the header's sizes are 0xFFFFFFFF ("until the end",
  as ffmpeg writes to pipes); whole-file answers get the exact sizes;
- mp3, opus (in Ogg), aac (ADTS), flac: PyAV (ffmpeg) encoders and muxers writing into a sink that
  hands each write to the response. The muxers are told to flush every packet (and Ogg to close a
  page every 20 ms) so audio leaves as soon as the encoder emits it, not when an I/O buffer fills.

`speed` (0.25-4.0) changes tempo, not pitch, with ffmpeg's atempo filter; atempo takes factors
0.5-100, so slower speeds chain several.
"""

from __future__ import annotations

import struct
from fractions import Fraction

import av
import av.logging
import numpy as np
from av.filter import Graph

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
SPEED_RANGE = (0.25, 4.0)

# format -> (muxer, encoder, bit rate, muxer options)
_PYAV = {
    # No ID3 tag or Xing header: a pipe cannot be rewound to fill them in, and a stream of bare
    # MPEG frames is what players expect from a live mp3 source.
    "mp3": ("mp3", "libmp3lame", 64_000, {"id3v2_version": "0", "write_xing": "0"}),
    "opus": ("ogg", "libopus", 32_000, {"page_duration": "20000"}),
    "aac": ("adts", "aac", 64_000, {}),
    "flac": ("flac", "flac", 0, {}),
}

av.logging.set_level(av.logging.ERROR)  # ffmpeg's chatter (e.g. encoder tuning notes) is not ours to log


class _Sink:
    """A write-only file for PyAV: collects what the muxer writes until the next take()."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


def _frame(pcm: np.ndarray, sample_rate: int) -> av.AudioFrame:
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm, dtype=np.int16)[None, :], format="s16", layout="mono")
    frame.sample_rate = sample_rate
    return frame


class Tempo:
    """ffmpeg atempo through a PyAV filter graph: int16 in, int16 out, pitch kept."""

    def __init__(self, speed: float, sample_rate: int):
        self.sample_rate = sample_rate
        self.graph = Graph()
        node = self.graph.add_abuffer(
            format="s16", sample_rate=sample_rate, layout="mono", time_base=f"1/{sample_rate}"
        )
        factors = []
        while speed < 0.5:
            factors.append(0.5)
            speed /= 0.5
        factors.append(speed)
        for factor in factors:
            nxt = self.graph.add("atempo", f"{factor:.6f}")
            node.link_to(nxt)
            node = nxt
        fmt = self.graph.add("aformat", f"sample_fmts=s16:channel_layouts=mono:sample_rates={sample_rate}")
        node.link_to(fmt)
        sink = self.graph.add("abuffersink")
        fmt.link_to(sink)
        self.graph.configure()
        self._pts = 0

    def process(self, pcm: np.ndarray) -> np.ndarray:
        if pcm.size == 0:  # a stream's final chunk may carry no audio; FFmpeg refuses empty frames
            return np.zeros(0, np.int16)
        frame = _frame(pcm, self.sample_rate)
        frame.pts = self._pts
        frame.time_base = Fraction(1, self.sample_rate)
        self._pts += pcm.size
        self.graph.push(frame)
        return self._pull()

    def flush(self) -> np.ndarray:
        self.graph.push(None)
        return self._pull()

    def _pull(self) -> np.ndarray:
        out = []
        while True:
            try:
                frame = self.graph.pull()
            except (av.BlockingIOError, av.EOFError):
                break
            out.append(frame.to_ndarray().reshape(-1))
        return np.concatenate(out).astype(np.int16) if out else np.zeros(0, np.int16)


class AudioEncoder:
    """encode() each chunk of int16 PCM as it arrives, finish() once at the end; each returns the
    bytes ready to send (possibly none yet)."""

    content_type = "application/octet-stream"

    def __init__(self, sample_rate: int, speed: float = 1.0):
        self.sample_rate = sample_rate
        self.tempo = Tempo(speed, sample_rate) if speed != 1.0 else None
        self.samples_out = 0  # PCM samples handed to the format (after the tempo change)

    def encode(self, pcm: np.ndarray) -> bytes:
        if self.tempo is not None:
            pcm = self.tempo.process(pcm)
        self.samples_out += pcm.size
        return self._encode(pcm) if pcm.size else b""

    def finish(self) -> bytes:
        out = b""
        if self.tempo is not None:
            tail = self.tempo.flush()
            self.samples_out += tail.size
            out = self._encode(tail) if tail.size else b""
        return out + self._finish()

    @property
    def seconds(self) -> float:
        return self.samples_out / self.sample_rate

    def _encode(self, pcm: np.ndarray) -> bytes:
        raise NotImplementedError

    def _finish(self) -> bytes:
        return b""


class PcmEncoder(AudioEncoder):
    content_type = CONTENT_TYPES["pcm"]

    def _encode(self, pcm: np.ndarray) -> bytes:
        return np.ascontiguousarray(pcm, dtype="<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: int | None) -> bytes:
    """44-byte PCM s16le mono header; `data_bytes` None writes 0xFFFFFFFF sizes (length unknown)."""
    data = 0xFFFFFFFF if data_bytes is None else data_bytes
    riff = 0xFFFFFFFF if data_bytes is None else 36 + data_bytes
    # RIFF, WAVE, a 16-byte fmt chunk (PCM, 1 channel, rate, byte rate, block align 2, 16 bits), data.
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff,
        b"WAVE",
        b"fmt ",
        16,
        1,
        1,
        sample_rate,
        2 * sample_rate,
        2,
        16,
        b"data",
        data,
    )


class WavEncoder(PcmEncoder):
    content_type = CONTENT_TYPES["wav"]

    def __init__(self, sample_rate: int, speed: float = 1.0, streaming: bool = True):
        super().__init__(sample_rate, speed)
        self.streaming = streaming
        self._held: list[bytes] = []  # whole-file mode: everything waits for the exact header
        self._header_sent = False

    def _encode(self, pcm: np.ndarray) -> bytes:
        data = super()._encode(pcm)
        if not self.streaming:
            self._held.append(data)
            return b""
        if not self._header_sent:
            self._header_sent = True
            return wav_header(self.sample_rate, None) + data
        return data

    def _finish(self) -> bytes:
        if not self.streaming:
            data = b"".join(self._held)
            return wav_header(self.sample_rate, len(data)) + data
        if not self._header_sent:  # no audio at all: still a valid (empty) file
            self._header_sent = True
            return wav_header(self.sample_rate, None)
        return b""


class PyAVEncoder(AudioEncoder):
    """mp3 / opus / aac / flac through an ffmpeg encoder and muxer."""

    def __init__(self, fmt: str, sample_rate: int, speed: float = 1.0):
        super().__init__(sample_rate, speed)
        self.content_type = CONTENT_TYPES[fmt]
        muxer, codec, bit_rate, options = _PYAV[fmt]
        self._sink = _Sink()
        self._container = av.open(
            self._sink, "w", format=muxer, container_options={"flush_packets": "1", **options}, buffer_size=4096
        )
        self._stream = self._container.add_stream(codec, rate=sample_rate, layout="mono")
        if bit_rate:
            self._stream.codec_context.bit_rate = bit_rate
        self._pts = 0
        self._closed = False

    def _encode(self, pcm: np.ndarray) -> bytes:
        # PyAV converts the sample format and re-frames to the codec's frame size itself; explicit
        # timestamps keep the muxers' dts monotonic through the final flush.
        frame = _frame(pcm, self.sample_rate)
        frame.pts = self._pts
        frame.time_base = Fraction(1, self.sample_rate)
        self._pts += pcm.size
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.take()

    def _finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self.close()
        return self._sink.take()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._container.close()

    def __del__(self) -> None:  # an abandoned stream (client gone) must not leak the ffmpeg context
        try:
            self.close()
        except Exception:
            pass


def make_encoder(fmt: str, sample_rate: int, speed: float = 1.0, streaming: bool = True) -> AudioEncoder:
    if fmt == "pcm":
        return PcmEncoder(sample_rate, speed)
    if fmt == "wav":
        return WavEncoder(sample_rate, speed, streaming)
    if fmt in _PYAV:
        return PyAVEncoder(fmt, sample_rate, speed)
    raise ValueError(f"unknown response format '{fmt}'; allowed: {', '.join(FORMATS)}")
