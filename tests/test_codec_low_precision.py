"""The Codec partition in bfloat16/float16 (EngineConfig.codec_dtype), on the tiny random
codec (CPU).

Half precision cannot match the fp32 decode within 1e-4 as the fp32 stream does: every bf16 rounding
is ~0.4 % relative, and the codec has dozens of them in series. What is checked is what holds here:
the audio is finite and within a few percent (bf16) or a fraction of a percent (fp16) of the fp32
decode's RMS; a low-precision stream is as close to it as the same decoder's offline decode (chunking
adds no error, though the two are not bit-equal: rounding follows each chunk's shapes); the weights
and pools are in the dtype except where the design keeps fp32; and the engine casts a copy, so the
model's own decoder stays the fp32 offline decode. Run with -s to see the measured errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_cases import codes_of, config, request, run
from test_codec_stream import Stream, fixed, growing, offline, ones, random_codes, randomly, run_engine

from cadence.audio import to_int16
from cadence.engine.config import EngineConfig
from cadence.engine.engine import build_core
from cadence.models.qwen3_tts.codec import CodecDecoder, SnakeBeta, cast_decoder
from cadence.models.qwen3_tts.codec_stream import StreamingCodecDecoder

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# Bounds on (low precision - fp32), about twice what this codec measures: the RMS relative to the
# fp32 audio's RMS (bf16 ~4 %, fp16 ~0.5 %: fp16 has 3 more mantissa bits) and the max abs (bf16
# ~0.13, fp16 ~0.018; the audio's RMS is 0.3).
RELATIVE_RMS = {"bfloat16": 0.08, "float16": 0.012}
MAX_ABS = {"bfloat16": 0.25, "float16": 0.04}


pytestmark = pytest.mark.usefixtures("small_op_cpu_settings")  # conftest.py


@pytest.fixture(scope="module", params=list(DTYPES))
def low(request, decoder) -> tuple[str, CodecDecoder]:
    return request.param, cast_decoder(decoder, DTYPES[request.param])


def errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max abs, RMS relative to ref's RMS) of got - ref."""
    diff = (got - ref).double()
    return float(diff.abs().max()), float(diff.pow(2).mean().sqrt() / ref.double().pow(2).mean().sqrt())


def test_the_copy_is_low_precision_where_it_is_cheap_to_be(decoder, low):
    name, dec = low
    dtype = DTYPES[name]
    fp32 = {
        *(p for m in dec.modules() if isinstance(m, SnakeBeta) for p in m.parameters()),
        *dec.quantizer.parameters(),
        *dec.decoder[-1].parameters(),
        *(p for m in dec.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()),
        *(p for n, p in dec.named_parameters() if n.endswith(("gamma", "scale"))),
    }
    for n, p in dec.named_parameters():
        assert p.dtype == (torch.float32 if p in fp32 else dtype), n
    low_params = sum(p.numel() for p in dec.parameters() if p.dtype == dtype)
    codebooks = sum(p.numel() for p in dec.quantizer.parameters())
    # nearly every weight outside the codebooks (the real codec's 105 M of 114 M)
    assert low_params > 0.9 * (sum(p.numel() for p in dec.parameters()) - codebooks)
    assert {p.dtype for p in decoder.parameters()} == {torch.float32}  # the original is untouched
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(decoder.parameters(), dec.parameters(), strict=True))


@pytest.mark.parametrize("dtype", list(DTYPES.values()))
def test_snakebeta_computes_in_fp32(dtype):
    """A low-precision input gives the fp32 result rounded once, not a low-precision computation
    (sin of a large argument in bf16 is noise: NaN/silence elsewhere)."""
    g = torch.Generator().manual_seed(0)
    act = SnakeBeta(8)
    with torch.no_grad():
        act.alpha.copy_(torch.randn(8, generator=g))
        act.beta.copy_(torch.randn(8, generator=g))
    x = (torch.randn(2, 8, 64, generator=g) * 30).to(dtype)
    y = act(x)
    assert y.dtype == dtype and act.alpha.dtype == act.beta.dtype == torch.float32
    assert torch.equal(y, act(x.float()).to(dtype))


