"""How the engine core schedules codec work: the real EngineCore and chunk policy over partitions that
do no work (a talker that emits random frames and never EOS, a codec that records each call's shape),
so the grouping of chunks into codec calls is checked without a model."""

from __future__ import annotations

from dataclasses import replace

import torch

from cadence.engine.config import ChunkPolicy, EngineConfig
from cadence.engine.core import EngineCore
from cadence.engine.kv_cache import PagedKVCache
from cadence.engine.partition import Admission, DecodeOutput, HostAudio
from cadence.engine.request import EngineRequest
from cadence.models.qwen3_tts.prompt import Prompt
from cadence.models.qwen3_tts.sampling import SamplingParams

GROUPS, SAMPLES_PER_FRAME = 16, 1920


class NullTalker:
    """Frames without a model: random codes, never EOS."""

    def __init__(self, max_slots: int):
        self.max_slots = max_slots
        self.eos_free_frames = 2
        # a real page allocator over a one-element cache: only the bookkeeping is exercised
        self.kv = PagedKVCache(1, max_slots * 16 + 1, 16, 1, 1, torch.float32, torch.device("cpu"))
        self._frames = torch.randint(0, 2048, (max_slots, GROUPS))

    def tokens_to_reserve(self, request: EngineRequest, max_frames: int) -> int:
        return len(request.prompt) + max_frames

    def fits(self, tokens: int) -> bool:
        return True

    def prefill(self, admissions: list[Admission]) -> None:
        pass

    def decode(self, slots: list[int]) -> DecodeOutput:
        frames = self._frames[: len(slots)].clone()
        return DecodeOutput(frames, torch.zeros(len(slots), dtype=torch.bool), device_frames=frames)

    def advance(self) -> None:
        pass

    def busy(self) -> bool:
        return False

    def release(self, slot: int) -> None:
        pass


class RecordingCodec:
    """Audio without a model (a quiet tone of the right length); each call's (streams, frames) kept."""

    samples_per_frame = SAMPLES_PER_FRAME
    sample_rate = 24000
    device = torch.device("cpu")

    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def reset(self, slots: list[int], requests: list[EngineRequest] | None = None) -> None:
        pass

    def decode(self, slots: list[int], frames: torch.Tensor, finishing: bool = False) -> torch.Tensor:
        self.calls.append((frames.shape[0], frames.shape[1]))
        t = torch.arange(frames.shape[1] * SAMPLES_PER_FRAME, dtype=torch.float32)
        return (0.1 * torch.sin(t * 0.05)).expand(frames.shape[0], -1)

    def to_host(self, audio: torch.Tensor, codes: torch.Tensor | None = None) -> HostAudio:
        return HostAudio(audio, codes=codes)


def request(i: int, frames: int, prompt_tokens: int) -> EngineRequest:
    rows = tuple(range(prompt_tokens))
    prompt = Prompt(text_track=rows, codec_track=(None,) * prompt_tokens, trailing_text=(1, 2, 3), num_text_tokens=30)
    return EngineRequest(f"r{i}", prompt, SamplingParams(max_new_tokens=frames), ignore_eos=True)


def run(streams: int, prompt_tokens: int, frames: int) -> tuple[RecordingCodec, int, int]:
    """Every stream added at once, the core stepped until done, without a chunk deadline (growth
    alone). Returns the codec, the audio samples delivered and the steps that called the codec."""
    codec = RecordingCodec()
    config = replace(EngineConfig(max_streams=streams, max_queue=4 * streams), chunk_policy=ChunkPolicy(deadline=0.0))
    core = EngineCore(NullTalker(streams), codec, config)
    for i in range(streams):
        core.add_request(request(i, frames, prompt_tokens))
    samples = codec_steps = 0
    while core.has_work():
        calls = len(codec.calls)
        samples += sum(c.pcm.size for c in core.step())
        codec_steps += len(codec.calls) > calls
    return codec, samples, codec_steps


def test_every_frame_is_decoded_once_in_growing_chunks():
    codec, samples, codec_steps = run(8, 40, 10)
    assert samples == 8 * 10 * SAMPLES_PER_FRAME
    # growth alone (1, 2, 4, then 8 frames) for streams admitted together: one call per chunk size,
    # the last 3 frames flushed when the streams finish
    assert codec.calls == [(8, 1), (8, 2), (8, 4), (8, 3)]
    assert codec_steps == 4


def test_streams_admitted_together_share_one_codec_call():
    # 80 ten-token prompts fit one step's prefill budget: their 80 one-frame chunks fall due together
    codec, _, codec_steps = run(80, 10, 1)
    assert codec.calls == [(80, 1)] and codec_steps == 1
    # 40-token prompts: 51 admitted in the first step (the 2048-token prefill budget), 29 in the next
    codec, _, codec_steps = run(80, 40, 1)
    assert codec.calls == [(51, 1), (29, 1)] and codec_steps == 2


def test_a_streams_first_audio_leaves_in_the_step_that_admits_it():
    """The first chunk is the time to first audio: it is collected in the step that admitted the
    stream and decoded its first frame, not a step later as later chunks are."""
    codec = RecordingCodec()
    config = replace(EngineConfig(max_streams=4, max_queue=4), chunk_policy=ChunkPolicy(deadline=0.0))
    core = EngineCore(NullTalker(4), codec, config)
    core.add_request(request(0, 12, 10))
    assert [(c.request_id, c.frame_start, c.frame_end) for c in core.step()] == [("r0", 0, 1)]
    core.step()
    core.add_request(request(1, 12, 10))  # joins a running stream
    chunks = core.step()
    assert ("r1", 0, 1) in [(c.request_id, c.frame_start, c.frame_end) for c in chunks]


def test_first_chunks_are_launched_before_the_other_streams_chunks():
    """A new stream's first chunk is queued on the device ahead of the running streams' larger chunks
    of the same step, so that its time to first audio does not include their decode."""
    both = 0
    for joins_at in range(2, 6):  # the running streams' 2-frame chunks fall due every other step
        codec = RecordingCodec()
        policy = ChunkPolicy(first_chunk_frames=1, growth=2.0, max_chunk_frames=2, deadline=0.0)
        core = EngineCore(NullTalker(8), codec, replace(EngineConfig(max_streams=8, max_queue=8), chunk_policy=policy))
        for i in range(4):
            core.add_request(request(i, 40, 10))
        for _ in range(joins_at):
            core.step()
        core.add_request(request(9, 40, 10))
        calls = len(codec.calls)
        assert any(c.request_id == "r9" and c.frame_start == 0 for c in core.step())
        step_calls = codec.calls[calls:]
        assert step_calls[0] == (1, 1)  # the first chunk first
        both += len(step_calls) > 1
    assert both  # in some of these steps the running streams' chunks were launched after it
