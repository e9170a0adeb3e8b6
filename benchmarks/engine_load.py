"""Whole-engine numbers: server-side time to first audio and throughput at saturation.

    python benchmarks/engine_load.py --model DIR --device cuda --streams 256 --frames 150

- ttfa: one request at a time (a 30-token text); time from add_request to the first PCM chunk
  leaving core.step(), i.e. prefill + first frame + first codec chunk + the step's bookkeeping.
- saturation: `--streams` requests of `--frames` frames each (ignore_eos: fixed length) submitted
  together; seconds of audio produced per wall second while the core steps through all of them.
Numbers, not assertions.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.engine.config import ChunkPolicy, EngineConfig  # noqa: E402
from cadence.engine.engine import build_core  # noqa: E402
from cadence.models.qwen3_tts import Qwen3TTS  # noqa: E402
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request  # noqa: E402

TTFA_TEXT = (  # 30 text tokens
    "The quick brown fox jumps over the lazy dog, then runs far away into the deep green forest "
    "where the old trees whisper softly in the evening wind."
)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--frames", type=int, default=100)
    p.add_argument("--ttfa-runs", type=int, default=20)
    p.add_argument("--kv-gb", type=float, default=None)
    p.add_argument(
        "--stagger",
        type=int,
        default=1,
        help="admit the saturation streams over this many steps (1: all at once, in lockstep; "
        "more: chunk boundaries spread over steps, as arrivals spread them in a server)",
    )
    p.add_argument(
        "--pipeline-codec",
        choices=["auto", "on", "off", "both"],
        default="auto",
        help="codec chunks overlapping the talker's step; both: measure off, then on (same engine)",
    )
    p.add_argument(
        "--chunk-deadline",
        type=float,
        default=None,
        help="the chunk policy's deadline in seconds (0: chunks grow by the schedule alone); default: "
        "the engine's (0.2 s on a GPU), as cadence serve's --chunk-deadline",
    )
    p.add_argument(
        "--codec-tf32",
        action=argparse.BooleanOptionalAction,
        help="the float32 codec on TF32 tensor cores or (--no-codec-tf32) exact fp32 (EngineConfig.codec_tf32; "
        "default: PyTorch's setting, TF32)",
    )
    p.add_argument("--json")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # capture times

    model = Qwen3TTS.from_pretrained(args.model, args.device, args.dtype)
    cfg = EngineConfig(
        max_streams=args.streams,
        kv_cache_memory=args.kv_gb,
        attention_backend=args.attention_backend,
        enforce_eager=args.enforce_eager,
        codec_tf32=args.codec_tf32,
        max_queue=max(256, args.streams),
        chunk_policy=ChunkPolicy(deadline=args.chunk_deadline),
        # built pipelined for "on" and "both" (the codec then gets its own CUDA stream); "both" then
        # measures the same engine with the pipelining switched off and on
        pipeline_codec={"auto": None, "off": False}.get(args.pipeline_codec, True),
    )
    t = time.perf_counter()
    core = build_core(model, cfg)
    mib = core.codec.bytes_per_stream / 2**20
    print(f"engine build {time.perf_counter() - t:.1f} s; codec state {mib:.2f} MiB/stream")
    out: dict = {"device": str(model.device), "streams": args.streams, "frames": args.frames, "stagger": args.stagger,
                 "chunk_deadline": core.config.chunk_policy.deadline}  # fmt: skip
    modes = {"auto": [core.config.pipeline_codec], "on": [True], "off": [False], "both": [False, True]}
    for pipelined in modes[args.pipeline_codec]:
        core.config = replace(core.config, pipeline_codec=pipelined)
        print(f"-- pipeline_codec={pipelined}")
        out[f"pipeline_codec={pipelined}"] = measure(core, model, args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


def measure(core, model, args) -> dict:
    out: dict = {}
    ttfa = []
    for i in range(args.ttfa_runs + 3):
        req = prepare_request(model, SynthesisRequest(TTFA_TEXT, seed=i, max_new_tokens=40), 4096)
        start = time.monotonic()
        core.add_request(req, arrival=start)
        first = None
        while core.has_work():
            for chunk in core.step():
                if first is None and chunk.pcm.size:
                    first = time.monotonic() - start
                    core.cancel(req.request_id)
        if i >= 3:
            ttfa.append(first * 1e3)
    out["ttfa_ms"] = {"p50": statistics.median(ttfa), "p95": pct(ttfa, 95), "min": min(ttfa)}
    t = out["ttfa_ms"]
    print(f"server-side TTFA, one stream, {req.prompt.num_text_tokens}-token text: "
          f"p50 {t['p50']:.1f} ms, p95 {t['p95']:.1f} ms, min {t['min']:.1f} ms")  # fmt: skip

    reqs = [
        prepare_request(model, SynthesisRequest(TTFA_TEXT, seed=i, max_new_tokens=args.frames, ignore_eos=True), 4096)
        for i in range(args.streams)
    ]
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    per_step = -(-len(reqs) // args.stagger)
    samples, steps = 0, 0
    step_times = []
    codec_steps = 0  # steps that launched codec work
    calls0, frames0 = core.stats.codec_calls, core.stats.codec_frames
    while core.has_work() or steps * per_step < len(reqs):
        for r in reqs[steps * per_step : (steps + 1) * per_step]:
            core.add_request(r)
        t = time.perf_counter()
        calls = core.stats.codec_calls
        for chunk in core.step():
            samples += chunk.pcm.size
        step_times.append(time.perf_counter() - t)
        codec_steps += core.stats.codec_calls > calls
        steps += 1
    wall = time.perf_counter() - start
    audio = samples / model.sample_rate
    out["saturation"] = {
        "audio_seconds": audio,
        "wall_seconds": wall,
        "audio_s_per_wall_s": audio / wall,
        "steps": steps,
        "median_step_ms": statistics.median(step_times) * 1e3,
        "steps_with_codec_work": codec_steps,
        "codec_calls": core.stats.codec_calls - calls0,
        "codec_frames": core.stats.codec_frames - frames0,
    }
    sat = out["saturation"]
    print(f"saturation: {args.streams} streams x {args.frames} frames: {audio:.0f} s of audio in {wall:.2f} s wall = "
          f"{audio / wall:.0f} audio s per wall s (median engine step {sat['median_step_ms']:.1f} ms); codec work in "
          f"{codec_steps} of {steps} steps, {sat['codec_calls']} calls, "
          f"{sat['codec_frames'] / max(1, sat['codec_calls']):.1f} stream-frames per call")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
