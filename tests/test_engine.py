"""The engine against the reference loop (the oracle), on the tiny random checkpoint (CPU)."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from cadence.audio import to_int16
from cadence.engine.config import ChunkPolicy, EngineConfig, RunawayGuard
from cadence.engine.core import EngineCore
from cadence.engine.engine import Engine, SynthesisRequest, build_core, prepare_request
from cadence.engine.request import (
    AudioChunk,
    EngineRequest,
    FinishReason,
    QueueFullError,
    RequestTooLargeError,
    RunawayCause,
)
from cadence.errors import InvalidRequestError
from cadence.models.qwen3_tts import SamplingParams
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


def test_cancellation_frees_pages_and_slots(tiny_model):
    core = build_core(tiny_model, config())
    reqs = [request(tiny_model, i, 200) for i in range(3)]
    for r in reqs:
        core.add_request(r)
    for _ in range(4):
        core.step()
    assert core.talker.kv.used_pages > 0 and len(core.running) == 3
    core.cancel("r1")
    chunks = core.step()
    final = [c for c in chunks if c.request_id == "r1"]
    assert final and final[-1].is_final and final[-1].finish_reason == FinishReason.CANCELLED
    assert len(core.running) == 2
    core.cancel("r0")
    core.cancel("r2")
    core.step()
    assert core.talker.kv.used_pages == 0
    assert sorted(core.free_slots) == list(range(core.talker.max_slots))
    assert not core.has_work()


def test_kv_exhaustion_queues_then_completes_everything(tiny_model):
    # Enough pages for about two requests at a time: the rest must wait, then all finish.
    per_token = core_bytes = build_core(tiny_model, config()).talker.bytes_per_token
    del core_bytes
    cfg = config(kv_cache_memory=(2 * 80 + 16) * per_token / 2**30)
    core = build_core(tiny_model, cfg)
    reqs = [request(tiny_model, i, 40) for i in range(6)]
    for r in reqs:
        core.add_request(r)
    seen_waiting = []
    out: dict[str, list[AudioChunk]] = {}
    while core.has_work():
        for c in core.step():
            out.setdefault(c.request_id, []).append(c)
        seen_waiting.append(len(core.waiting))
        assert len(core.running) <= 2
    assert max(seen_waiting) >= 3
    for r in reqs:
        assert out[r.request_id][-1].finish_reason == FinishReason.LENGTH
        assert torch.equal(codes_of(out[r.request_id]), oracle(tiny_model, r).codes)
    assert core.talker.kv.used_pages == 0


def test_kv_cache_is_sized_after_the_codec_is_built(tiny_model, monkeypatch):
    # On a GPU kv_cache_fraction takes a share of the memory free at that point; the codec's graphs
    # and per-stream state must hold theirs by then, or the default sizes the KV cache into memory
    # the codec's capture then needs (an out-of-memory error at start-up).
    import cadence.engine.engine as engine_module

    order: list[str] = []
    codec_partition, kv_cache_bytes = engine_module.Qwen3TTSCodec, engine_module.kv_cache_bytes

    def codec(*args, **kwargs):
        order.append("codec")
        return codec_partition(*args, **kwargs)

    def kv(*args):
        order.append("kv")
        return kv_cache_bytes(*args)

    monkeypatch.setattr(engine_module, "Qwen3TTSCodec", codec)
    monkeypatch.setattr(engine_module, "kv_cache_bytes", kv)
    core = build_core(tiny_model, config())
    assert order == ["codec", "kv"]
    # What the server reports as the KV size (EngineInfo.kv_bytes) is what was allocated: the
    # budget's whole pages, the dummy slot's scratch page among them.
    kv, page = core.talker.kv, core.talker.kv.page_size * core.talker.bytes_per_token
    budget = kv_cache_bytes(config(), tiny_model.device)
    assert kv.nbytes == (kv.num_pages + 1) * page
    assert budget - page < kv.nbytes <= budget


@pytest.mark.parametrize("part", ["Qwen3TTSCodec", "Qwen3TTSTalker"])
def test_running_out_of_memory_at_build_names_the_part_and_the_settings(tiny_model, monkeypatch, part):
    import cadence.engine.engine as engine_module

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 24.00 MiB")

    monkeypatch.setattr(engine_module, part, out_of_memory)
    with pytest.raises(torch.OutOfMemoryError) as error:
        build_core(tiny_model, config())
    message = str(error.value)
    assert ("the codec" if part == "Qwen3TTSCodec" else "the talker") in message
    assert "max_streams" in message and "enforce_eager" in message and "Tried to allocate 24.00 MiB" in message
    if part == "Qwen3TTSTalker":
        assert "kv_cache_memory" in message


def test_queue_bound_and_oversized_request_are_refused(tiny_model):
    """A burst fills the free slots first; the queue bound counts only what waits beyond them."""
    core = build_core(tiny_model, config(max_streams=4, max_queue=2))
    for i in range(4 + 2):
        core.add_request(request(tiny_model, i, 10))
    with pytest.raises(QueueFullError):
        core.add_request(request(tiny_model, 6, 10))
    core.step()  # four admitted: two wait, and nothing more fits until a stream finishes
    assert len(core.running) == 4 and len(core.waiting) == 2
    with pytest.raises(QueueFullError):
        core.add_request(request(tiny_model, 7, 10))
    none_queued = build_core(tiny_model, config(max_streams=2, max_queue=0))
    none_queued.add_request(request(tiny_model, 0, 10))
    none_queued.add_request(request(tiny_model, 1, 10))
    with pytest.raises(QueueFullError):
        none_queued.add_request(request(tiny_model, 2, 10))
    huge = request(tiny_model, 3, 10**7)
    with pytest.raises(RequestTooLargeError, match="whole cache") as refused:
        build_core(tiny_model, config()).add_request(huge)
    assert not refused.value.prompt_too_long


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


def test_runaway_guard_stops_a_code0_loop(tiny_model):
    model = force_code0(tiny_model, 7)  # greedy code0 is 7 forever: a period-1 loop
    guard = RunawayGuard(frames_per_token=0, loop_window=20, loop_max_period=4, silence_seconds=0)
    core = build_core(model, config(runaway=guard))
    req = request(model, 0, 300)
    chunks = run(core, {0: [req]})[req.request_id]
    assert chunks[-1].finish_reason == FinishReason.RUNAWAY and chunks[-1].runaway_cause == RunawayCause.LOOP
    assert codes_of(chunks).shape[0] == 20
    assert (codes_of(chunks)[:, 0] == 7).all()


def test_runaway_guard_stops_silence(tiny_model):
    model = copy.copy(tiny_model)
    model.codec = copy.deepcopy(tiny_model.codec)
    with torch.no_grad():  # the codec's output conv writes zeros: digital silence
        model.codec.decoder.decoder[-1].conv.weight.zero_()
        model.codec.decoder.decoder[-1].conv.bias.zero_()
    guard = RunawayGuard(frames_per_token=0, loop_window=0, silence_seconds=1.0)
    core = build_core(model, config(runaway=guard))
    req = request(model, 0, 300)
    chunks = run(core, {0: [req]})[req.request_id]
    assert chunks[-1].finish_reason == FinishReason.RUNAWAY and chunks[-1].runaway_cause == RunawayCause.SILENCE
    assert 12 <= codes_of(chunks).shape[0] < 40  # 1 s = 12.5 frames, decided at chunk boundaries
    assert not np.any(np.concatenate([c.pcm for c in chunks]))


def test_runaway_frame_budget_from_text_length(tiny_model):
    guard = RunawayGuard(min_frames=5, frames_per_token=2.0, loop_window=0, silence_seconds=0)
    core = build_core(tiny_model, config(runaway=guard))
    req = request(tiny_model, 3, 500)  # "Short." is 2 tokens: budget 5 + 2*2 = 9 frames
    chunks = run(core, {0: [req]})[req.request_id]
    assert req.prompt.num_text_tokens == 2
    assert chunks[-1].finish_reason == FinishReason.RUNAWAY and codes_of(chunks).shape[0] == 9
    assert chunks[-1].runaway_cause == RunawayCause.FRAME_BUDGET
    exempt = request(tiny_model, 3, 15, ignore_eos=True)
    chunks = run(build_core(tiny_model, config(runaway=guard)), {0: [exempt]})[exempt.request_id]
    assert chunks[-1].finish_reason == FinishReason.LENGTH and codes_of(chunks).shape[0] == 15
    assert chunks[-1].runaway_cause is None


def test_a_failing_request_fails_alone(tiny_model, monkeypatch):
    core = build_core(tiny_model, config())
    real_prefill = core.talker.prefill

    def prefill(admissions):
        if any(a.request.request_id == "r1" for a in admissions):
            raise RuntimeError("injected fault")
        return real_prefill(admissions)

    monkeypatch.setattr(core.talker, "prefill", prefill)
    reqs = [request(tiny_model, i, 10) for i in range(3)]
    out = run(core, {0: reqs})
    assert out["r1"][-1].finish_reason == FinishReason.ERROR and "injected fault" in out["r1"][-1].error
    for r in (reqs[0], reqs[2]):
        assert out[r.request_id][-1].finish_reason == FinishReason.LENGTH
        assert torch.equal(codes_of(out[r.request_id]), oracle(tiny_model, r).codes)
    assert core.talker.kv.used_pages == 0 and len(core.free_slots) == core.talker.max_slots


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


def test_async_api_streams_cancels_and_collects(tiny_model):
    engine = Engine(tiny_model, config(max_streams=4))
    try:

        async def scenario():
            req = SynthesisRequest(TEXTS[0], greedy=True, max_new_tokens=20)
            whole = await engine.synthesize_all(req)
            assert whole.finish_reason == FinishReason.LENGTH and whole.pcm.size == 20 * 1920
            ref = oracle(tiny_model, prepare_request(tiny_model, req, 4096))
            assert torch.equal(torch.from_numpy(whole.codes), ref.codes)
            # closing the iterator early cancels the request and frees its pages
            stream = engine.synthesize(SynthesisRequest(TEXTS[1], greedy=True, max_new_tokens=500))
            first = await stream.__anext__()
            assert first.pcm.size > 0
            await stream.aclose()
            for _ in range(200):
                if engine.stats().running == 0 and engine.core.talker.kv.used_pages == 0:
                    break
                await asyncio.sleep(0.02)
            assert engine.core.talker.kv.used_pages == 0 and not engine.core.streams
            assert engine.stats().finished.get("cancelled") == 1

        asyncio.run(scenario())
    finally:
        engine.close()


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


def test_decode_walks_are_read_back_one_step_late(tiny_model):
    """No host wait inside a decode walk: the core reads walk k's frames only after launching walk
    k+1, and still stops on EOS with the EOS frame and the extra frame dropped."""
    eos = tiny_model.config.talker.codec_eos_token_id
    model = force_code0(tiny_model, eos)  # EOS as soon as the two-frame minimum allows
    core = build_core(model, config())
    events: list[tuple[str, int]] = []
    launch = core.talker.decode

    def recording_decode(slots):
        output = launch(slots)
        k = sum(1 for e in events if e[0] == "launch")
        events.append(("launch", k))
        output.wait = lambda: events.append(("wait", k))
        return output

    core.talker.decode = recording_decode
    reqs = [request(model, 0, 50), request(model, 1, 9, ignore_eos=True)]
    out = run(core, {0: reqs})
    launches = [k for what, k in events if what == "launch"]
    for k in launches[:-1]:
        assert events.index(("launch", k + 1)) < events.index(("wait", k))
    assert out["r0"][-1].finish_reason == FinishReason.STOP and codes_of(out["r0"]).shape[0] == 2
    assert out["r1"][-1].finish_reason == FinishReason.LENGTH and codes_of(out["r1"]).shape[0] == 9
    assert not (codes_of(out["r1"])[:, 0] == eos).any()
    assert core.talker.kv.used_pages == 0 and len(core.free_slots) == core.talker.max_slots


def test_a_device_error_surfacing_at_read_back_fails_that_walk_only(tiny_model):
    """An asynchronous device error shows up when a walk's outputs are read back, a step after its
    launch: the streams of that walk fail, the engine goes on, and requests arriving later finish."""
    core = build_core(tiny_model, config())
    core.talker.decode = failing_wait_on_call(core.talker.decode, 3, "injected device fault")
    first = [request(tiny_model, i, 10) for i in range(2)]
    later = request(tiny_model, 2, 6)
    out = run(core, {0: first, 6: [later]})
    for r in first:
        assert out[r.request_id][-1].finish_reason == FinishReason.ERROR
        assert "injected device fault" in out[r.request_id][-1].error
    assert out["r2"][-1].finish_reason == FinishReason.LENGTH
    assert torch.equal(codes_of(out["r2"]), oracle(tiny_model, later).codes)
    assert core.talker.kv.used_pages == 0 and len(core.free_slots) == core.talker.max_slots


def test_codec_audio_is_collected_after_the_next_walk_is_launched(tiny_model):
    """The host waits for a codec walk's audio only once the next decode walk is queued behind it,
    so the device is not idle while the host makes chunks; the one exception is a stream's first
    chunk (its time to first audio), waited for in its own step. The audio is what an offline decode
    of the stream's frames gives, and every stream still ends."""
    core = build_core(tiny_model, config())
    events: list[tuple[str, int]] = []
    launch, to_host = core.talker.decode, core.codec.to_host

    def recording_decode(slots):
        events.append(("walk", sum(1 for e in events if e[0] == "walk")))
        return launch(slots)

    def recording_to_host(audio, codes=None):
        host = to_host(audio, codes)
        walks = sum(1 for e in events if e[0] == "walk")  # walks launched before this codec walk
        events.append(("codec", walks))
        wait = host.wait
        host.wait = lambda: (events.append(("collect", walks)), wait())[1]
        return host

    core.talker.decode, core.codec.to_host = recording_decode, recording_to_host
    reqs = [request(tiny_model, 0, 12), request(tiny_model, 1, 7, ignore_eos=True)]
    out = run(core, {0: reqs[:1], 2: reqs[1:]})
    collects = [(i, walks) for i, (what, walks) in enumerate(events) if what == "collect"]
    assert collects
    last_walk = max(k for what, k in events if what == "walk")
    # a walk followed this codec walk: was it launched before the wait? (not for first chunks)
    early = [i for i, walks in collects if walks <= last_walk and events.index(("walk", walks)) > i]
    assert len(early) == len(reqs)  # the two streams' first chunks, each in the step that admitted it
    for r in reqs:
        chunks = out[r.request_id]
        assert chunks[-1].is_final and chunks[-1].finish_reason is not None
        offline = to_int16(tiny_model.codec.decode(codes_of(chunks)))
        pcm = np.concatenate([c.pcm for c in chunks])
        assert np.abs(pcm.astype(np.int32) - offline.astype(np.int32)).max() <= 1  # float rounding only
    assert not core.has_work() and len(core.free_slots) == core.talker.max_slots


def test_a_device_error_surfacing_at_codec_collection_fails_that_chunk_only(tiny_model):
    core = build_core(tiny_model, config())
    core.codec.to_host = failing_wait_on_call(core.codec.to_host, 3, "injected codec fault")
    first = request(tiny_model, 0, 30, ignore_eos=True)
    later = request(tiny_model, 1, 6)
    out = run(core, {0: [first], 8: [later]})
    assert out["r0"][-1].finish_reason == FinishReason.ERROR and "injected codec fault" in out["r0"][-1].error
    assert out["r1"][-1].finish_reason == FinishReason.LENGTH
    assert torch.equal(codes_of(out["r1"]), oracle(tiny_model, later).codes)
    assert core.talker.kv.used_pages == 0 and len(core.free_slots) == core.talker.max_slots


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
