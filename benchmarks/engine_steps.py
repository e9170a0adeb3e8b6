"""Timings of the engine's partitions: talker_decode against batch size, talker_prefill against prompt
length, codec_chunk against (streams, frames per chunk). Numbers, not assertions.

    python benchmarks/engine_steps.py --model DIR                       # CPU (tiny checkpoint)
    python benchmarks/engine_steps.py --model DIR --device cuda --batches 1,8,64,256 --context 500

Each decode timing is the median over `--steps` decode steps after warm-up, at the given context
length (prompt tokens already in the KV cache); a step includes reading its frames back to the host.
"Back to back" runs steps in the engine's order, each read back after the next is launched.
Prints a table and, with --json, writes every number. Each codec shape also reports how far its
streamed audio (in `--codec-dtype`) is from the model's exact fp32 offline decode.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.engine.config import CODEC_DTYPES, EngineConfig, RunawayGuard  # noqa: E402
from cadence.engine.engine import build_core  # noqa: E402
from cadence.engine.partition import Admission  # noqa: E402
from cadence.kernels.config import KernelConfig  # noqa: E402
from cadence.models.qwen3_tts import Qwen3TTS  # noqa: E402
from cadence.models.qwen3_tts.codec_stream import tf32_as_convs, tf32_switches  # noqa: E402
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request  # noqa: E402

WORDS = "the quick brown fox jumps over a lazy dog while seven bright stars watch quietly".split()


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def text_of_tokens(model: Qwen3TTS, tokens: int) -> str:
    """A text whose prompt has about `tokens` text tokens."""
    words = [WORDS[i % len(WORDS)] for i in range(tokens)]
    return " ".join(words)


def make_core(model: Qwen3TTS, args, streams: int, kv_gb: float | None = None):
    cfg = EngineConfig(
        max_streams=streams,
        kv_cache_memory=kv_gb or args.kv_gb,
        attention_backend=args.attention_backend,
        enforce_eager=args.enforce_eager,
        runaway=RunawayGuard(frames_per_token=0, loop_window=0, silence_seconds=0),
        max_seq_tokens=max(2048, args.context + args.steps + args.warmup + 64),
        codec_dtype=args.codec_dtype,
        codec_tf32=args.codec_tf32,
        codec_graph_stream_frames=args.codec_graph_stream_frames,
        kernels=KernelConfig(
            profile=args.kernel_profile, pdl_max_rows=args.pdl_max_rows, slab_max_rows=args.slab_max_rows
        ),
        graph_buckets=tuple(args.graph_buckets) if args.graph_buckets else None,
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
    """step_ms: one whole walk, both halves, from launch until the device is done (median). frame_ms:
    from launch until a walk's frames are on the host, its second half (the talker layers) not waited
    for. back_to_back_ms: walks in the engine's order (frames, then the second half, each walk read back
    after the next is launched: no host wait inside a walk), total time over the number of walks."""
    admissions = admit(core, model, batch, args.context, 3 * args.steps + args.warmup + 4)
    slots = [a.slot for a in admissions]
    talker = core.talker
    for _ in range(args.warmup):
        talker.decode(slots).wait()
        talker.advance()
    times, frame_times = [], []
    for _ in range(args.steps):
        sync(model.device)
        t = time.perf_counter()
        talker.decode(slots)
        talker.advance()
        sync(model.device)
        times.append(time.perf_counter() - t)
    for _ in range(args.steps):
        sync(model.device)
        t = time.perf_counter()
        talker.decode(slots).wait()  # includes the frames' copy to the host
        frame_times.append(time.perf_counter() - t)
        talker.advance()
    sync(model.device)
    t = time.perf_counter()
    previous = None
    for _ in range(args.steps):
        walk = talker.decode(slots)
        talker.advance()
        if previous is not None:
            previous.wait()
        previous = walk
    previous.wait()
    sync(model.device)
    back_to_back = (time.perf_counter() - t) / args.steps * 1e3
    release(core, admissions)
    ms = statistics.median(times) * 1e3
    return {"batch": batch, "context": args.context, "step_ms": ms, "frame_ms": statistics.median(frame_times) * 1e3,
            "back_to_back_ms": back_to_back, "frames_per_s": batch / ms * 1e3,
            "audio_s_per_s": batch * 0.08 / ms * 1e3}  # fmt: skip


def time_prefill(core, model, args, prompt_tokens: int) -> dict:
    text = text_of_tokens(model, prompt_tokens)
    times = []
    for _ in range(args.warmup + args.steps):
        req = prepare_request(model, SynthesisRequest(text, greedy=True, max_new_tokens=4, ignore_eos=True), 1 << 20)
        pages = core.talker.kv.allocate(core.talker.kv.pages_for(core.talker.tokens_to_reserve(req, 4)))
        slot = core.free_slots.pop()
        sync(model.device)
        t = time.perf_counter()
        core.talker.prefill([Admission(slot, req, pages)])
        core.talker.decode([slot]).wait()  # the first frame, on the host
        times.append(time.perf_counter() - t)
        core.talker.advance()  # as the engine does, once the frame's first codec chunk is queued
        core.talker.kv.release(pages)
        core.talker.release(slot)
        core.free_slots.append(slot)
    return {
        "prompt_tokens": len(req.prompt),
        "prefill_plus_first_frame_ms": statistics.median(times[args.warmup :]) * 1e3,
    }


def random_codes(model: Qwen3TTS, streams: int, frames: int, seed: int, device=None) -> torch.Tensor:
    """Codes drawn from the checkpoint's own codebook (tiny test checkpoints have small ones)."""
    size = model.config.speech_tokenizer.decoder.codebook_size
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, size, (streams, frames, 16), generator=g).to(device or "cpu")


