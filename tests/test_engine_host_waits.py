"""No host wait inside an engine step on a GPU, checked with PyTorch's sync debug mode: any
synchronising copy, .item() or stream synchronisation raises. The waits the core means to make, on
events of outputs that are due (a walk's read-back a step late, a codec walk's audio after the next
walk is queued, a stream's first chunk behind its step's advance), are event waits and not flagged."""

from __future__ import annotations

import pytest
import torch
from engine_cases import config

from cadence.engine.engine import build_core
from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request

pytestmark = pytest.mark.gpu


def test_a_loaded_step_never_waits_for_the_device(tiny_checkpoint):
    model = Qwen3TTS.from_pretrained(tiny_checkpoint, "cuda", "bf16")
    core = build_core(model, config(attention_backend="triton"))
    texts = ["First one.", "A second, longer one.", "Third."]
    asks = [SynthesisRequest(t, max_new_tokens=20, ignore_eos=True, seed=i, request_id=t) for i, t in enumerate(texts)]
    reqs = [prepare_request(model, a, 4096) for a in asks]
    core.add_request(reqs[0])
    core.add_request(reqs[1])
    for _ in range(4):  # warm-up: first admissions, first chunks, lazily built buffers
        core.step()
    torch.cuda.set_sync_debug_mode("error")
    try:
        core.add_request(reqs[2])  # an admission and its prefill under the check too
        finished = set()
        while core.has_work():
            finished |= {c.request_id for c in core.step() if c.is_final}
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert finished == {r.request_id for r in reqs}
