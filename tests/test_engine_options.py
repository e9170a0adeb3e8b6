"""What a user tunes per engine or per request: the runaway guard (on, off, its cause), greedy
decoding by temperature 0 and the code predictor's own sampling, on the tiny random model (CPU)."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch
from engine_cases import codes_of, config, force_code0, request, run

from cadence.engine.config import ChunkPolicy, RunawayGuard
from cadence.engine.engine import Engine, build_core
from cadence.engine.request import FinishReason, RunawayCause
from cadence.errors import InvalidRequestError
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request

GUARD = RunawayGuard(min_frames=5, frames_per_token=3.0, loop_window=20, loop_max_period=4, silence_seconds=1.0)


def test_each_check_of_the_guard_names_its_cause(tiny_model):
    looping = force_code0(tiny_model, 7)  # code0 7 forever: a period-1 loop
    long_text = request(looping, 4, 60)  # many tokens: the frame budget is far away, the loop comes first
    chunks = run(build_core(looping, config(runaway=GUARD)), {0: [long_text]})[long_text.request_id]
    assert (chunks[-1].finish_reason, chunks[-1].runaway_cause) == (FinishReason.RUNAWAY, RunawayCause.LOOP)
    short = request(tiny_model, 3, 60)  # "Short.": 2 tokens, a budget of 5 + 2 * 3 frames
    chunks = run(build_core(tiny_model, config(runaway=GUARD)), {0: [short]})[short.request_id]
    assert (chunks[-1].finish_reason, chunks[-1].runaway_cause) == (FinishReason.RUNAWAY, RunawayCause.FRAME_BUDGET)
    assert codes_of(chunks).shape[0] == 11


def silent(model):
    """A copy whose codec writes digital silence."""
    out = copy.copy(model)
    out.codec = copy.deepcopy(model.codec)
    with torch.no_grad():
        out.codec.decoder.decoder[-1].conv.weight.zero_()
        out.codec.decoder.decoder[-1].conv.bias.zero_()
    return out


@pytest.mark.parametrize("case", ["loop", "frame_budget", "silence"])
def test_the_guard_switched_off_lets_generation_run_to_max_new_tokens(tiny_model, case):
    """With enabled=False no check fires: the request ends at max_new_tokens (or EOS), as the
    official package's generate does, where the same guard settings stop it."""
    model = {"loop": force_code0(tiny_model, 7), "frame_budget": tiny_model, "silence": silent(tiny_model)}[case]
    req = request(model, 3 if case == "frame_budget" else 4, 40)
    policy = ChunkPolicy(8, 1.0, 8)  # whole seconds of silence reach the check within 40 frames
    on = run(build_core(model, config(runaway=GUARD, chunk_policy=policy)), {0: [req]})[req.request_id]
    assert on[-1].finish_reason == FinishReason.RUNAWAY and on[-1].runaway_cause == case
    assert codes_of(on).shape[0] < 40
    off = replace(GUARD, enabled=False)
    chunks = run(build_core(model, config(runaway=off, chunk_policy=policy)), {0: [req]})[req.request_id]
    assert chunks[-1].finish_reason == FinishReason.LENGTH and chunks[-1].runaway_cause is None
    assert codes_of(chunks).shape[0] == 40


def test_a_negative_guard_setting_is_refused():
    with pytest.raises(ValueError, match="loop_window must be >= 0"):
        RunawayGuard(loop_window=-1)


def params(model, **fields):
    return prepare_request(model, SynthesisRequest("Hello.", voice="ryan", **fields), 4096).params


def test_temperature_zero_is_greedy_for_every_codebook(tiny_model):
    p = params(tiny_model, temperature=0)
    assert (p.do_sample, p.subtalker_dosample) == (False, False)
    assert params(tiny_model, greedy=True).subtalker_dosample is False
    # the code predictor's own settings win over temperature 0
    p = params(tiny_model, temperature=0, subtalker_dosample=True)
    assert (p.do_sample, p.subtalker_dosample) == (False, True)
    p = params(tiny_model, temperature=0, subtalker_temperature=0.7, subtalker_top_k=5, subtalker_top_p=0.9)
    assert (p.do_sample, p.subtalker_dosample, p.subtalker_temperature) == (False, True, 0.7)
    assert (p.subtalker_top_k, p.subtalker_top_p) == (5, 0.9)
    # greedy code predictor, sampled first codebook
    p = params(tiny_model, subtalker_temperature=0)
    assert (p.do_sample, p.subtalker_dosample) == (True, False)
    p = params(tiny_model, subtalker_dosample=False, temperature=0.5)
    assert (p.do_sample, p.subtalker_dosample, p.temperature) == (True, False, 0.5)
    assert params(tiny_model).subtalker_dosample is True  # the checkpoint's default


@pytest.mark.parametrize(
    "fields, param",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(subtalker_temperature=-1.0), "subtalker_temperature"),
        (dict(subtalker_top_p=0.0), "subtalker_top_p"),
        (dict(subtalker_top_k=-3), "subtalker_top_k"),
        (dict(subtalker_dosample=True, subtalker_temperature=0), "subtalker_temperature"),
    ],
)
def test_bad_sampling_names_the_field(tiny_model, fields, param):
    with pytest.raises(InvalidRequestError) as e:
        params(tiny_model, **fields)
    assert e.value.param == param and param in str(e.value)


def test_temperature_zero_synthesises_what_greedy_does(tiny_model):
    """Greedy output does not depend on the seed: temperature 0 with any seed is --greedy's audio."""
    engine = Engine(tiny_model, config(max_streams=2))
    try:
        runs = [
            engine.synthesize_blocking(SynthesisRequest("Hello world.", voice="ryan", max_new_tokens=12, **f), 300)
            for f in (dict(greedy=True, seed=1), dict(temperature=0, seed=2), dict(temperature=0.9, seed=3))
        ]
    finally:
        engine.close()
    greedy, zero, sampled = runs
    assert np.array_equal(greedy.codes, zero.codes) and np.array_equal(greedy.pcm, zero.pcm)
    assert not np.array_equal(greedy.codes, sampled.codes)