def test_low_precision_stream_is_close_to_the_fp32_decode(decoder, low):
    """Twelve streams of 1..45 frames (the tiny window is 8) in mixed chunk schedules, batched."""
    name, dec = low
    sdec = StreamingCodecDecoder(dec)
    sdec.allocate(6)
    schedules = [ones, growing, lambda: randomly(7), lambda: fixed(8)]
    streams = [Stream(random_codes(1 + 4 * i, seed=100 + i), schedules[i % 4](), arrives=i // 2) for i in range(12)]
    run_engine(sdec, streams)
    got = torch.cat([s.audio() for s in streams])
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    ref = torch.cat([offline(decoder, s.codes) for s in streams])
    worst, rel = errors(got, ref)
    _, rel_offline = errors(torch.cat([offline(dec, s.codes) for s in streams]), ref)
    print(
        f"\n{name} stream vs fp32 offline: max abs {worst:.2e}, RMS {rel:.2%} of the audio's "
        f"({float(ref.pow(2).mean().sqrt()):.3f}); the {name} offline decode: RMS {rel_offline:.2%}"
    )
    assert rel <= RELATIVE_RMS[name]
    assert worst <= MAX_ABS[name]
    # Streaming adds nothing to the dtype's own error. It is not bit-equal to the same decoder's
    # offline decode, as the rounding follows each chunk's shapes (measured: ~half the dtype's
    # error apart), but it is as close to fp32 (measured ratio 1.002).
    assert rel <= 1.2 * rel_offline


def test_pools_take_their_readers_dtype(decoder, low, skeleton_06b):
    name, dec = low
    dtype = DTYPES[name]
    sdec = StreamingCodecDecoder(dec)
    state = sdec.allocate(3)
    out_conv = dec.decoder[-1]
    assert [t.dtype for t in state.conv] == [
        torch.float32 if h.module is out_conv else dtype for h in sdec.histories
    ]  # the output conv reads fp32
    assert state.keys.dtype == state.values.dtype == dtype and state.frames.dtype == torch.int64
    held = sum(t.numel() * t.element_size() for t in state.tensors())
    assert held == 3 * sdec.bytes_per_stream()
    assert sdec.bytes_per_stream() < 0.55 * StreamingCodecDecoder(decoder).bytes_per_stream()

    from cadence.models.qwen3_tts.config import Qwen3TTSConfig

    cfg = Qwen3TTSConfig.from_dir(skeleton_06b).speech_tokenizer.decoder
    with torch.device("meta"):
        real = StreamingCodecDecoder(cast_decoder(CodecDecoder(cfg), dtype)).bytes_per_stream()
    print(f"\nreal 0.6B codec in {name}: {real} bytes of streaming state per stream (fp32: 5193992)")
    assert real < 0.51 * 5193992


@pytest.mark.parametrize("name", list(DTYPES))
def test_engine_runs_the_codec_in_codec_dtype(tiny_model, name):
    """build_core casts a copy: the engine's audio is the low-precision decode of its codes, the
    model's own decoder (SpeechTokenizer.decode, `cadence synth`, parity) stays fp32."""
    before = {k: v.clone() for k, v in tiny_model.codec.state_dict().items()}
    core = build_core(tiny_model, config(max_streams=2, codec_dtype=name))
    assert core.codec.decoder.decoder is not tiny_model.codec.decoder
    assert core.codec.decoder.state.keys.dtype == DTYPES[name]
    req = request(tiny_model, 0, 20, ignore_eos=True)
    chunks = run(core, {0: [req]})[req.request_id]
    codes = codes_of(chunks)
    pcm = np.concatenate([c.pcm for c in chunks])
    assert pcm.shape == (20 * 1920,)
    state = tiny_model.codec.state_dict()
    assert all(torch.equal(state[k], v) and v.dtype == torch.float32 for k, v in before.items())
    ref = tiny_model.codec.decode(codes)
    worst, rel = errors(torch.from_numpy(pcm.astype(np.float32) / 32767), ref)
    print(f"\nengine with codec_dtype={name}: max abs {worst:.2e}, RMS {rel:.2%} of the fp32 decode's")
    assert rel <= RELATIVE_RMS[name] and worst <= MAX_ABS[name]
    assert not np.array_equal(pcm, to_int16(ref))  # it did run in low precision


def test_codec_dtype_is_validated():
    with pytest.raises(ValueError, match="unknown codec dtype 'fp16'; allowed: float32, bfloat16, float16"):
        EngineConfig(codec_dtype="fp16")
    assert EngineConfig().codec_dtype == "float32"
