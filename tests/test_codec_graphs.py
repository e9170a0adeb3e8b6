"""The Codec partition under CUDA graphs against the fp32 offline decode, on a GPU.

Every (batch bucket, frames bucket) graph is exercised: streams of different lengths advance with
schedules made of 1, 2, 4 and 8-frame chunks, several per call, and a finishing stream flushes an
odd-sized last chunk (padded inside the graph, trimmed after). The concatenated audio of each stream
must equal the fp32 `CodecDecoder.forward` over all its codes within 1e-4 (fp32, TF32 off). With
TF32 on, the default, parity is within 3x the official decode's own batch-to-batch variation on
the GPU (the same codes decoded alone and among others, convolutions in TF32 as PyTorch runs
them), measured here on this codec: on the full-size codec that variation is 2.8e-3, so 1e-2; a
random codec's TF32 error scales with its gain, so a fixed bound would not carry over.
With the codec in bfloat16/float16 (EngineConfig.codec_dtype, opt-in) neither is within 1e-3: on
an H200 this tiny codec moves 0.11-0.18 (bf16) and 0.013-0.015 (fp16). Their bounds here are those
measurements with a margin, guarding against regressions (NaN, silence, a lost fp32 SnakeBeta)
rather than claiming parity. The error is
printed first (-s).
"""

from __future__ import annotations

import pytest
import torch

from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.codec_stream import StreamingCodecDecoder, tf32_switches
from cadence.models.qwen3_tts.partitions import Qwen3TTSCodec

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return Qwen3TTS.from_pretrained(tiny_checkpoint, "cuda", "fp32")


# float32 exact (TF32 off) and the opt-in half precisions; TF32 is bounded by the official variation.
TOLERANCE = {"float32": 1e-4, "bfloat16": 0.3, "float16": 0.03}
TF32_PARITY = 3.0  # TF32 streamed audio within this many times the official decode's batch variation


