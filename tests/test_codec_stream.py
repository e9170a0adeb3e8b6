"""The streaming Codec decoder equals the offline decode of the same codes, for any chunk schedule.

A small engine simulator (`run_engine`) drives the pool the way the server will: streams arrive at
ticks, take a free slot (reset), and each tick every active stream asks for its next chunk; streams
asking for the same number of frames are decoded together in one batched call. The tiny codec's
sliding window is 8 frames, so a few dozen frames cross it several times.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import torch

from cadence.models.qwen3_tts.codec import CodecDecoder
from cadence.models.qwen3_tts.codec_stream import StreamingCodecDecoder, TimeMajorConv, tf32_as_convs

TOL = 1e-4
SPF = 1920


pytestmark = pytest.mark.usefixtures("small_op_cpu_settings")  # conftest.py


def random_codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (frames, 16), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def offline(decoder: CodecDecoder, codes: torch.Tensor) -> torch.Tensor:
    return decoder(codes.T[None])[0, 0]


def ones() -> Iterator[int]:
    while True:
        yield 1


def growing() -> Iterator[int]:
    size = 2
    while True:
        yield size
        size += 1


def randomly(seed: int, high: int = 12) -> Iterator[int]:
    rng = random.Random(seed)
    while True:
        yield rng.randint(1, high)


def fixed(size: int) -> Iterator[int]:
    while True:
        yield size


@dataclass
class Stream:
    codes: torch.Tensor  # [T, 16]
    schedule: Iterator[int]  # chunk sizes asked for; the last chunk is clipped to what is left
    arrives: int = 0  # tick at which the stream is admitted (once a slot is free)
    slot: int | None = None
    done: int = 0
    chunks: list[torch.Tensor] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.done == self.codes.shape[0]

    def audio(self) -> torch.Tensor:
        return torch.cat(self.chunks)


def run_engine(sdec: StreamingCodecDecoder, streams: list[Stream], seed: int = 0) -> int:
    """Decode all streams to the end in batched calls grouped by chunk size; returns the number of calls."""
    rng = random.Random(seed)
    free = list(range(sdec.state.max_streams))
    calls, tick = 0, 0
    while not all(s.finished for s in streams):
        for s in streams:
            if s.slot is None and not s.finished and s.arrives <= tick and free:
                s.slot = free.pop(0)
                sdec.reset([s.slot])
        groups: dict[int, list[Stream]] = defaultdict(list)
        for s in streams:
            if s.slot is not None:
                groups[min(next(s.schedule), s.codes.shape[0] - s.done)].append(s)
        for frames, group in groups.items():
            rng.shuffle(group)  # slots in no particular order
            codes = torch.stack([s.codes[s.done : s.done + frames] for s in group])
            wav = sdec.decode(torch.tensor([s.slot for s in group]), codes)
            assert wav.shape == (len(group), frames * SPF)
            calls += 1
            for s, w in zip(group, wav, strict=True):
                s.chunks.append(w)
                s.done += frames
                if s.finished:
                    free.append(s.slot)
                    s.slot = None
        tick += 1
    return calls


def max_error(decoder: CodecDecoder, streams: list[Stream]) -> float:
    """Largest |streamed - offline| over all streams; NaN if any sample is NaN (Python's max() would drop it)."""
    errors = []
    for s in streams:
        ref = offline(decoder, s.codes)
        got = s.audio()
        assert got.shape == ref.shape == (s.codes.shape[0] * SPF,)
        errors.append((got - ref).abs().max())
    return float(torch.stack(errors).max())


def poison(sdec: StreamingCodecDecoder) -> None:
    """Fill the whole pool with garbage, so only a correct reset can make a slot cold again."""
    for t in sdec.state.tensors():
        t.fill_(7 if t.dtype == torch.int64 else float("nan"))


@pytest.mark.parametrize("schedule", ["ones", "growing", "random"])
def test_every_length_matches_offline(decoder, schedule):
    """Lengths 1..40, one stream each, all decoded together (clipped last chunks form their own calls)."""
    lengths = range(1, 41)
    sdec = StreamingCodecDecoder(decoder)
    sdec.allocate(len(lengths))
    poison(sdec)
    make = {"ones": lambda t: ones(), "growing": lambda t: growing(), "random": lambda t: randomly(1000 + t)}
    streams = [Stream(random_codes(t, seed=t), make[schedule](t)) for t in lengths]
    run_engine(sdec, streams)
    err = max_error(decoder, streams)
    print(f"\nevery length 1..40, schedule {schedule}: max abs err {err:.2e}")
    assert err <= TOL


@pytest.mark.parametrize("chunk", [3, 8, 9, 20, 50])
def test_chunks_around_the_window(decoder, chunk):
    """50 frames (6 windows of 8) in chunks shorter than, equal to and longer than the window, and whole."""
    sdec = StreamingCodecDecoder(decoder)
    sdec.allocate(1)
    stream = Stream(random_codes(50, seed=chunk), fixed(chunk))
    run_engine(sdec, [stream])
    err = max_error(decoder, [stream])
    print(f"\n50 frames in chunks of {chunk}: max abs err {err:.2e}")
    assert err <= TOL


@pytest.fixture(scope="module")
def long_stream(decoder) -> Stream:
    """300 frames (the official single-pass limit) streamed in random chunks of 1..24 frames."""
    sdec = StreamingCodecDecoder(decoder)
    sdec.allocate(2)
    stream = Stream(random_codes(300, seed=300), randomly(3, high=24))
    run_engine(sdec, [stream])
    return stream


def test_long_stream_matches_offline(decoder, long_stream):
    err = max_error(decoder, [long_stream])
    print(f"\n300 frames, random chunks: max abs err {err:.2e}")
    assert err <= TOL


def test_long_stream_matches_official_decode(tiny_checkpoint, long_stream):
    from official import Official

    theirs = Official(tiny_checkpoint).decode(long_stream.codes)
    got = long_stream.audio()
    assert got.shape == theirs.shape == (300 * SPF,)
    err = float((got - theirs).abs().max())
    print(f"\n300 frames vs the official decode: max abs err {err:.2e}, rms {float(theirs.pow(2).mean().sqrt()):.3f}")
    assert err <= TOL


def test_interleaved_streams_share_batched_calls(decoder):
    """Six streams through a 3-slot pool: late arrivals join mid-way, finished slots are reused."""
    sdec = StreamingCodecDecoder(decoder)
    sdec.allocate(3)
    poison(sdec)
    plan = [(37, 0, randomly(1)), (25, 0, ones()), (30, 4, randomly(2, high=5)), (12, 6, growing()), (20, 9, ones())]
    plan.append((33, 10, randomly(3, high=9)))
    streams = [Stream(random_codes(t, seed=50 + i), sched, arrives=a) for i, (t, a, sched) in enumerate(plan)]
    calls = run_engine(sdec, streams, seed=5)
    assert calls < sum(s.codes.shape[0] for s in streams)  # some calls did carry several streams
    err = max_error(decoder, streams)
    print(f"\ninterleaved streams ({calls} calls): max abs err {err:.2e}")
    assert err <= TOL


def test_slots_do_not_leak(decoder):
    """Decoding some slots leaves the others' state untouched, and a stream's audio does not depend
    on what the other slots hold."""
    codes = random_codes(24, seed=7)
    clean = StreamingCodecDecoder(decoder)
    clean.allocate(3)
    expected = torch.cat([clean.decode([1], codes[None, i : i + 6])[0] for i in range(0, 24, 6)])

    dirty = StreamingCodecDecoder(decoder)
    dirty.allocate(3)
    dirty.decode([0, 2], random_codes(40, seed=8).view(2, 20, 16))  # real histories in slots 0 and 2
    dirty.reset([1])
    got = []
    for i in range(0, 24, 6):
        got.append(dirty.decode([1], codes[None, i : i + 6])[0])
        before = [t[1].clone() for t in dirty.state.tensors()]
        dirty.decode([2, 0], random_codes(6, seed=i).expand(2, 6, 16))
        for b, t in zip(before, dirty.state.tensors(), strict=True):
            assert torch.equal(b, t[1])
    assert torch.equal(torch.cat(got), expected)


def test_reset_makes_a_used_slot_cold(decoder):
    codes = random_codes(10, seed=9)
    sdec = StreamingCodecDecoder(decoder)
    sdec.allocate(1)
    first = sdec.decode([0], codes[None])
    sdec.decode([0], random_codes(5, seed=10)[None])
    sdec.reset([0])
    assert torch.equal(sdec.decode([0], codes[None]), first)


@pytest.mark.parametrize(("kernel", "stride"), [(4, 2), (10, 5), (6, 3), (3, 3), (5, 2)])
def test_transposed_conv_as_phase_conv(kernel, stride):
    """The streaming decoder runs each transposed conv as a forward conv over its carried inputs
    plus the new ones; its phases, interleaved, are the transposed conv's blocks of the new inputs."""
    g = torch.Generator().manual_seed(kernel * 10 + stride)
    conv = torch.nn.ConvTranspose1d(6, 5, kernel, stride=stride)
    torch.nn.init.normal_(conv.weight, generator=g)
    torch.nn.init.normal_(conv.bias, generator=g)
    past = -(-kernel // stride) - 1
    x = torch.randn(2, 6, past + 7, generator=g)
    with torch.no_grad():
        expected = conv(x)[..., past * stride : (past + 7) * stride]
        got = TimeMajorConv.of(conv)(x.transpose(1, 2).contiguous().transpose(1, 2), with_bias=True)
    assert got.stride(1) == 1  # time-major
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dilation", [1, 3])
def test_time_major_conv_equals_conv1d(dilation):
    g = torch.Generator().manual_seed(dilation)
    conv = torch.nn.Conv1d(6, 5, 7, dilation=dilation)
    x = torch.randn(2, 6, 6 * dilation + 9, generator=g)
    with torch.no_grad():
        got = TimeMajorConv.of(conv)(x.transpose(1, 2).contiguous().transpose(1, 2), with_bias=False)
        expected = torch.nn.functional.conv1d(x, conv.weight, None, dilation=dilation)
    assert got.stride(1) == 1
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_bytes_per_stream_matches_the_pool(decoder):
    sdec = StreamingCodecDecoder(decoder)
    state = sdec.allocate(4)
    held = sum(t.numel() * t.element_size() for t in state.tensors())
    assert held == 4 * sdec.bytes_per_stream()


def test_real_config_state_fits_in_8_mb(skeleton_06b):
    from cadence.models.qwen3_tts.config import Qwen3TTSConfig

    cfg = Qwen3TTSConfig.from_dir(skeleton_06b).speech_tokenizer.decoder
    with torch.device("meta"):
        sdec = StreamingCodecDecoder(CodecDecoder(cfg))
    size = sdec.bytes_per_stream()
    print(f"\nreal 0.6B codec: {size} bytes of streaming state per stream ({size / 2**20:.2f} MiB)")
    assert size <= 8 * 2**20


def test_bad_calls_are_refused(decoder):
    sdec = StreamingCodecDecoder(decoder)
    with pytest.raises(RuntimeError, match="allocate"):
        sdec.decode([0], random_codes(2, seed=0)[None])
    sdec.allocate(2)
    with pytest.raises(ValueError, match="codes must be"):
        sdec.decode([0, 1], random_codes(2, seed=0)[None])
    with pytest.raises(ValueError, match="codes must be"):
        sdec.decode([0], random_codes(2, seed=0)[None, :, :8])
    with pytest.raises(ValueError, match="codes must be"):
        sdec.decode([0], random_codes(0, seed=0)[None])


@pytest.fixture
def tf32_flags():
    """Restores PyTorch's two TF32 switches after a test that sets them."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("tf32", [True, False])
def test_an_explicit_tf32_choice_sets_convs_and_linears_and_restores_both(tf32, tf32_flags):
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = not tf32
    with tf32_as_convs(tf32):
        assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    assert torch.backends.cuda.matmul.allow_tf32 is not tf32 and torch.backends.cudnn.allow_tf32 is not tf32


def test_engine_config_codec_tf32_reaches_the_streaming_decoder(tiny_model):
    from cadence.engine.config import EngineConfig
    from cadence.engine.engine import build_core

    for tf32 in (None, True, False):
        core = build_core(tiny_model, EngineConfig(max_streams=1, kv_cache_memory=0.01, codec_tf32=tf32))
        assert core.codec.decoder.tf32 is tf32


@pytest.mark.parametrize("convs_tf32", [True, False])
def test_codec_linears_follow_the_conv_tf32_switch(convs_tf32, tf32_flags):
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = not convs_tf32, convs_tf32
    with tf32_as_convs():
        assert torch.backends.cuda.matmul.allow_tf32 is convs_tf32
    assert torch.backends.cuda.matmul.allow_tf32 is not convs_tf32  # restored for the rest (the talker)
