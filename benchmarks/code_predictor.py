"""The code predictor's 15 steps (one frame's codebooks 1..15) as layer kernels against the
persistent kernel (cadence/kernels/triton_code_predictor.py, perf-notes #35), each captured in a
CUDA graph and replayed: ms per frame by batch, a sweep of the persistent kernel's launch choices
(tiles, warps, grid size), and whether the two give the same codes. `--kernel cuda` measures the
CUDA persistent kernel instead (cuda_code_predictor.py, perf-notes #45: up to 4 streams), with
the breakdown of its frame from every CTA's timestamps, for each build `--variants` asks for.

    python benchmarks/code_predictor.py --model CKPT [--batches 1 8 16] [--kernel cuda]
        [--variants base NAME=VALUE ...] [--sampled] [--json out.json]

The checkpoint is a full-size one (`cadence checkpoint random --preset full`); bf16 as served, with
programmatic dependent launch up to EngineConfig.pdl_max_rows rows as served. Greedy rows (or
`--sampled`: top-k 50, as served), so "same codes" compares the argmax of both (bf16 accumulation
order may part them at a near-tie: the count of differing codes is printed, not asserted). GPU only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from graph_timing import replay_ms

from cadence.engine.config import EngineConfig
from cadence.kernels.code_predictor_buffers import STAMPS, phases
from cadence.kernels.triton_code_predictor import CodePredictorTiles
from cadence.kernels.triton_launch import use_pdl
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


def sample_rows(*paths: Qwen3TTSTalker, rows: int) -> None:
    """Every row sampled as a served request by default (temperature 0.9, top-k 50, top-p 1.0, the
    model's subtalker defaults) instead of greedy: the sampler's own cost, which the walks pay."""
    for path in paths:
        c = path.fast.state.codes
        c.do_sample[:rows], c.temperature[:rows], c.top_k[:rows], c.top_p[:rows] = True, 0.9, 50, 1.0


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
COLUMNS = ("inputs", "norm", "weights", "work", "end")  # CTA 0's five spans a phase
MEANS = ("mean in", "mean nm", "mean wt", "mean wk", "last", "release")  # over the CTAs at work; the barrier


def cycle_ns(trace: np.ndarray, n_phases: int) -> float:
    """The SM clock's period over the frame, from CTA 0's stamps: the global timer's span (words 0, 1)
    over the cycle count's (the start's end stamp to the last phase's)."""
    stamps = trace[0, 2 : 2 + STAMPS * n_phases].reshape(n_phases, STAMPS)
    return (trace[0, 1] - trace[0, 0]) / (stamps[-1, 4] - stamps[0, 4])


def phase_breakdown(trace: np.ndarray, layers: int) -> dict[str, dict[str, float]]:
    """The CUDA kernel's trace (code_predictor.cu, TRACE: [CTAs, words], five stamps a phase) as µs
    per phase kind, summed over a frame's layers and steps, step 0 (two rows a stream) apart from
    steps 1-14. CTA 0's spans (COLUMNS): its input rows into shared memory (attention: rows loaded,
    QK-normed, roped; sampling: the code picked), their norm, waiting for the first weight chunk,
    the work (all warps), the barrier. Over all CTAs (MEANS): the mean of the first four over the
    CTAs at work in the phase, `last`: the latest arrival at the barrier (each CTA from its own
    release), and `release`: from that arrival to its release, the barrier's own cost."""
    n_phases = phases(15, layers)
    stamps = trace[:, 2 : 2 + STAMPS * n_phases].reshape(trace.shape[0], n_phases, STAMPS).astype(np.int64)
    ns_per_cycle = cycle_ns(trace, n_phases)
    names = [k for _ in range(layers) for k in LAYER_PHASES] + ["head", "sample"]
    out: dict[str, dict[str, float]] = {}
    for i in range(1, stamps.shape[1]):
        step, name = divmod(i - 1, len(names))
        key = f"{'step0' if step == 0 else 'steps1-14'} {names[name]}"
        start, (rows_in, normed, weights, done, end) = stamps[:, i - 1, 4], stamps[:, i].T
        worked = rows_in > 0
        arrive = done - start
        last = int(np.argmax(arrive))
        spans = {
            "inputs": rows_in[0] - start[0], "norm": normed[0] - rows_in[0], "weights": weights[0] - normed[0],
            "work": done[0] - weights[0], "end": end[0] - done[0], "mean in": (rows_in - start)[worked].mean(),
            "mean nm": (normed - rows_in)[worked].mean(), "mean wt": (weights - normed)[worked].mean(),
            "mean wk": (done - weights)[worked].mean(), "last": arrive[last], "release": end[last] - done[last],
        }  # fmt: skip
        if not worked[0]:  # CTA 0 idle: its wait is all barrier
            spans.update(inputs=0, norm=0, weights=0, work=done[0] - start[0], end=end[0] - done[0])
        sums = out.setdefault(key, dict.fromkeys(COLUMNS + MEANS, 0.0))
        for k, cycles in spans.items():
            sums[k] += float(cycles) * ns_per_cycle / 1e3
    return out


def print_breakdown(b: int, breakdown: dict[str, dict[str, float]]) -> None:
    print(f"batch {b:>3}: µs a frame per phase kind (all layers and steps); CTA 0, then over all CTAs")
    cols = COLUMNS + ("total",) + MEANS
    print(f"    {'phase':<18} " + " ".join(f"{c:>8}" for c in cols))
    rows = sorted(breakdown.items(), key=lambda kv: -sum(kv[1][c] for c in COLUMNS))
    for key, parts in rows + [("total", {c: sum(p[c] for p in breakdown.values()) for c in COLUMNS + MEANS})]:
        values = [parts[c] for c in COLUMNS] + [sum(parts[c] for c in COLUMNS)] + [parts[c] for c in MEANS]
        print(f"    {key:<18} " + " ".join(f"{v:8.1f}" for v in values))


def parse_variant(spec: str) -> dict[str, int]:
    """'base' or 'NAME=VALUE,NAME=VALUE': experiment switches of the CUDA kernel (code_predictor.cu)."""
    if spec == "base":
        return {}
    return {name: int(value) for name, value in (item.split("=", 1) for item in spec.split(","))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16])
    p.add_argument("--sweep", action="store_true", help="also the launch choices of SWEEP and half the grid")
    p.add_argument("--check", action="store_true", help="compare codes only")
    p.add_argument("--kernel", choices=["triton", "cuda", "cuda-ll"], default="triton", help="the persistent kernel")
    p.add_argument(
        "--variants",
        nargs="+",
        default=["base"],
        metavar="SPEC",
        help="CUDA kernels: builds to time in turn, each 'base' or NAME=VALUE[,NAME=VALUE] setting "
        "extra macros for the kernel's experiment switches (`#ifdef NAME` in code_predictor.cu)",
    )
    p.add_argument("--sampled", action="store_true", help="rows sampled (top-k 50) instead of greedy")
    p.add_argument("--stages", type=int, help="CUDA kernels: at most this many weight-ring stages (fewer than fit)")
    p.add_argument("--json")
    args = p.parse_args()
    if args.check:
        check(args)
        return
    model = Qwen3TTS.from_pretrained(args.model, "cuda", args.dtype)
    rows = max(args.batches)
    layered, persistent = talker(model, rows, 0), talker(model, rows, rows, args.kernel)
    kernel = persistent.fast.persistent
    if args.sampled:
        sample_rows(layered, persistent, rows=rows)
    if args.stages and args.kernel != "triton":
        kernel.plan = dataclasses.replace(kernel.plan, stages=min(args.stages, kernel.plan.stages))
    if args.kernel != "triton":
        print(f"CUDA kernel: {kernel.plan.stages} ring stages, MAX_ROWS {dict(kernel.plan.defines)['MAX_ROWS']}")
    sms = kernel.programs
    g = torch.Generator(device="cuda").manual_seed(0)
    results = []
    for b in args.batches:
        # programmatic dependent launch as served (EngineConfig.pdl_max_rows): without it the layer
        # kernels measured 0.4 ms slower at batch 1 than the engine runs them (perf-notes #53)
        use_pdl(b <= EngineConfig.pdl_max_rows)
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
        if args.kernel != "triton":
            row["persistent"] = [
                cuda_variant(
                    kernel, spec, b, lambda: codes(persistent), lambda: int((codes(layered) == codes(persistent)).sum())
                )  # noqa: B023
                for spec in args.variants
            ]
        best = min(r["ms"] for r in row["persistent"])
        print(f"batch {b:>3}: layer kernels {row['layers_ms']:.3f} ms, persistent {row['persistent'][0]['ms']:.3f} "
              f"(best {best:.3f}); same codes {same}/{b * 15}")  # fmt: skip
        results.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def cuda_variant(kernel, spec: str, b: int, run, same_codes) -> dict:
    """One build of the CUDA kernel: its codes against the layer kernels' (`same_codes()`), its time
    without the trace, then one traced replay's breakdown."""
    defines = parse_variant(spec)
    kernel.rebuild(trace=False, **defines)
    same = same_codes()
    ms = replay_ms(run)
    kernel.rebuild(trace=True, **defines)
    traced_ms = replay_ms(run)
    torch.cuda.synchronize()
    trace = kernel.trace.cpu().numpy()
    layers = len(kernel.stack.layers)
    breakdown = phase_breakdown(trace, layers)
    ns_per_cycle = cycle_ns(trace, phases(15, layers))
    print(f"batch {b:>3}: CUDA kernel [{spec}] {ms:.3f} ms ({traced_ms:.3f} traced); same codes {same}/{b * 15}")
    print_breakdown(b, breakdown)
    print(f"    SM clock {1 / ns_per_cycle:.2f} GHz over the frame")
    kernel.rebuild(trace=False)
    return {"variant": spec, "ms": ms, "traced_ms": traced_ms, "same_codes": same, "ns_per_cycle": ns_per_cycle,
            "phases_us": breakdown}  # fmt: skip


if __name__ == "__main__":
    main()