def utterances(streams: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(streams)
    return [torch.randint(0, 2048, (300 - 37 * i, 16), generator=g) for i in range(streams)]


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("streams", [1, 3, 8])
def test_graphed_chunks_equal_offline_decode(model, streams, dtype):
    codec = Qwen3TTSCodec(model, max_slots=8, use_graphs=True, max_batch=8, dtype=getattr(torch, dtype))
    errors = streamed_errors(model, codec, utterances(streams))
    print(f"\n{dtype}, {streams} streams: max abs err {max(errors):.2e} (per stream: {_listed(errors)})")
    assert max(errors) <= TOLERANCE[dtype]


@pytest.mark.parametrize("streams", [1, 3, 8])
def test_tf32_chunks_within_the_official_decodes_own_variation(model, streams):
    codes = utterances(streams)
    variation = official_batch_variation(model, codes if streams > 1 else utterances(3))
    codec = Qwen3TTSCodec(model, max_slots=8, use_graphs=True, max_batch=8, tf32=True)
    errors = streamed_errors(model, codec, codes)
    print(f"\nTF32, {streams} streams: max abs err {max(errors):.2e} (per stream: {_listed(errors)}); "
          f"official batch-to-batch variation {variation:.2e}")  # fmt: skip
    assert 0 < variation
    assert max(errors) <= TF32_PARITY * variation


def test_groups_past_the_graph_limit_run_as_several_graphs(model):
    """Graphs of at most 8 stream-frames: 8 streams of 8-frame chunks run as eight 1-stream graphs,
    and every stream still equals the offline decode."""
    codec = Qwen3TTSCodec(model, max_slots=8, use_graphs=True, max_batch=8, graph_stream_frames=8)
    assert codec.graph_batch == {1: 8, 2: 4, 4: 2, 8: 1}
    assert max(b * f for b, f in codec.graphs) == 8
    errors = streamed_errors(model, codec, utterances(8))
    assert max(errors) <= TOLERANCE["float32"]


def _listed(errors: list[float]) -> str:
    return ", ".join(f"{e:.1e}" for e in errors)


@torch.no_grad()
def official_batch_variation(model, codes: list[torch.Tensor]) -> float:
    """How far the official offline decode of the same codes moves between batches on this GPU,
    with PyTorch's default arithmetic (cuDNN convolutions in TF32, matmuls exact): each utterance,
    cut to the shortest, decoded alone and with the others (batches of 2 and of all); the largest
    difference."""
    shortest = min(c.shape[0] for c in codes)
    batch = torch.stack([c[:shortest] for c in codes]).transpose(1, 2).cuda()
    with tf32_switches(True, False):
        alone = [model.codec.decoder(batch[i : i + 1])[0, 0] for i in range(len(codes))]
        together = [model.codec.decoder(batch[:n])[:, 0] for n in sorted({2, len(codes)})]
    return max(float((out[i] - alone[i]).abs().max()) for out in together for i in range(out.shape[0]))


def streamed_errors(model, codec: Qwen3TTSCodec, codes: list[torch.Tensor]) -> list[float]:
    """Each utterance streamed through `codec` in 1-8 frame chunks (several streams a call, odd final
    chunks flushed), against the model's own fp32 offline decode (TF32 off): max abs error each."""
    assert codec.graphs, "no graphs were captured"
    streams, lengths = len(codes), [c.shape[0] for c in codes]
    slots = list(range(streams))
    codec.reset(slots)
    done = [0] * streams
    audio: list[list[torch.Tensor]] = [[] for _ in range(streams)]
    sizes = [1, 2, 4, 8, 8, 4, 2, 1]
    step = 0
    while any(d < n for d, n in zip(done, lengths, strict=True)):
        size = sizes[step % len(sizes)]
        live = [s for s in slots if lengths[s] - done[s] >= size]
        if live:
            frames = torch.stack([codes[s][done[s] : done[s] + size] for s in live])
            for s, wav in zip(live, codec.fetch(codec.decode(live, frames)), strict=True):
                audio[s].append(torch.from_numpy(wav))
                done[s] += size
        for s in slots:  # a stream with fewer frames left than any bucket flushes them as its last chunk
            left = lengths[s] - done[s]
            if 0 < left < size and left not in codec.FRAME_BUCKETS:
                wav = torch.from_numpy(codec.fetch(codec.decode([s], codes[s][done[s] :][None], finishing=True))[0])
                assert wav.shape[0] == left * 1920
                audio[s].append(wav)
                done[s] += left
        step += 1
    errors = []
    for s in slots:
        streamed = torch.cat(audio[s])
        offline = model.codec.decoder(codes[s].T[None].cuda())[0, 0].cpu()  # the model's own: fp32
        assert streamed.shape == offline.shape
        assert torch.isfinite(streamed).all()
        errors.append(float((streamed - offline).abs().max()))
    return errors


def test_capture_autotunes_the_graphs_asked_and_restores_the_switch(model, monkeypatch):
    """Each graph is captured with cuDNN autotuning set by its stream-frames (autotune_from); the
    process's own setting comes back after, so eager convs elsewhere keep it. From 4 stream-frames:
    of the 12 graphs (batch 1, 2, 4 x frames 1, 2, 4, 8) some are autotuned and some not."""
    autotune_from = 4
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    seen: dict[tuple[int, int], set[bool]] = {}
    decode = StreamingCodecDecoder.decode

    def recording_decode(self, slots, codes):
        seen.setdefault(tuple(codes.shape[:2]), set()).add(torch.backends.cudnn.benchmark)
        return decode(self, slots, codes)

    monkeypatch.setattr(StreamingCodecDecoder, "decode", recording_decode)
    codec = Qwen3TTSCodec(model, max_slots=4, use_graphs=True, max_batch=4, autotune_from=autotune_from)
    assert set(seen) == set(codec.graphs) == set(codec.capture_seconds)
    assert all(on == {b * f >= autotune_from} for (b, f), on in seen.items())
    assert {True, False} <= set().union(*seen.values())
    assert torch.backends.cudnn.benchmark is False
