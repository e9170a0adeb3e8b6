"""The code predictor's 15 steps (one frame's codebooks 1..15) as layer kernels against the
persistent kernel (cadence/kernels/triton_code_predictor.py, perf-notes #35), each captured in a
CUDA graph and replayed: ms per frame by batch, a sweep of the persistent kernel's launch choices
(tiles, warps, grid size), and whether the two give the same codes. `--kernel cuda` measures the
CUDA persistent kernel instead (cuda_code_predictor.py, perf-notes #45: up to 4 streams).

    python benchmarks/code_predictor.py --model CKPT [--batches 1 8 16] [--kernel cuda] [--json out.json]

The checkpoint is a full-size one (`cadence checkpoint random --preset full`); bf16 as served.
Greedy rows, so "same codes" compares the argmax of both (bf16 accumulation order may part them
at a near-tie: the count of differing codes is printed, not asserted). GPU only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch
from graph_timing import replay_ms

from cadence.kernels.triton_code_predictor import CodePredictorTiles
from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.partitions import Qwen3TTSTalker

# Session 9's sweeps (docs/data/h200/code_predictor_first_sweep.json, code_predictor_35.json,
# code_predictor_36.json): 32 weight rows per tile beat 16 at every batch; K steps of 128 or 512,
# 8 warps, half the grid, an L2 prefetch of the next phase's weights before each barrier, and split-K
# in the narrow phases with the consumer adding the partials (perf-notes #36) were all slower, and
# the last two were removed from the kernel.
SWEEP = [
    CodePredictorTiles(),
    CodePredictorTiles(block_n=16),
    CodePredictorTiles(block_k=512),
    CodePredictorTiles(warps=8),
]


def talker(model: Qwen3TTS, streams: int, persistent_rows: int, kernel: str = "triton") -> Qwen3TTSTalker:
    """An eager partition (no engine graphs): this script captures the code predictor alone."""
    return Qwen3TTSTalker(model, streams, 2**26, 16, 64, 256, "triton", True, None, 64, 0, persistent_rows, kernel)


def inputs(model: Qwen3TTS, b: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """_predict_codes' inputs for `b` greedy rows: talker hidden states, code0s, steps, seeds."""
    hidden = torch.randn(b, model.config.talker.hidden_size, device="cuda", generator=g).to(model.dtype)
    code0 = torch.randint(0, 2048, (b,), device="cuda", generator=g)
    return hidden, code0, torch.zeros(b, dtype=torch.long, device="cuda"), torch.arange(b, device="cuda")


def check(args) -> None:
    """Codes of both paths from the same inputs, per codebook (codebook 1 depends on one step only;
    a near-tie flipped there changes every later input), and each path's batch against its rows
    run one at a time (both are meant to be batch-invariant up to 16 rows)."""
    model = Qwen3TTS.from_pretrained(args.model, "cuda", args.dtype)
    b = max(args.batches)
    paths = {"layers": talker(model, b, 0), "persistent": talker(model, b, b, args.kernel)}
    hidden, code0, step, seed = inputs(model, b, torch.Generator(device="cuda").manual_seed(0))
    out = {}
    for name, path in paths.items():
        out[name] = path.fast._predict_codes(hidden, code0, step, seed, torch.arange(b, device="cuda")).clone()
        alone = torch.cat([
            path.fast._predict_codes(hidden[i : i + 1], code0[i : i + 1], step[:1], seed[i : i + 1], step[:1]).clone()
            for i in range(b)
        ])  # fmt: skip
        print(f"{args.dtype} {name}: batch of {b} against its rows alone: {int((alone == out[name]).sum())}/{b * 15}")
    same = (out["layers"] == out["persistent"]).sum(0).tolist()
    print(f"{args.dtype} batch {b}: same codes per codebook (of {b} rows): {same}")


LAYER_PHASES = ("qkv", "attend", "o", "gate_up", "down")


def cycle_ns(trace: list[int]) -> float:
    """The SM clock's period over the frame: the global timer's span (trace[0], trace[1]) over the
    cycle count's (the start's stamp, trace[4], to the last phase's, trace[-1])."""
    return (trace[1] - trace[0]) / (trace[-1] - trace[4])


