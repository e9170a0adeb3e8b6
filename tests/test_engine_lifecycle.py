"""The engine core's life cycle on the tiny random checkpoint (CPU): cancellation, the KV cache (its
size, exhaustion), build errors, the queue bound, the runaway guard, failures that stay with their
request, the async API, and when the host waits for the device."""

from __future__ import annotations

import asyncio
import copy

import numpy as np
import pytest
import torch
from engine_cases import TEXTS, codes_of, config, failing_wait_on_call, force_code0, oracle, request, run

from cadence.audio import to_int16
from cadence.engine.config import AUTO_MAX_STREAMS, AUTO_TOKENS_PER_STREAM, RunawayGuard
from cadence.engine.engine import Engine, build_core
from cadence.engine.request import AudioChunk, FinishReason, QueueFullError, RequestTooLargeError, RunawayCause
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request


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
    import cadence.models.qwen3_tts.runtime as runtime_module

    order: list[str] = []
    codec_partition, kv_cache_bytes = runtime_module.Qwen3TTSCodec, engine_module.kv_cache_bytes

    def codec(*args, **kwargs):
        order.append("codec")
        return codec_partition(*args, **kwargs)

    def kv(*args):
        order.append("kv")
        return kv_cache_bytes(*args)

    monkeypatch.setattr(runtime_module, "Qwen3TTSCodec", codec)
    monkeypatch.setattr(engine_module, "kv_cache_bytes", kv)
    core = build_core(tiny_model, config())
    assert order == ["codec", "kv"]
    # What the server reports as the KV size (EngineInfo.kv_bytes) is what was allocated: the
    # budget's whole pages, the dummy slot's scratch page among them.
    kv, page = core.talker.kv, core.talker.kv.page_size * core.talker.bytes_per_token
    budget = kv_cache_bytes(config(), tiny_model.device)
    assert kv.nbytes == (kv.num_pages + 1) * page
    assert budget - page < kv.nbytes <= budget


@pytest.mark.parametrize(("kv_gb", "streams"), [(0.0001, 1), (0.02, None), (1.0, AUTO_MAX_STREAMS)])
def test_max_streams_left_to_the_engine_is_what_the_kv_cache_holds(tiny_model, kv_gb, streams):
    """max_streams None: as many streams as the KV cache holds at AUTO_TOKENS_PER_STREAM tokens each,
    at least one and at most AUTO_MAX_STREAMS; the engine's config (and so EngineInfo) says how many."""
    per_stream = tiny_model.kv_bytes_per_token * AUTO_TOKENS_PER_STREAM
    expected = streams or int(0.02 * (1 << 30)) // per_stream
    assert 1 < int(0.02 * (1 << 30)) // per_stream < AUTO_MAX_STREAMS  # the middle case is neither bound
    core = build_core(tiny_model, config(max_streams=None, kv_cache_memory=kv_gb))
    assert core.config.max_streams == expected
    assert len(core.free_slots) == expected
    engine = Engine(tiny_model, config(max_streams=None, kv_cache_memory=kv_gb))
    try:
        assert engine.config.max_streams == expected
    finally:
        engine.close()


@pytest.mark.parametrize("part", ["Qwen3TTSCodec", "Qwen3TTSTalker"])
def test_running_out_of_memory_at_build_names_the_part_and_the_settings(tiny_model, monkeypatch, part):
    import cadence.models.qwen3_tts.runtime as runtime_module

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 24.00 MiB")

    monkeypatch.setattr(runtime_module, part, out_of_memory)
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
