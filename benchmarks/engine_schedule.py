"""The engine's schedule at saturation without a GPU: the real engine core driving stand-in
partitions that sleep for the device times measured on the H200, so how the chunk policy groups
codec work (and what that costs) can be studied on any machine.

The talker's decode walk sleeps its measured back-to-back time for the batch size, the codec the
measured time of its (streams, frames) call (64-stream pieces, as the partition splits larger
groups), prefill its prompt time; all read from an engine_steps.py result. Host work runs between
the sleeps rather than overlapping them as on the GPU, so absolute numbers are pessimistic by the
host's share (~2 ms per step at 256 streams, engine_host.py); comparisons between policies on the
same machine are the point.

    python benchmarks/engine_schedule.py --streams 256 --frames 150 --stagger 1 8 --chunk-deadline 0 0.2
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_host import NullCodec, NullTalker, request  # noqa: E402

from cadence.engine.config import ChunkPolicy, EngineConfig  # noqa: E402
from cadence.engine.core import EngineCore  # noqa: E402
from cadence.models.qwen3_tts.partitions import Qwen3TTSCodec  # noqa: E402

MEASURED = Path(__file__).resolve().parents[1] / "docs/data/h200/engine_steps_triton.json"


def interpolate(points: dict[int, float], x: float) -> float:
    """Piecewise-linear through sorted (x, y) points, held flat beyond the ends."""
    xs = sorted(points)
    if x <= xs[0]:
        return points[xs[0]]
    if x >= xs[-1]:
        return points[xs[-1]] * x / xs[-1]  # beyond the largest measured size: proportional
    i = bisect.bisect_left(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return points[x0] + (points[x1] - points[x0]) * (x - x0) / (x1 - x0)


class DeviceTimes:
    """Measured device times (ms) of one engine_steps.py run, as functions of the call's shape."""

    def __init__(self, path: Path):
        data = json.loads(path.read_text())
        self.decode = {d["batch"]: d["back_to_back_ms"] for d in data["decode"]}
        self.codec: dict[int, dict[int, float]] = {}
        for c in data["codec"]:
            self.codec.setdefault(c["streams"], {})[c["frames"]] = c["chunk_ms"]
        first = min(data["prefill"], key=lambda p: p["prompt_tokens"])
        prefill_ms = max(0.0, first["prefill_plus_first_frame_ms"] - self.decode[1])
        self.prefill_per_token = prefill_ms / first["prompt_tokens"]

    def codec_ms(self, streams: int, frames: int) -> float:
        by_streams = {n: interpolate(f, frames) for n, f in self.codec.items()}
        return interpolate(by_streams, streams)


class SleepingTalker(NullTalker):
    def __init__(self, max_slots: int, times: DeviceTimes):
        super().__init__(max_slots)
        self.times = times

    def prefill(self, admissions) -> None:
        time.sleep(self.times.prefill_per_token * sum(len(a.request.prompt) for a in admissions) / 1e3)

    def decode(self, slots):
        time.sleep(interpolate(self.times.decode, len(slots)) / 1e3)
        return super().decode(slots)


class SleepingCodec(NullCodec):
    """Costs a call as the CUDA-graph codec runs it: groups over max_batch split, each piece padded
    up to its batch bucket and frames bucket (the padding is decoded too)."""

    def __init__(self, times: DeviceTimes, buckets: tuple[int, ...]):
        self.times = times
        self.buckets = buckets
        self.max_batch = max(buckets)
        self.calls: list[tuple[int, int]] = []

    def decode(self, slots, frames, finishing=False):
        f = frames.shape[1]
        padded_f = next((b for b in Qwen3TTSCodec.FRAME_BUCKETS if b >= f), f)
        for i in range(0, len(slots), self.max_batch):
            n = min(self.max_batch, len(slots) - i)
            self.calls.append((n, f))
            padded_n = next(b for b in self.buckets if b >= n)
            time.sleep(self.times.codec_ms(padded_n, padded_f) / 1e3)
        return super().decode(slots, frames, finishing)


def simulate(
    times: DeviceTimes, streams: int, prompt_tokens: int, frames: int, stagger: int, deadline: float,
    buckets: tuple[int, ...],
) -> dict:  # fmt: skip
    codec = SleepingCodec(times, buckets)
    config = EngineConfig(max_streams=streams, max_queue=4 * streams)
    config = replace(config, chunk_policy=ChunkPolicy(deadline=deadline))
    core = EngineCore(SleepingTalker(streams, times), codec, config)
    reqs = [request(i, frames, prompt_tokens) for i in range(streams)]
    per_step = -(-streams // stagger)
    samples, steps, codec_steps = 0, 0, 0
    start = time.perf_counter()
    while core.has_work() or steps * per_step < streams:
        for r in reqs[steps * per_step : (steps + 1) * per_step]:
            core.add_request(r)
        calls = len(codec.calls)
        samples += sum(c.pcm.size for c in core.step())
        codec_steps += len(codec.calls) > calls
        steps += 1
    wall = time.perf_counter() - start
    audio = samples / codec.sample_rate
    sizes = [f for _, f in codec.calls]
    return {
        "stagger": stagger, "deadline": deadline, "audio_seconds": audio, "audio_s_per_wall_s": audio / wall,
        "steps": steps,
        "steps_with_codec_work": codec_steps, "codec_calls": len(codec.calls),
        "frames_per_call": {f: sizes.count(f) for f in sorted(set(sizes))},
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument(
        "--prompt-tokens", type=int, default=40,
        help="prompt rows per request (engine_load.py's 30-token text makes 40); with the engine's "
        "2048-token prefill budget this sets how many streams one step admits",
    )  # fmt: skip
    ap.add_argument("--stagger", type=int, nargs="+", default=[1, 8], help="admit the streams over this many steps")
    ap.add_argument("--chunk-deadline", type=float, nargs="+", default=[0.0, 0.2], help="seconds (0: growth alone)")
    ap.add_argument(
        "--codec-buckets", type=lambda v: tuple(int(b) for b in v.split(",")), action="append",
        help="comma-separated codec batch buckets to compare (repeatable); default: the partition's",
    )  # fmt: skip
    ap.add_argument("--times", type=Path, default=MEASURED, help="an engine_steps.py --json result")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    times = DeviceTimes(args.times)
    results = []
    for buckets in args.codec_buckets or [Qwen3TTSCodec.BATCH_BUCKETS]:
        buckets = tuple(b for b in buckets if b <= 64) or (64,)  # the partition splits groups over 64
        for stagger in args.stagger:
            for deadline in args.chunk_deadline:
                r = simulate(times, args.streams, args.prompt_tokens, args.frames, stagger, deadline, buckets)
                r["codec_buckets"] = buckets
                results.append(r)
                print(f"buckets {','.join(map(str, buckets))}; stagger {stagger}, deadline {deadline}: "
                      f"{r['audio_s_per_wall_s']:.0f} audio s/s, codec work in "
                      f"{r['steps_with_codec_work']} of {r['steps']} steps, {r['codec_calls']} calls, "
                      f"frames per call {r['frames_per_call']}", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