def phase_breakdown(trace: list[int], layers: int) -> dict[str, list[float]]:
    """The CUDA kernel's timestamps (code_predictor.cu: trace) as µs per phase kind, summed over a
    frame's layers and steps, step 0 (two rows a stream) apart from steps 1-14: [inputs, work, end].
    GEMM phases: inputs loaded and normalised, the dots (CTA 0's first warp), the barrier. Attention:
    the row loaded, QK-normed and roped, then scores, softmax and values. Sampling: the code picked,
    then the next step's input embedding written."""
    stamps = [trace[2 + 3 * i : 5 + 3 * i] for i in range((len(trace) - 2) // 3)]
    ns_per_cycle = cycle_ns(trace)
    names = [k for _ in range(layers) for k in LAYER_PHASES] + ["head", "sample"]
    out: dict[str, list[float]] = {}
    for i in range(1, len(stamps)):
        step, name = divmod(i - 1, len(names))
        key = f"{'step0' if step == 0 else 'steps1-14'} {names[name]}"
        parts = (stamps[i][0] - stamps[i - 1][2], stamps[i][1] - stamps[i][0], stamps[i][2] - stamps[i][1])
        sums = out.setdefault(key, [0.0, 0.0, 0.0])
        for j, cycles in enumerate(parts):
            sums[j] += cycles * ns_per_cycle / 1e3
    return out


def print_breakdown(b: int, breakdown: dict[str, list[float]]) -> None:
    print(f"batch {b:>3}: CTA 0's time per phase kind, µs a frame (all layers and steps)")
    print(f"    {'phase':<20} {'inputs':>8} {'work':>8} {'end':>8} {'total':>8}")
    for key, parts in sorted(breakdown.items(), key=lambda kv: -sum(kv[1])):
        print(f"    {key:<20} " + " ".join(f"{v:8.1f}" for v in [*parts, sum(parts)]))
    totals = [sum(p[j] for p in breakdown.values()) for j in range(3)]
    print(f"    {'total':<20} " + " ".join(f"{v:8.1f}" for v in [*totals, sum(totals)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16])
    p.add_argument("--sweep", action="store_true", help="also the launch choices of SWEEP and half the grid")
    p.add_argument("--check", action="store_true", help="compare codes only")
    p.add_argument("--kernel", choices=["triton", "cuda", "cuda-ll"], default="triton", help="the persistent kernel")
    p.add_argument("--json")
    args = p.parse_args()
    if args.check:
        check(args)
        return
    model = Qwen3TTS.from_pretrained(args.model, "cuda", args.dtype)
    rows = max(args.batches)
    layered, persistent = talker(model, rows, 0), talker(model, rows, rows, args.kernel)
    kernel = persistent.fast.persistent
    sms = kernel.programs
    g = torch.Generator(device="cuda").manual_seed(0)
    results = []
    for b in args.batches:
        hidden, code0, step, seed = inputs(model, b, g)
        slots = torch.arange(b, device="cuda")

        def codes(path):
            return path.fast._predict_codes(hidden, code0, step, seed, slots)  # noqa: B023

        same = int((codes(layered) == codes(persistent)).sum())
        row = {"batch": b, "layers_ms": replay_ms(lambda: codes(layered)), "same_codes": same, "codes": b * 15}  # noqa: B023
        configs = [(CodePredictorTiles(), sms)]
        if args.sweep and args.kernel == "triton":  # the CUDA kernel has no tiles to choose
            configs += [(t, sms) for t in SWEEP[1:]] + [(CodePredictorTiles(), sms // 2)]
        row["persistent"] = []
        for tiles, programs in configs:
            kernel.tiles, kernel.programs = tiles, programs
            ms = replay_ms(lambda: codes(persistent))  # noqa: B023
            row["persistent"].append({**dataclasses.asdict(tiles), "programs": programs, "ms": ms})
            print(f"batch {b:>3}: persistent {ms:.3f} ms ({tiles}, {programs} programs)")
        kernel.tiles, kernel.programs = CodePredictorTiles(), sms
        if args.kernel != "triton":  # the last replay's timestamps
            torch.cuda.synchronize()
            trace = kernel.trace.tolist()
            row["ns_per_cycle"] = cycle_ns(trace)
            row["phases_us"] = phase_breakdown(trace, len(kernel.stack.layers))
            print_breakdown(b, row["phases_us"])
            print(f"    SM clock {1 / row['ns_per_cycle']:.2f} GHz over the frame")
        best = min(r["ms"] for r in row["persistent"])
        print(f"batch {b:>3}: layer kernels {row['layers_ms']:.3f} ms, persistent {row['persistent'][0]['ms']:.3f} "
              f"(best {best:.3f}); same codes {same}/{b * 15}")  # fmt: skip
        results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
