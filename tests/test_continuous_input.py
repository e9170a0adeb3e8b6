"""Text that arrives while its speech is generated (the continuous WebSocket input) gives exactly the
one-shot streaming-layout request over the whole text: the same codes, and audio within 1 LSB,
however the text is split and however long each piece takes to come. The engine core is stepped
here by hand: a piece arrives after a random number of steps, and a stream that has spoken all of
its text waits (no decode walk) until more comes."""

from __future__ import annotations

import random

import numpy as np
import pytest
from engine_cases import NO_GUARD, codes_of, config

from cadence.engine.core import EngineCore
from cadence.engine.engine import build_core
from cadence.engine.request import AudioChunk, FinishReason
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request
from cadence.models.qwen3_tts.prompt import IncrementalText, MoreTextNeeded

TEXTS = [
    "Hello there, this is cadence speaking while the words are still being written.",
    "Bonjour ! 今天天气很好，我们出去走走吧。 It's 3.14 o'clock, isn't it?",
]
FRAMES = 28


def sampling(kind: str) -> dict:
    return {"greedy": True} if kind == "greedy" else {"seed": 1234, "temperature": 0.9, "top_k": 50}


def synthesis(text, kind: str, **kw) -> SynthesisRequest:
    return SynthesisRequest(text, "ryan", "english", layout="streaming", max_new_tokens=FRAMES, **sampling(kind), **kw)


def collect(core: EngineCore, chunks: list[AudioChunk]) -> None:
    chunks += core.step()


def one_shot(model, text: str, kind: str) -> list[AudioChunk]:
    core = build_core(model, config(runaway=NO_GUARD))
    core.add_request(prepare_request(model, synthesis(text, kind, request_id="whole"), 4096))
    chunks: list[AudioChunk] = []
    while core.has_work():
        collect(core, chunks)
    return chunks


def continuous(model, deltas: list[str], kind: str, rng: random.Random) -> tuple[list[AudioChunk], int]:
    """The text piece by piece, each after 0-3 engine steps; returns the chunks and how many steps
    the engine had nothing to do (its stream waiting for text)."""
    core = build_core(model, config(runaway=NO_GUARD))
    text = IncrementalText(model.tokenizer)
    chunks: list[AudioChunk] = []
    submitted, idle, pending = False, 0, list(deltas)
    while pending or not submitted or core.has_work():
        if pending and (rng.random() < 0.4 or not core.has_work()):
            delta = pending.pop(0)
            new = text.push(delta) if pending else text.push(delta) + text.finish()
            done = not pending
            if not submitted and text.role is not None:
                try:
                    request = synthesis(text.tokens, kind, request_id="growing", text_open=not done)
                    core.add_request(prepare_request(model, request, 4096))
                    submitted = True
                except MoreTextNeeded:
                    pass
            elif submitted:
                core.append_text("growing", new + (model.end_of_text() if done else []), done, len(text.ids))
        if core.has_work():
            collect(core, chunks)
        elif pending:
            idle += 1
    return chunks, idle


def split(text: str, how: str, rng: random.Random) -> list[str]:
    if how == "whole":
        return [text]
    if how == "chars":
        return list(text)
    if how == "words":
        return [w + " " for w in text.split(" ")[:-1]] + [text.split(" ")[-1]]
    cuts = sorted(rng.sample(range(1, len(text)), 8))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("kind", ["greedy", "seeded"])
@pytest.mark.parametrize("how", ["whole", "words", "chars", "random"])
@pytest.mark.parametrize("which", range(len(TEXTS)))
def test_continuous_text_equals_the_one_shot_request(tiny_model, kind, how, which):
    text = TEXTS[which]
    rng = random.Random(f"{kind}-{how}-{which}")
    want = one_shot(tiny_model, text, kind)
    got, idle = continuous(tiny_model, split(text, how, rng), kind, rng)
    assert got[-1].is_final and got[-1].finish_reason == want[-1].finish_reason
    assert np.array_equal(codes_of(got).numpy(), codes_of(want).numpy())
    pcm, ref = (np.concatenate([c.pcm for c in cs]).astype(np.int32) for cs in (got, want))
    assert pcm.shape == ref.shape and np.abs(pcm - ref).max() <= 1
    if how == "chars":
        assert idle > 0  # the stream did wait for its text


def test_a_waiting_stream_takes_no_walk_and_its_audio_so_far_is_sent(tiny_model):
    core = build_core(tiny_model, config(runaway=NO_GUARD))
    text = IncrementalText(tiny_model.tokenizer)
    text.push("Hello there, how are")
    core.add_request(
        prepare_request(tiny_model, synthesis(text.tokens, "greedy", request_id="w", text_open=True), 4096)
    )
    chunks: list[AudioChunk] = []
    while core.has_work():
        collect(core, chunks)
    stream = core.streams["w"]
    assert stream.waits_for_text() and stream.walks == stream.text_len
    assert sum(c.num_frames for c in chunks) == stream.walks  # every frame it has is audio already
    steps = core.stats.steps
    assert not core.has_work() and core.stats.steps == steps  # nothing to step while it waits
    core.append_text("w", text.push(" you today?") + text.finish() + tiny_model.end_of_text(), True, len(text.ids))
    while core.has_work():
        collect(core, chunks)
    assert chunks[-1].is_final and chunks[-1].finish_reason == FinishReason.LENGTH
    assert sum(c.num_frames for c in chunks) == FRAMES