def time_codec(core, model, streams: int, frames: int, args) -> dict:
    codec = core.codec
    slots = list(range(streams))
    codes = random_codes(model, streams, frames, seed=0)
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


def codec_errors(core, model: Qwen3TTS, streams: int, frames: int) -> dict[str, float]:
    """Max abs difference between `streams` streams decoded by the engine's codec in `frames`-frame
    chunks (96 frames or a little more: past the real codec's 72-frame window) and the model's fp32
    offline decode of the same codes, under three settings of PyTorch's TF32 switches:
      exact     both off: exact fp32
      official  PyTorch's defaults (cuDNN convolutions in TF32, matmuls exact), under which the
                official package decodes on a GPU
      same      the streaming codec's own setting (EngineConfig.codec_tf32), so only the streaming
                itself (state carried between chunks, batching, graphs) differs"""
    codec, slots = core.codec, list(range(streams))
    chunks = -(-96 // frames)
    codes = random_codes(model, streams, chunks * frames, seed=1)
    codec.reset(slots)
    parts = [codec.fetch(codec.decode(slots, codes[:, i * frames : (i + 1) * frames])) for i in range(chunks)]
    audio = torch.from_numpy(np.concatenate(parts, axis=1))
    settings = {
        "exact": lambda: tf32_switches(False, False),
        "official": lambda: tf32_switches(True, False),
        "same": lambda: tf32_as_convs(core.codec.decoder.tf32),
    }
    worst = dict.fromkeys(settings, 0.0)
    for name, switches in settings.items():
        with switches():
            for s in slots:  # one at a time: 256 streams at once would hold tens of GB of activations
                ref = model.codec.decode(codes[s]).float().cpu()
                worst[name] = max(worst[name], float((audio[s] - ref).abs().max()))
    return worst


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (e.g. a random full-size one)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--attention-backend", default="auto", choices=["auto", "sdpa", "triton", "torch"])
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument(
        "--codec-dtype",
        default="float32",
        choices=CODEC_DTYPES,
        help="the codec's precision (EngineConfig.codec_dtype)",
    )
    p.add_argument(
        "--codec-tf32",
        action=argparse.BooleanOptionalAction,
        help="the float32 codec on TF32 tensor cores or (--no-codec-tf32) exact fp32 (EngineConfig.codec_tf32; "
        "default: PyTorch's setting, TF32)",
    )
    p.add_argument(
        "--codec-graph-stream-frames",
        type=int,
        default=EngineConfig.codec_graph_stream_frames,
        help="the largest codec graph in streams x frames; larger chunks run as several (0: no limit)",
    )
    p.add_argument("--batches", type=ints, default=[1, 2, 4, 8])
    p.add_argument("--context", type=int, default=64, help="prompt tokens in the KV cache during decode")
    p.add_argument(
        "--prompt-lengths", type=ints, default=[16, 60, 128], help="'' skips the prefill section and its engine"
    )
    p.add_argument("--codec-streams", type=ints, default=[1, 4], help="'' skips the codec section")
    p.add_argument("--codec-frames", type=ints, default=[1, 2, 8])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--kv-gb", type=float, default=None, help="KV cache size (default: engine default)")
    p.add_argument("--json", help="write all results here")
    p.add_argument(
        "--profile",
        action="store_true",
        help="print the top GPU kernels of one decode step (the largest of --batches) and of two codec "
        "chunks (1 x 1 and the largest --codec-streams x --codec-frames)",
    )
    p.add_argument(
        "--kernel-profile",
        default=KernelConfig.profile,
        help="the kernels' tile table: auto (the GPU's family), h100, h200 or a .toml file (KernelConfig.profile; "
        "default %(default)s)",
    )
    p.add_argument(
        "--slab-max-rows",
        type=int,
        default=KernelConfig.slab_max_rows,
        help="decode graphs of at most this many rows run the slab GEMM (Hopper, bf16; 0: off; default "
        "%(default)s, the engine's)",
    )
    p.add_argument(
        "--pdl-max-rows",
        type=int,
        default=KernelConfig.pdl_max_rows,
        help="graphs of at most this many rows launch their Triton kernels with programmatic dependent launch "
        "(Hopper; 0: off, 256: every bucket; default %(default)s, the engine's)",
    )
    p.add_argument(
        "--graph-buckets",
        type=ints,
        default=None,
        help="capture CUDA graphs for these batch sizes only (EngineConfig.graph_buckets; default: the engine's "
        "1, 2, 4, ... up to the largest batch): e.g. the --batches timed, so that an A/B's engine builds "
        "capture ~10 codec graphs, not 44 (~90 s on an H200)",
    )
    return p.parse_args(argv)


def decode_section(core, model: Qwen3TTS, args) -> list[dict]:
    print("\ntalker_decode (talker + 15 code-predictor steps + sampling), per decode step")
    print("(ms/step: both halves of one step; frame: until its frames are on the host)")
    print(f"{'batch':>6} {'ctx':>5} {'ms/step':>9} {'frame':>7} {'back2back':>10} {'frames/s':>10} {'audio s/s':>10}")
    rows = []
    for b in args.batches:
        r = time_decode(core, model, b, args)
        rows.append(r)
        print(
            f"{b:>6} {args.context:>5} {r['step_ms']:>9.2f} {r['frame_ms']:>7.2f} {r['back_to_back_ms']:>10.2f} "
            f"{r['frames_per_s']:>10.1f} {r['audio_s_per_s']:>10.1f}"
        )
    return rows


def prefill_section(model: Qwen3TTS, args) -> list[dict]:
    """Prefill + first frame of one request from an empty engine: an engine of its own, small cache."""
    if not args.prompt_lengths:  # an A/B of decode steps skips it: ~10 s of an engine build
        return []
    print("\ntalker_prefill + first frame, batch 1")
    prefill_core, _ = make_core(model, args, 2, kv_gb=1.0 if model.device.type == "cuda" else None)
    rows = []
    for n in args.prompt_lengths:
        r = time_prefill(prefill_core, model, args, n)
        rows.append(r)
        print(f"  prompt {r['prompt_tokens']:>5} tokens: {r['prefill_plus_first_frame_ms']:.2f} ms")
    return rows


def codec_section(core, model: Qwen3TTS, args) -> list[dict]:
    """Each (streams, frames) shape's time, and its streamed audio's distance from the offline decode:
    against the exact fp32 decode (in float32 what TF32 costs: codec_stream.tf32_as_convs), against
    the official package's arithmetic (PyTorch's defaults), and against the same arithmetic offline.
    On a CPU all ~0."""
    if not args.codec_streams:
        return []
    print(f"\ncodec_chunk (streaming decoder, {args.codec_dtype}), per call; max abs err against the offline decode")
    print(f"{'streams':>8} {'frames':>7} {'ms/chunk':>9} {'audio s/s':>10} {'vs exact':>9} {'vs official':>12} "
          f"{'vs same':>8}")  # fmt: skip
    rows = []
    for s in args.codec_streams:
        for f in args.codec_frames:
            r = time_codec(core, model, s, f, args)
            err = codec_errors(core, model, s, f)
            r["max_abs_err_vs_fp32"] = err["exact"]
            r["max_abs_err_vs_official"] = err["official"]
            r["max_abs_err_vs_same_tf32"] = err["same"]
            rows.append(r)
            print(f"{s:>8} {f:>7} {r['chunk_ms']:>9.2f} {r['audio_s_per_s']:>10.1f} {err['exact']:>9.2e} "
                  f"{err['official']:>12.2e} {err['same']:>8.2e}")  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # capture times
    model = Qwen3TTS.from_pretrained(args.model, args.device, args.dtype)
    dev = model.device
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    graphs = "off" if args.enforce_eager else "on"
    print(
        f"device={dev} ({name}) talker dtype={model.dtype} codec dtype={args.codec_dtype} codec tf32={args.codec_tf32} "
        f"backend={args.attention_backend} graphs={graphs} pdl<={args.pdl_max_rows} rows "
        f"slab<={args.slab_max_rows} rows kernels={args.kernel_profile}"
    )
    results: dict = {"device": str(dev), "device_name": name, "dtype": str(model.dtype),
                     "codec_dtype": args.codec_dtype, "backend": args.attention_backend,
                     "pdl_max_rows": args.pdl_max_rows, "slab_max_rows": args.slab_max_rows,
                     "kernel_profile": args.kernel_profile}  # fmt: skip
    core, build_s = make_core(model, args, max(args.batches + args.codec_streams))
    results["engine_build_seconds"] = build_s
    results["kv_cache_gb"] = core.talker.kv.nbytes / 2**30
    print(f"engine build (KV cache, graphs) {build_s:.1f} s; KV cache {results['kv_cache_gb']:.2f} GB")
    results["decode"] = decode_section(core, model, args)
    results["prefill"] = prefill_section(model, args)
    results["codec"] = codec_section(core, model, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.profile:
        profile(core, model, args)


def profile(core, model, args) -> None:
    """Kernel-level breakdown (eager launches of the same walk: graph replays hide kernels)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    batch = max(args.batches)  # the walk profiled is the largest batch asked for
    admissions = admit(core, model, batch, args.context, 16)
    slots = [a.slot for a in admissions]
    fast = core.talker.fast
    step = (
        (lambda: fast.step(torch.tensor(slots, device=model.device))) if fast else (lambda: core.talker.decode(slots))
    )
    for _ in range(3):
        step()
    sync(model.device)
    walks = [(f"decode walk, batch {batch}", step)]
    codec_shapes = {(1, 1), (max(args.codec_streams), max(args.codec_frames))} if args.codec_streams else set()
    for streams, frames in sorted(codec_shapes):
        walks.append((f"codec chunk, {streams} streams x {frames} frames", _codec_call(core, model, streams, frames)))
    for name, fn in walks:
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            sync(model.device)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy_ms = sum(e.device_time for e in kernels) / 1e3
        print(f"\n== {name}: {len(kernels)} kernels, {busy_ms:.3f} ms of kernel time ==")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))
    release(core, admissions)


def _codec_call(core, model: Qwen3TTS, streams: int, frames: int):
    """One eager codec chunk (graph replays hide kernels from the profiler)."""
    codes = random_codes(model, streams, frames, seed=2, device=core.codec.device)
    slots = list(range(streams))
    return lambda: core.codec.decoder.decode(slots, codes)


if __name__ == "__main__":
    main()
