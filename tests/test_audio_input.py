"""Reference audio in (PyAV): formats, channels, resampling, limits, and malformed input.

At 24 kHz a wav or flac reference decodes to exactly the samples the official loader reads
(int16 / 32768). Other rates are resampled by libswresample where the official code uses librosa
(soxr): the samples differ slightly (measured below: under 3% of the signal's rms), and so, a
little, do the codes and the x-vector of a resampled reference; parity tests use 24 kHz references.
"""

from __future__ import annotations

import numpy as np
import pytest
from clips import encode_file, reference_audio

from cadence.audio_input import AudioInputError, AudioLimits, AudioTooLargeError, decode_audio


def pcm(wav: np.ndarray) -> np.ndarray:
    return (np.clip(np.round(wav * 32767), -32768, 32767) / 32768).astype(np.float32)


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_24khz_decodes_to_the_official_samples(fmt, channels):
    wav = reference_audio(1.5)
    out = decode_audio(encode_file(wav, 24000, fmt, channels), 24000)
    assert out.dtype == np.float32 and out.shape == wav.shape
    assert np.array_equal(out, pcm(wav))  # stereo: the mean of equal channels, as the official np.mean


def test_stereo_is_the_channel_mean():
    """libswresample's own downmix weighs each channel by 1/sqrt(2); the official code averages."""
    import io

    import av

    left, right = reference_audio(1.0, seed=1), reference_audio(1.0, seed=2) * 0.5
    interleaved = np.stack([left, right], axis=1).reshape(-1)
    buf = io.BytesIO()
    with av.open(buf, "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=24000, layout="stereo")
        frame = av.AudioFrame.from_ndarray(
            np.round(interleaved * 32767).astype(np.int16)[None], format="s16", layout="stereo"
        )
        frame.sample_rate = 24000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    out = decode_audio(buf.getvalue(), 24000)
    assert np.abs(out - (pcm(left) + pcm(right)) / 2).max() <= 1e-6


@pytest.mark.parametrize("fmt", ["mp3", "ogg"])
def test_lossy_formats(fmt):
    wav = reference_audio(1.5)
    out = decode_audio(encode_file(wav, 24000, fmt), 24000)
    assert abs(out.size - wav.size) <= 0.08 * 24000  # codec delay and padding
    assert np.sqrt(np.mean(out**2)) == pytest.approx(np.sqrt(np.mean(wav**2)), rel=0.15)


@pytest.mark.parametrize("rate", [16000, 44100, 48000])
def test_resampling_is_close_to_librosa(rate):
    """The official path resamples with librosa.resample (soxr_hq); cadence with libswresample."""
    librosa = pytest.importorskip("librosa")
    wav = pcm(reference_audio(2.0, sample_rate=rate))
    mine = decode_audio(encode_file(wav, rate, "wav"), 24000)
    theirs = librosa.resample(wav, orig_sr=rate, target_sr=24000)
    n = min(mine.size, theirs.size)
    assert abs(mine.size - theirs.size) <= 1
    rel = np.sqrt(np.mean((mine[:n] - theirs[:n]) ** 2)) / np.sqrt(np.mean(theirs[:n] ** 2))
    print(f"\nresampling {rate} -> 24000: rms difference from librosa {rel:.2%} of the signal's rms")
    assert rel < 0.03


def test_limits():
    wav = encode_file(reference_audio(2.0), 24000, "wav")
    with pytest.raises(AudioTooLargeError, match="bytes; the limit is 1000"):
        decode_audio(wav, 24000, AudioLimits(max_bytes=1000))
    with pytest.raises(AudioTooLargeError, match="limit of 1.5 seconds"):
        decode_audio(wav, 24000, AudioLimits(max_seconds=1.5))
    with pytest.raises(AudioInputError, match="at least 3 are needed"):
        decode_audio(wav, 24000, AudioLimits(min_seconds=3))


@pytest.mark.parametrize(
    "data",
    [b"", b"not audio at all" * 100, b"RIFF\x24\x00\x00\x00WAVEfmt junk", encode_file(reference_audio(1.0))[:60]],
)
def test_malformed_input(data):
    with pytest.raises(AudioInputError):
        decode_audio(data, 24000)


@pytest.mark.parametrize("fmt", ["m4a", "alac", "webm", "aiff", "aac"])
def test_every_accepted_container(fmt):
    wav = reference_audio(1.5)
    out = decode_audio(encode_file(wav, 24000, fmt), 24000)
    assert abs(out.size - wav.size) <= 0.1 * 24000  # codec delay and padding
    assert np.sqrt(np.mean(out**2)) == pytest.approx(np.sqrt(np.mean(wav**2)), rel=0.15)


# FFmpeg inputs that read other files or URLs when its probe picks their demuxer.
INDIRECTIONS = {
    "concat playlist": b"ffconcat version 1.0\nfile '{path}'\n",
    "hls playlist": b"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n{path}\n#EXT-X-ENDLIST\n",
    "ffmetadata": b";FFMETADATA1\ntitle={path}\n",
    "sdp": b"v=0\no=- 0 0 IN IP4 127.0.0.1\ns=x\nc=IN IP4 127.0.0.1\nm=audio 9 RTP/AVP 0\n",
    "wav header over a playlist": b"RIFF\x00\x00\x00\x00WAVEffconcat version 1.0\nfile '{path}'\n",
}


@pytest.mark.parametrize("name", list(INDIRECTIONS))
def test_indirections_never_open_other_files(name, tmp_path, monkeypatch):
    """The same refusal, word for word, whether the named file exists or not: nothing is read and
    nothing tells what the disk holds. (Relative names: FFmpeg's concat demuxer refuses absolute ones.)"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "meeting.wav").write_bytes(encode_file(reference_audio(2.0)))
    messages = set()
    for path in ("meeting.wav", "missing.wav"):
        with pytest.raises(AudioInputError) as e:
            decode_audio(INDIRECTIONS[name].replace(b"{path}", path.encode()), 24000)
        messages.add(str(e.value))
    assert len(messages) == 1, messages
    assert "such file" not in messages.pop()


def float_wav(samples: np.ndarray) -> bytes:
    import io

    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format="wav") as out:
        stream = out.add_stream("pcm_f32le", rate=24000, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples.astype(np.float32)[None], format="flt", layout="mono")
        frame.sample_rate = 24000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buf.getvalue()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e30])
def test_non_finite_or_absurd_samples_are_refused(bad):
    wav = reference_audio(1.5)
    wav[1000:1010] = bad
    with pytest.raises(AudioInputError, match="finite|amplitude"):
        decode_audio(float_wav(wav), 24000)


def test_float_audio_a_little_over_full_scale_is_kept():
    wav = reference_audio(1.5) * 6  # peaks near 2: loud, but a real float recording can hold it
    assert np.abs(decode_audio(float_wav(wav), 24000)).max() > 1.0
