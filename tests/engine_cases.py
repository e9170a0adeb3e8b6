"""What the engine tests share: the tiny checkpoint's requests, a core stepped to the end, the
reference loop's codes for a request (the oracle), and faults and forced choices to inject."""

from __future__ import annotations

import copy

import numpy as np
import torch

from cadence.engine.config import EngineConfig, RunawayGuard
from cadence.engine.core import EngineCore
from cadence.engine.request import AudioChunk, EngineRequest
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request
from cadence.models.qwen3_tts.reference import generate

TEXTS = [
    "Hello world, this is a test.",
    "你好，世界！",
    "Bonjour à tous, comment allez-vous aujourd'hui?",
    "Short.",
    "A somewhat longer sentence, with commas, and more words to say.",
    "こんにちは",
    "Guten Tag.",
    "안녕하세요, 반갑습니다.",
]


VOICES = ["ryan", "eric", "vivian", "aiden", "serena", "ono_anna", "uncle_fu", "sohee"]


NO_GUARD = RunawayGuard(frames_per_token=0, loop_window=0, silence_seconds=0)


def config(**overrides) -> EngineConfig:
    base = dict(max_streams=8, kv_cache_memory=0.02, return_codes=True, runaway=NO_GUARD)
    base.update(overrides)
    return EngineConfig(**base)


def request(model, i: int, frames: int, **kw) -> EngineRequest:
    fields = dict(voice=VOICES[i % 8], greedy=True, max_new_tokens=frames, request_id=f"r{i}")
    fields.update(kw)
    return prepare_request(model, SynthesisRequest(TEXTS[i % 8], **fields), 4096)


def run(core: EngineCore, arrivals: dict[int, list[EngineRequest]], max_steps: int = 2000):
    """Step the core, adding requests at the given step numbers; chunks per request id."""
    chunks: dict[str, list[AudioChunk]] = {}
    for step in range(max_steps):
        for r in arrivals.get(step, []):
            core.add_request(r)
        if not core.has_work() and step > max(arrivals, default=0):
            return chunks
        for c in core.step():
            chunks.setdefault(c.request_id, []).append(c)
    raise AssertionError("engine did not finish")


def codes_of(chunks: list[AudioChunk]) -> torch.Tensor:
    got = [c.codes for c in chunks if c.codes is not None]
    return torch.from_numpy(np.concatenate(got)) if got else torch.zeros(0, 16, dtype=torch.long)


def oracle(model, req: EngineRequest):
    return generate(model, [req.prompt], req.params).generations[0]


def failing_wait_on_call(fn, n: int, message: str):
    """`fn`, except that its n-th result raises RuntimeError(message) from wait(): a device fault
    that surfaces only when the engine reads that result."""
    calls = 0

    def wrapped(*args):
        nonlocal calls
        result = fn(*args)
        calls += 1
        if calls == n:

            def broken():
                raise RuntimeError(message)

            result.wait = broken
        return result

    return wrapped


def force_code0(model, token: int):
    """A copy whose talker always prefers `token` as code0: the residual stream gets a constant
    positive coordinate 0 (embeddings write it, no layer overwrites it), and only `token`'s head row
    reads it."""
    m = copy.copy(model)
    m.talker = copy.deepcopy(model.talker)
    t = m.talker
    with torch.no_grad():
        t.model.codec_embedding.weight[:, 0] = 5.0
        for table in t.code_predictor.model.codec_embedding:
            table.weight[:, 0] = 5.0
        t.text_projection.linear_fc2.weight[0] = 0.0
        t.text_projection.linear_fc2.bias[0] = 5.0
        for layer in t.model.layers:
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
        t.model.norm.weight[0] = 1.0
        t.codec_head.weight[:, 0] = 0.0
        t.codec_head.weight[token, 0] = 1000.0
    return m
