"""Long utterances through the streaming codec, on a codec with the real decoder window (72 frames).

The official package decodes more than 300 frames in 300-frame windows with 25 frames of left
context. With the released window (72 frames, wider than that context) this differs from the exact
decode after frame 300; the tiny test codecs (window 8) hide it. The streaming decoder is exact by
default and reproduces the official windows with `windowed=True` (`--codec-decode chunked`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_cases import codes_of, run

from cadence.audio import to_int16
from cadence.engine.config import EngineConfig
from cadence.engine.engine import build_core
from cadence.models.qwen3_tts.builtin import find_architecture
from cadence.models.qwen3_tts.checkpoint import merge
from cadence.models.qwen3_tts.codec_stream import StreamingCodecDecoder
from cadence.models.qwen3_tts.codec_windows import CodecWindows
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request
from cadence.models.qwen3_tts.partitions import Qwen3TTSCodec

TOL = 1e-4
SPF = 1920
WINDOW_START = 300

pytestmark = pytest.mark.usefixtures("small_op_cpu_settings")  # conftest.py


@pytest.fixture(scope="module")
def model():
    """The tiny random model with the released codec's attention window (72 frames)."""
    arch = find_architecture("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice").shrink("tiny")
    released = find_architecture("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice").speech_tokenizer["decoder_config"]
    assert released["sliding_window"] == 72
    arch.speech_tokenizer = merge(arch.speech_tokenizer, {"decoder_config": {"sliding_window": 72}})
    return arch.random_model("cpu", "fp32", seed=5)


def random_codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 2048, (frames, 16), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def exact(model, codes: torch.Tensor) -> torch.Tensor:
    return model.codec.decoder(codes.T[None])[0, 0]


@torch.no_grad()
def official(model, codes: torch.Tensor) -> torch.Tensor:
    return model.codec.decoder.chunked_decode(codes.T[None])[0, 0]


@torch.no_grad()
def stream(model, streams: list[torch.Tensor], sizes: list[int], windowed: bool) -> list[torch.Tensor]:
    """Decode the streams side by side, `sizes` frames a call (cycled), in batched calls."""
    decoder = StreamingCodecDecoder(model.codec.decoder)
    decoder.allocate(len(streams))
    windows = CodecWindows(decoder, len(streams), torch.device("cpu")) if windowed else None
    decoder.reset(list(range(len(streams))))
    done, out, call = [0] * len(streams), [[] for _ in streams], 0
    while any(d < s.shape[0] for d, s in zip(done, streams, strict=True)):
        size = sizes[call % len(sizes)]
        call += 1
        live = [i for i, s in enumerate(streams) if s.shape[0] - done[i] >= size]
        if not live:  # the last frames of a stream: one call of what is left
            live = [min((i for i, s in enumerate(streams) if done[i] < s.shape[0]), key=lambda i: done[i])]
            size = streams[live[0]].shape[0] - done[live[0]]
        frames = torch.stack([streams[i][done[i] : done[i] + size] for i in live])
        wav = windows.decode(live, frames, decoder.decode) if windows else decoder.decode(live, frames)
        for row, i in enumerate(live):
            out[i].append(wav[row])
            done[i] += size
    return [torch.cat(o) for o in out]


@pytest.fixture(scope="module")
def long_codes() -> torch.Tensor:
    return random_codes(330, seed=1)


def test_the_official_windows_differ_from_the_exact_decode_after_frame_300(model, long_codes):
    whole, windows = exact(model, long_codes), official(model, long_codes)
    cut = WINDOW_START * SPF
    assert (whole[:cut] - windows[:cut]).abs().max() < TOL  # the first window is the whole decode
    assert (whole[cut:] - windows[cut:]).abs().max() > 1e-2  # a window of 72 frames sees past the 25 of context


def test_streaming_is_exact_by_default(model, long_codes):
    (audio,) = stream(model, [long_codes], [7, 3, 8], windowed=False)
    assert (audio - exact(model, long_codes)).abs().max() < TOL


def test_windowed_streaming_reproduces_the_official_decode(model, long_codes):
    """Two streams at different offsets, so their window starts fall in different calls (one inside
    a chunk, one at a chunk's first frame), batched with each other where neither restarts."""
    other = random_codes(321, seed=2)
    audio = stream(model, [long_codes, other], [7, 3, 8, 2], windowed=True)
    for codes, got in zip([long_codes, other], audio, strict=True):
        assert got.shape[0] == codes.shape[0] * SPF
        assert (got - official(model, codes)).abs().max() < TOL


def test_a_chunk_starting_at_a_window_start_restarts_there(model):
    codes = random_codes(310, seed=3)
    (audio,) = stream(model, [codes], [10], windowed=True)  # the call at frame 300 begins the window
    assert (audio - official(model, codes)).abs().max() < TOL


def test_reference_frames_count_toward_the_windows(model):
    """An in-context clone decodes its reference first: the official decode sees reference +
    generated frames as one utterance, so the windows start 300 frames after the reference begins."""
    ref, generated = random_codes(290, seed=4), random_codes(24, seed=5)
    partition = Qwen3TTSCodec(model, max_slots=2, windowed=True)

    class Prompt:
        ref_codes = ref.tolist()

    class Request:
        prompt = Prompt()

    partition.reset([1], [Request()])
    audio = torch.cat([partition.decode([1], generated[i : i + 8][None])[0] for i in range(0, 24, 8)])
    expected = official(model, torch.cat([ref, generated]))[ref.shape[0] * SPF :]
    assert (audio - expected).abs().max() < TOL


def test_the_engine_streams_either_decode(model):
    """Through the engine: 320 greedy frames, exact by default, the official windows with
    codec_decode="chunked"; each equal, within one LSB, to the offline decode it reproduces."""
    request = SynthesisRequest("Hello.", voice="ryan", greedy=True, max_new_tokens=320, ignore_eos=True)
    results = {}
    for mode in ("exact", "chunked"):
        config = EngineConfig(max_streams=2, kv_cache_memory=0.05, return_codes=True, codec_decode=mode)
        req = prepare_request(model, request, 4096)
        chunks = run(build_core(model, config), {0: [req]})[req.request_id]
        results[mode] = (codes_of(chunks), np.concatenate([c.pcm for c in chunks]))
    codes = results["exact"][0]
    assert codes.shape[0] == 320 and torch.equal(codes, results["chunked"][0])
    for mode, decode in (("exact", exact), ("chunked", official)):
        expected = to_int16(decode(model, codes))
        assert np.abs(results[mode][1].astype(np.int32) - expected.astype(np.int32)).max() <= 1, mode
    assert not np.array_equal(results["exact"][1], results["chunked"][1])
