"""The fused decode walk (fast_step.py) against the eager walk, whose parity with the official
implementation is established in test_parity.py / test_engine.py.

On the CPU the fused walk runs with the PyTorch definitions of its fused ops ("torch" backend), so
CI checks its logic (state gathering by slot, the dummy padding slot, the code predictor's paged
cache, the fused layer order); on a GPU ("gpu" marker) the Triton kernels under CUDA graphs.
"""

from __future__ import annotations

import pytest
import torch

from cadence.engine.engine import build_core
from cadence.engine.request import FinishReason
from cadence.models.qwen3_tts import Qwen3TTS

from test_engine import codes_of, config, force_code0, request, run

FRAMES = 64


def backends():
    yield "torch"
    if torch.cuda.is_available():
        yield pytest.param("triton", marks=pytest.mark.gpu)


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    if torch.cuda.is_available():  # fp32 without TF32 so greedy codes can be compared exactly
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return Qwen3TTS.from_pretrained(tiny_checkpoint, "cuda", "fp32")
    return Qwen3TTS.from_pretrained(tiny_checkpoint, "cpu", "fp32")


def both_walks(model, backend, reqs, arrivals=None, **cfg):
    out = {}
    for b in ("sdpa", backend):
        core = build_core(model, config(attention_backend=b, **cfg))
        out[b] = run(core, arrivals or {0: reqs})
    return out["sdpa"], out[backend]


@pytest.mark.parametrize("backend", list(backends()))
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_fused_greedy_codes_equal_eager(model, backend, batch):
    reqs = [request(model, i, FRAMES - 3 * i) for i in range(batch)]
    eager, fused = both_walks(model, backend, reqs)
    for r in reqs:
        assert torch.equal(codes_of(fused[r.request_id]), codes_of(eager[r.request_id])), r.request_id
        assert codes_of(fused[r.request_id]).shape[0] == r.params.max_new_tokens


@pytest.mark.parametrize("backend", list(backends()))
def test_fused_sampling_equals_eager_and_late_joiners(model, backend):
    reqs = [request(model, i, 20 + i, greedy=False, seed=100 + i) for i in range(5)]
    eager, fused = both_walks(model, backend, reqs, {0: reqs[:2], 3: reqs[2:4], 7: reqs[4:]})
    for r in reqs:
        assert torch.equal(codes_of(fused[r.request_id]), codes_of(eager[r.request_id])), r.request_id


@pytest.mark.parametrize("backend", list(backends()))
def test_eos_is_emitted_by_the_fused_walk(model, backend):
    """Regression: a graph replay must read the EOS ban from device state, not a placeholder."""
    eos = model.config.talker.codec_eos_token_id
    forced = force_code0(model, eos)
    core = build_core(forced, config(attention_backend=backend))
    reqs = [request(forced, i, 50) for i in range(3)]
    out = run(core, {0: reqs[:1], 1: reqs[1:]})
    for r in reqs:
        assert out[r.request_id][-1].finish_reason == FinishReason.STOP
        assert codes_of(out[r.request_id]).shape[0] == 2  # EOS is banned for exactly two frames
    assert core.talker.kv.used_pages == 0
