"""The engine core's own host time per step, with partitions that do no work.

The talker and codec are replaced by stand-ins that return ready-made tensors at once, so what is
timed is the scheduler and conductor alone: admission, per-stream bookkeeping, stop checks, the
loop detector, chunk grouping, int16 conversion and chunk objects. On the GPU this time adds to
every step unless it overlaps device work; compare it with the partition timings of
engine_steps.py (docs/benchmarks.md).

    python benchmarks/engine_host.py --streams 1 64 256 --steps 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.engine.config import EngineConfig  # noqa: E402
from cadence.engine.core import EngineCore  # noqa: E402
from cadence.engine.kv_cache import PagedKVCache  # noqa: E402
from cadence.engine.partition import Admission, DecodeOutput, HostAudio  # noqa: E402
from cadence.engine.request import EngineRequest  # noqa: E402
from cadence.models.qwen3_tts.prompt import Prompt  # noqa: E402
from cadence.models.qwen3_tts.sampling import SamplingParams  # noqa: E402

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
        n = len(slots)
        frames = self._frames[:n].clone()
        # device_frames as the CUDA fast path hands them over: the core keeps them in its frame ring
        return DecodeOutput(frames, torch.zeros(n, dtype=torch.bool), device_frames=frames)

    def advance(self) -> None:
        pass

    def release(self, slot: int) -> None:
        pass


class NullCodec:
    """Audio without a model: a quiet tone of the right length."""

    samples_per_frame = SAMPLES_PER_FRAME
    sample_rate = 24000
    device = torch.device("cpu")

    def reset(self, slots: list[int], requests: list[EngineRequest] | None = None) -> None:
        pass

    def decode(self, slots: list[int], frames: torch.Tensor, finishing: bool = False) -> torch.Tensor:
        t = torch.arange(frames.shape[1] * SAMPLES_PER_FRAME, dtype=torch.float32)
        return (0.1 * torch.sin(t * 0.05)).expand(frames.shape[0], -1)

    def to_host(self, audio: torch.Tensor, codes: torch.Tensor | None = None) -> HostAudio:
        return HostAudio(audio, codes=codes)


def request(i: int, frames: int, prompt_tokens: int = 60) -> EngineRequest:
    rows = tuple(range(prompt_tokens))
    prompt = Prompt(text_track=rows, codec_track=(None,) * prompt_tokens, trailing_text=(1, 2, 3), num_text_tokens=30)
    return EngineRequest(f"r{i}", prompt, SamplingParams(max_new_tokens=frames), ignore_eos=True)


def measure(streams: int, steps: int) -> dict:
    core = EngineCore(NullTalker(streams), NullCodec(), EngineConfig(max_streams=streams, max_queue=4 * streams))
    frames = 64  # streams restart every 64 frames, so admission and the first chunks are in the mix
    added = 0
    times = []
    for _ in range(steps):
        while len(core.streams) < streams:
            core.add_request(request(added, frames - (added % 8)))
            added += 1
        t = time.perf_counter()
        core.step()
        times.append(time.perf_counter() - t)
    ms = statistics.median(times[steps // 5 :]) * 1e3
    return {"streams": streams, "median_step_ms": ms, "us_per_stream": ms * 1e3 / streams}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for n in args.streams:
        r = measure(n, args.steps)
        ms, us = r["median_step_ms"], r["us_per_stream"]
        print(f"{n:4d} streams: {ms:.2f} ms per step of host time ({us:.1f} us per stream)")


if __name__ == "__main__":
    main()
