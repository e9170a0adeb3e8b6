"""The engine against the reference loop (the oracle), on the tiny random checkpoint (CPU): its codes,
its audio against the offline decode, sampling, stops, and what it refuses before the device."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from engine_cases import TEXTS, codes_of, config, force_code0, oracle, request, run

from cadence.audio import to_int16
from cadence.engine.config import ChunkPolicy
from cadence.engine.engine import Engine, build_core
from cadence.engine.request import FinishReason
from cadence.errors import InvalidRequestError
from cadence.models.qwen3_tts import SamplingParams
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request


def test_single_greedy_request_equals_oracle(tiny_model):
    core = build_core(tiny_model, config())
    req = request(tiny_model, 0, 40)
    chunks = run(core, {0: [req]})[req.request_id]
    ref = oracle(tiny_model, req)
    assert torch.equal(codes_of(chunks), ref.codes)
    assert chunks[-1].is_final and chunks[-1].finish_reason == FinishReason.LENGTH
    assert sum(c.num_frames for c in chunks) == 40
    assert [c.frame_start for c in chunks] == sorted(c.frame_start for c in chunks)


def test_eight_requests_joining_at_different_steps_equal_oracle(tiny_model):
    core = build_core(tiny_model, config(chunk_policy=ChunkPolicy(2, 1.5, 6)))
    reqs = [request(tiny_model, i, 12 + 5 * i) for i in range(8)]
    arrivals = {0: reqs[:2], 3: reqs[2:3], 4: reqs[3:5], 9: reqs[5:6], 20: reqs[6:]}
    out = run(core, arrivals)
    for req in reqs:
        ref = oracle(tiny_model, req)
        assert torch.equal(codes_of(out[req.request_id]), ref.codes), req.request_id
        assert out[req.request_id][-1].finish_reason == FinishReason.LENGTH


@pytest.mark.parametrize("policy", [ChunkPolicy(1, 2.0, 8), ChunkPolicy(2, 1.0, 2), ChunkPolicy(3, 1.5, 7)])
def test_streamed_audio_equals_offline_decode(tiny_model, policy):
    core = build_core(tiny_model, config(chunk_policy=policy))
    reqs = [request(tiny_model, i, 9 + 7 * i) for i in range(3)]
    out = run(core, {0: reqs[:2], 2: reqs[2:]})
    for req in reqs:
        chunks = out[req.request_id]
        pcm = np.concatenate([c.pcm for c in chunks])
        offline = to_int16(tiny_model.codec.decode(codes_of(chunks)))
        assert pcm.shape == offline.shape == (1920 * req.params.max_new_tokens,)
        assert np.abs(pcm.astype(np.int32) - offline.astype(np.int32)).max() <= 1  # float rounding only
        sizes = [c.num_frames for c in chunks]
        assert sizes[0] == min(policy.first_chunk_frames, req.params.max_new_tokens)
    # the engine's codec counters: every frame decoded once, chunks of one step and size in one call
    assert core.stats.codec_frames == sum(r.params.max_new_tokens for r in reqs)
    counts = [sum(c.num_frames > 0 for c in out[r.request_id]) for r in reqs]
    assert max(counts) <= core.stats.codec_calls <= sum(counts)


def test_seeded_sampling_is_batch_invariant(tiny_model):
    def sampled(i, seed):
        return request(tiny_model, i, 24, greedy=False, seed=seed, request_id=f"s{i}-{seed}")

    alone = run(build_core(tiny_model, config()), {0: [sampled(0, 123)]})
    crowd_core = build_core(tiny_model, config())
    others = [sampled(i, 1000 + i) for i in range(1, 8)]  # seven others, joining before and after it
    crowd = run(crowd_core, {0: others[:5], 2: [sampled(0, 123)], 3: others[5:]})
    mine = codes_of(alone["s0-123"])
    assert torch.equal(mine, codes_of(crowd["s0-123"]))
    # and sampling really happened: another seed gives other codes, greedy gives other codes
    other = run(build_core(tiny_model, config()), {0: [sampled(0, 124)]})
    assert not torch.equal(mine, codes_of(other["s0-124"]))
    assert not torch.equal(mine, oracle(tiny_model, request(tiny_model, 0, 24)).codes)


def test_eos_stops_after_the_two_frame_minimum_and_matches_oracle(tiny_model):
    eos = tiny_model.config.talker.codec_eos_token_id
    model = force_code0(tiny_model, eos)
    core = build_core(model, config())
    req = request(model, 0, 50)
    chunks = run(core, {0: [req]})[req.request_id]
    ref = oracle(model, req)
    assert ref.finish_reason == "stop" and ref.codes.shape[0] == 2
    assert chunks[-1].finish_reason == FinishReason.STOP
    assert torch.equal(codes_of(chunks), ref.codes)
    # ignore_eos bans EOS for good: exactly max_new_tokens frames
    bench = request(model, 1, 12, ignore_eos=True)
    chunks = run(build_core(model, config()), {0: [bench]})[bench.request_id]
    assert chunks[-1].finish_reason == FinishReason.LENGTH and codes_of(chunks).shape[0] == 12


def test_invalid_parameters_are_rejected_before_the_device(tiny_model):
    bad = [
        dict(voice="nobody"),
        dict(language="klingon"),
        dict(temperature=-0.5),
        dict(subtalker_temperature=11.0),
        dict(subtalker_dosample=True, subtalker_temperature=0.0),
        dict(top_p=1.5),
        dict(top_k=-1),
        dict(max_new_tokens=0),
        dict(layout="sideways"),
    ]
    for fields in bad:
        with pytest.raises(InvalidRequestError) as e:
            prepare_request(tiny_model, SynthesisRequest("Hello", **fields), 4096)
        assert e.value.param
    with pytest.raises(InvalidRequestError, match="limit"):
        prepare_request(tiny_model, SynthesisRequest("word " * 50), 10)


def test_blocking_helper_and_replace_seed(tiny_model):
    engine = Engine(tiny_model, config(max_streams=2))
    try:
        req = prepare_request(tiny_model, SynthesisRequest(TEXTS[2], max_new_tokens=8, seed=5), 4096)
        a = engine.synthesize_blocking(req, timeout=120)
        b = engine.synthesize_blocking(replace(req, request_id="again"), timeout=120)
        assert np.array_equal(a.pcm, b.pcm) and a.frames == 8
    finally:
        engine.close()


def test_sampling_params_defaults_come_from_the_checkpoint(tiny_model):
    req = prepare_request(tiny_model, SynthesisRequest("Hi"), 4096)
    gen = tiny_model.config.generation
    assert req.params == replace(SamplingParams.from_defaults(gen), seed=req.params.seed)


def test_noise_of_exactly_one_never_samples_a_masked_code0(tiny_model):
    """Seed 7164's uniform noise at frame 0, codebook 0, column 2222 (a control token) was exactly
    1.0 ((2^24-1) + 0.5 rounds to 2^24 in fp32): Gumbel +inf, the banned column's -inf + inf a NaN
    that won the argmax, and code 2222 reached the codec (IndexError in its codebook embedding)."""
    from cadence.kernels.sampling.rng import gumbel

    seed, frame = torch.tensor([7164]), torch.tensor([0])
    assert torch.isfinite(gumbel(seed, frame, 0, 3072)).all()
    req = request(tiny_model, 0, 8, greedy=False, seed=7164, ignore_eos=True)
    for backend in ("sdpa", "torch"):
        chunks = run(build_core(tiny_model, config(attention_backend=backend)), {0: [req]})["r0"]
        assert chunks[-1].finish_reason == FinishReason.LENGTH, chunks[-1].error
        codes = codes_of(chunks)
        assert codes.shape == (8, 16) and int(codes.max()) < 2048
