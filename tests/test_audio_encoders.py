"""The server's incremental encoders on a known signal: bytes leave as chunks arrive, every format
decodes back (PyAV) to the right rate, length and pitch, and speed changes tempo but not pitch."""

from __future__ import annotations

import io
import struct
import wave

import numpy as np
import pytest
from serving import decode_audio

from cadence.server.audio_encoders import FORMATS, make_encoder, wav_header

SR = 24000
CHUNK = 1920  # one 80 ms frame, as the engine delivers them
TONE_HZ = 440.0


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    return np.round(8000 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.int16)


def encode(fmt: str, pcm: np.ndarray, speed: float = 1.0, streaming: bool = True) -> list[bytes]:
    enc = make_encoder(fmt, SR, speed, streaming)
    pieces = [enc.encode(pcm[i : i + CHUNK]) for i in range(0, pcm.size, CHUNK)]
    return [*pieces, enc.finish()]


def peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.argmax(spectrum) * rate / samples.size)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_round_trips(fmt):
    pcm = tone(2.0)
    pieces = encode(fmt, pcm)
    if fmt != "flac":  # FLAC's first block holds 4096+ samples; everything else starts within 3 chunks
        assert any(pieces[:3]), "no bytes before the third chunk: not streaming"
    assert sum(len(p) for p in pieces[:-1]) > 0.5 * sum(len(p) for p in pieces)  # most bytes before the end
    data = b"".join(pieces)
    if fmt == "pcm":
        assert data == pcm.astype("<i2").tobytes()
        return
    rate, samples = decode_audio(data)
    assert rate == (48000 if fmt == "opus" else SR)
    if fmt in ("wav", "flac"):
        assert np.array_equal(samples.astype(np.int16), pcm)  # lossless
    else:
        assert abs(samples.size / rate - 2.0) < 0.1
    assert peak_hz(samples, rate) == pytest.approx(TONE_HZ, abs=2)


@pytest.mark.parametrize("fmt", ["pcm", "mp3", "opus"])
@pytest.mark.parametrize("speed", [0.25, 0.5, 1.5, 4.0])
def test_speed_changes_tempo_and_keeps_pitch(fmt, speed):
    pieces = encode(fmt, tone(2.0), speed)
    data = b"".join(pieces)
    if fmt == "pcm":
        rate, samples = SR, np.frombuffer(data, "<i2").astype(np.float64)
    else:
        rate, samples = decode_audio(data)
    assert abs(samples.size / rate - 2.0 / speed) < 0.1 + 0.05 / speed
    assert peak_hz(samples, rate) == pytest.approx(TONE_HZ, abs=3)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_empty_chunks_are_accepted_anywhere(fmt, speed):
    """A stream's final chunk can carry no audio (its frames all went out before it ended): every
    encoder, with or without a tempo change, takes an empty chunk without error or output."""
    enc = make_encoder(fmt, SR, speed, True)
    empty = np.zeros(0, np.int16)
    assert enc.encode(empty) == b""
    pieces = [enc.encode(tone(0.5)), enc.encode(empty), enc.finish()]
    assert sum(len(p) for p in pieces) > 0


def test_wav_headers():
    streamed = b"".join(encode("wav", tone(0.5)))
    assert streamed[:4] == b"RIFF" and streamed[8:16] == b"WAVEfmt "
    assert struct.unpack("<I", streamed[4:8])[0] == 0xFFFFFFFF  # length unknown while streaming
    assert struct.unpack("<I", streamed[40:44])[0] == 0xFFFFFFFF
    whole = b"".join(encode("wav", tone(0.5), streaming=False))
    with wave.open(io.BytesIO(whole)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()) == (SR, 1, 2, SR // 2)
    assert whole[44:] == streamed[44:]
    empty = make_encoder("wav", SR).finish()
    assert empty == wav_header(SR, None)  # a stream with no audio is still a well-formed file


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="allowed: mp3, opus, aac, flac, wav, pcm"):
        make_encoder("ogg", SR)
