"""Per-walk timings of the engine: talker_decode against batch size, talker_prefill against prompt
length, codec_chunk against (streams, frames per chunk). Numbers, not assertions.

    python benchmarks/engine_steps.py --model DIR                       # CPU (tiny checkpoint)
    python benchmarks/engine_steps.py --model DIR --device cuda --batches 1,8,64,256 --context 500

Each decode timing is the median over `--steps` walks after warm-up, at the given context length
(prompt tokens already in the KV cache); a walk includes reading the frames back to the host.
Prints a table and, with --json, writes every number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.engine.config import EngineConfig, RunawayGuard  # noqa: E402
from cadence.engine.engine import SynthesisRequest, build_core, prepare_request  # noqa: E402
from cadence.engine.partition import Admission  # noqa: E402
from cadence.models.qwen3_tts import Qwen3TTS  # noqa: E402

WORDS = "the quick brown fox jumps over a lazy dog while seven bright stars watch quietly".split()


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def text_of_tokens(model: Qwen3TTS, tokens: int) -> str:
    """A text whose prompt has about `tokens` text tokens."""
    words = [WORDS[i % len(WORDS)] for i in range(tokens)]
    return " ".join(words)


def make_core(model: Qwen3TTS, args, streams: int):
    cfg = EngineConfig(
        max_streams=streams,
        kv_cache_memory=args.kv_gb,
        attention_backend=args.attention_backend,
        enforce_eager=args.enforce_eager,
        runaway=RunawayGuard(frames_per_token=0, loop_window=0, silence_seconds=0),
        max_seq_tokens=max(2048, args.context + args.steps + args.warmup + 64),
    )
    start = time.perf_counter()
    core = build_core(model, cfg)
    sync(model.device)
    return core, time.perf_counter() - start


def admit(core, model: Qwen3TTS, n: int, prompt_tokens: int, frames: int) -> list[Admission]:
    text = text_of_tokens(model, prompt_tokens)
    admissions = []
    for i in range(n):
        req = prepare_request(
            model, SynthesisRequest(text, greedy=False, seed=i, max_new_tokens=frames, ignore_eos=True), 1 << 20
        )
        pages = core.talker.kv.allocate(core.talker.kv.pages_for(core.talker.tokens_to_reserve(req, frames)))
        slot = core.free_slots.pop()
        admissions.append(Admission(slot, req, pages))
    for i in range(0, n, 16):  # prefill in groups, as the scheduler would under its token budget
        core.talker.prefill(admissions[i : i + 16])
    return admissions


def release(core, admissions: list[Admission]) -> None:
    for a in admissions:
        core.talker.kv.release(a.pages)
        core.talker.release(a.slot)
        core.free_slots.append(a.slot)


def time_decode(core, model, batch: int, args) -> dict:
    admissions = admit(core, model, batch, args.context, args.steps + args.warmup + 4)
    slots = [a.slot for a in admissions]
    for _ in range(args.warmup):
        core.talker.decode(slots)
    times = []
    for _ in range(args.steps):
        sync(model.device)
        t = time.perf_counter()
        core.talker.decode(slots)  # includes the frames' copy to the host
        times.append(time.perf_counter() - t)
    release(core, admissions)
    ms = statistics.median(times) * 1e3
    return {"batch": batch, "context": args.context, "step_ms": ms, "frames_per_s": batch / ms * 1e3,
            "audio_s_per_s": batch * 0.08 / ms * 1e3}  # fmt: skip


def time_prefill(model, args, prompt_tokens: int) -> dict:
    core, _ = make_core(model, args, 2)
    text = text_of_tokens(model, prompt_tokens)
    times = []
    for _ in range(args.warmup + args.steps):
        req = prepare_request(model, SynthesisRequest(text, greedy=True, max_new_tokens=4, ignore_eos=True), 1 << 20)
        pages = core.talker.kv.allocate(core.talker.kv.pages_for(core.talker.tokens_to_reserve(req, 4)))
        slot = core.free_slots.pop()
        sync(model.device)
        t = time.perf_counter()
        core.talker.prefill([Admission(slot, req, pages)])
        core.talker.decode([slot])  # the first frame
        times.append(time.perf_counter() - t)
        core.talker.kv.release(pages)
        core.talker.release(slot)
        core.free_slots.append(slot)
    return {
        "prompt_tokens": len(req.prompt),
        "prefill_plus_first_frame_ms": statistics.median(times[args.warmup :]) * 1e3,
    }


def time_codec(core, model, streams: int, frames: int, args) -> dict:
    codec = core.codec
    slots = list(range(streams))
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 2048, (streams, frames, 16), generator=g)
    times = []
    for i in range(args.warmup + args.steps):
        if i % 8 == 0:
            codec.reset(slots)
        sync(model.device)
        t = time.perf_counter()
        codec.fetch(codec.decode(slots, codes))
        times.append(time.perf_counter() - t)
    ms = statistics.median(times[args.warmup :]) * 1e3
    return {"streams": streams, "frames": frames, "chunk_ms": ms, "audio_s_per_s": streams * frames * 0.08 / ms * 1e3}


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (e.g. a random full-size one)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--attention-backend", default="auto", choices=["auto", "sdpa", "triton", "torch"])
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--batches", type=ints, default=[1, 2, 4, 8])
    p.add_argument("--context", type=int, default=64, help="prompt tokens in the KV cache during decode")
    p.add_argument("--prompt-lengths", type=ints, default=[16, 60, 128])
    p.add_argument("--codec-streams", type=ints, default=[1, 4])
    p.add_argument("--codec-frames", type=ints, default=[1, 2, 8])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--kv-gb", type=float, default=None, help="KV cache size (default: engine default)")
    p.add_argument("--json", help="write all results here")
    p.add_argument(
        "--profile", action="store_true", help="print the top GPU kernels of one decode walk and one codec call"
    )
    args = p.parse_args()

    model = Qwen3TTS.from_pretrained(args.model, args.device, args.dtype)
    dev = model.device
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    graphs = "off" if args.enforce_eager else "on"
    print(f"device={dev} ({name}) talker dtype={model.dtype} backend={args.attention_backend} graphs={graphs}")
    results: dict = {"device": str(dev), "dtype": str(model.dtype), "backend": args.attention_backend, "decode": []}
    core, build_s = make_core(model, args, max(max(args.batches), max(args.codec_streams)))
    results["engine_build_seconds"] = build_s
    print(f"engine build (KV cache, graphs) {build_s:.1f} s")
    print("\ntalker_decode (talker + 15 code-predictor steps + sampling), per walk")
    print(f"{'batch':>6} {'ctx':>5} {'ms/step':>9} {'frames/s':>10} {'audio s/s':>10}")
    for b in args.batches:
        r = time_decode(core, model, b, args)
        results["decode"].append(r)
        print(f"{b:>6} {args.context:>5} {r['step_ms']:>9.2f} {r['frames_per_s']:>10.1f} {r['audio_s_per_s']:>10.1f}")

    print("\ntalker_prefill + first frame, batch 1")
    results["prefill"] = []
    for n in args.prompt_lengths:
        r = time_prefill(model, args, n)
        results["prefill"].append(r)
        print(f"  prompt {r['prompt_tokens']:>5} tokens: {r['prefill_plus_first_frame_ms']:.2f} ms")

    print("\ncodec_chunk (streaming decoder), per call")
    print(f"{'streams':>8} {'frames':>7} {'ms/chunk':>9} {'audio s/s':>10}")
    results["codec"] = []
    for s in args.codec_streams:
        for f in args.codec_frames:
            r = time_codec(core, model, s, f, args)
            results["codec"].append(r)
            print(f"{s:>8} {f:>7} {r['chunk_ms']:>9.2f} {r['audio_s_per_s']:>10.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.profile:
        profile(core, model, args)


def profile(core, model, args) -> None:
    """Kernel-level breakdown (eager launches of the same walk: graph replays hide kernels)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    admissions = admit(core, model, 1, args.context, 16)
    slots = [a.slot for a in admissions]
    fast = core.talker.fast
    step = (
        (lambda: fast.step(torch.tensor(slots, device=model.device))) if fast else (lambda: core.talker.decode(slots))
    )
    for _ in range(3):
        step()
    sync(model.device)
    for name, fn in (("decode walk, batch 1", step), ("codec chunk, 1 stream x 1 frame", _codec_call(core))):
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            sync(model.device)
        print(f"\n== {name} ==")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))
    release(core, admissions)


def _codec_call(core):
    codes = torch.randint(0, 2048, (1, 1, 16))
    return lambda: core.codec.decode([0], codes)


if __name__ == "__main__":
    main()
