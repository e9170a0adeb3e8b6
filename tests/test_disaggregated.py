"""Disaggregated partitions, on the CPU: the Codec partition on a device of its own, run on earlier
frames while the Talker decodes (pipelined), gives exactly the colocated engine's audio.

Both "devices" are the CPU here, so the copy between them is a no-op; what runs is the path a
second GPU takes: frames kept on the Talker's device, gathered and handed over per codec chunk,
codec walks launched before the talker's and collected after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from cadence.engine.config import ChunkPolicy, EngineConfig
from cadence.engine.core import EngineCore
from cadence.engine.engine import build_core
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request


@dataclass
class Heard:
    pcm: list[np.ndarray] = field(default_factory=list)
    codes: list[np.ndarray] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    finish: str | None = None
    first_chunk_step: int | None = None


def run(model, core: EngineCore, late_joiner_step: int = 3) -> dict[str, Heard]:
    """Three requests at once and a fourth a few steps later; every chunk, by request."""
    requests = [
        SynthesisRequest("One.", max_new_tokens=5, ignore_eos=True, seed=1, request_id="a"),
        SynthesisRequest("Two words.", max_new_tokens=13, ignore_eos=True, seed=2, request_id="b"),
        SynthesisRequest("Three more words.", max_new_tokens=30, seed=3, request_id="c"),  # may stop on EOS
        SynthesisRequest("Late.", max_new_tokens=9, ignore_eos=True, seed=4, request_id="d"),
    ]
    prepared = [prepare_request(model, r, 4096) for r in requests]
    for r in prepared[:3]:
        core.add_request(r)
    heard: dict[str, Heard] = {r.request_id: Heard() for r in prepared}
    step = 0
    while core.has_work() or step <= late_joiner_step:
        if step == late_joiner_step:
            core.add_request(prepared[3])
        for chunk in core.step():
            h = heard[chunk.request_id]
            h.pcm.append(chunk.pcm)
            h.spans.append((chunk.frame_start, chunk.frame_end))
            if chunk.codes is not None:
                h.codes.append(chunk.codes)
            if chunk.pcm.size and h.first_chunk_step is None:
                h.first_chunk_step = step
            if chunk.is_final:
                h.finish = chunk.finish_reason.value
        step += 1
    return heard


def test_disaggregated_pipelined_codec_equals_colocated(tiny_model):
    config = EngineConfig(max_streams=4, return_codes=True, chunk_policy=ChunkPolicy(1, 2.0, 4))
    colocated = build_core(tiny_model, config)
    assert colocated.config.pipeline_codec is False  # auto: the codec shares the talker's device
    disaggregated = build_core(tiny_model, EngineConfig(**{**config.__dict__, "pipeline_codec": True}), "cpu")
    assert disaggregated.config.pipeline_codec is True and disaggregated.codec.device.type == "cpu"

    expected = run(tiny_model, colocated)
    got = run(tiny_model, disaggregated)
    assert disaggregated._ring is not None  # frames went through the device-side ring
    for rid, want in expected.items():
        have = got[rid]
        assert have.finish == want.finish and have.spans == want.spans, rid
        np.testing.assert_array_equal(np.concatenate(have.codes), np.concatenate(want.codes))
        np.testing.assert_array_equal(np.concatenate(have.pcm), np.concatenate(want.pcm))
        # Pipelined, later chunks are decoded in the step after their frames, but a first chunk
        # still follows the talker in its own step: first audio is not delayed.
        assert have.first_chunk_step == want.first_chunk_step, rid
    assert sum(len(np.concatenate(h.pcm)) for h in got.values()) > 0
    assert not disaggregated.streams and not disaggregated.running  # everything freed


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_disaggregated_on_two_gpus_equals_colocated(tiny_checkpoint):
    """The real case: Talker on cuda:0, Codec on cuda:1, frames crossing device to device."""
    from cadence.models.qwen3_tts import Qwen3TTS

    config = EngineConfig(max_streams=4, return_codes=True, chunk_policy=ChunkPolicy(1, 2.0, 4))
    colocated = Qwen3TTS.from_pretrained(tiny_checkpoint, "cuda:0", "fp32")
    expected = run(colocated, build_core(colocated, config))
    model = Qwen3TTS.from_pretrained(tiny_checkpoint, "cuda:0", "fp32")
    disaggregated = build_core(model, config, "cuda:1")  # moves the codec's weights to cuda:1
    assert disaggregated.config.pipeline_codec is True and disaggregated.codec.device == torch.device("cuda:1")
    got = run(model, disaggregated)
    for rid, want in expected.items():
        have = got[rid]
        assert have.finish == want.finish and have.spans == want.spans, rid
        np.testing.assert_array_equal(np.concatenate(have.codes), np.concatenate(want.codes))
        diff = np.abs(np.concatenate(have.pcm).astype(np.int32) - np.concatenate(want.pcm).astype(np.int32))
        # Each side is within 1e-4 of the fp32 offline decode (test_codec_graphs); cuDNN may pick other
        # convolution algorithms on the other GPU, so the two agree within twice that (8 int16 steps).
        assert diff.max() <= 8, (rid, int(diff.max()))
