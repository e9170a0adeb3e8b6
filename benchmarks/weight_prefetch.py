"""The weight prefetcher (cadence/kernels/weight_prefetch.py, perf-notes #70) on a bare GEMM chain:
the 0.6B's decoder-layer GEMMs (qkv 4096x1024, o 1024x2048, gate/up 6144x1024 with SwiGLU, down
1024x3072) over LAYERS layers with a weight of their own each (read from HBM, as in a walk: 75
layers are the code predictor's 15 steps x 5), one after another in a CUDA graph with programmatic
dependent launch as the walk runs them, without the prefetcher and with each setting swept.

Each row prints the chain's time, its weight bytes over that time, and whether its output is the
bits of the chain without the prefetcher (it must be: a prefetch is a hint). First, the prefetcher
alone over the same schedule, unpaced (its progress word past the end): the rate it can issue at.
And per row count the chain over one layer's weights repeated (L2-warm): what any prefetch could buy.

    python benchmarks/weight_prefetch.py [--rows 1 64] [--layers 75] [--json out.json]

GPU only (Hopper: the bulk prefetch is sm_90's).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from graph_timing import graph_replay_ms, replay_ms

from cadence.engine.graphs import capture
from cadence.kernels import triton_ops
from cadence.kernels.weight_prefetch import PrefetchSettings, WeightSchedule, launch_prefetcher

SHAPES = {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072)}


def make_layers(layers: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator(device="cuda").manual_seed(0)
    return [
        {name: (torch.randn(n, k, device="cuda", generator=g) * k**-0.5).bfloat16() for name, (n, k) in SHAPES.items()}
        for _ in range(layers)
    ]


def chain(x: torch.Tensor, layers: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    """The layers' GEMMs in the walk's order, each reading the one before's output."""
    for w in layers:
        qkv = triton_ops.linear(x, w["qkv"])
        h = triton_ops.linear(qkv[:, :2048], w["o"])
        x = triton_ops.linear(triton_ops.linear_swiglu(h, w["gate_up"]), w["down"])
    return x


def time_chain(x, layers, settings: PrefetchSettings | None) -> tuple[float, torch.Tensor]:
    """ms of one replay of the chain captured with the prefetcher's `settings` (None: without it)."""
    fn = lambda: chain(x, layers)  # noqa: E731
    schedule = None
    if settings is not None:
        schedule = WeightSchedule(x.device, settings)
        fn = schedule.wrap(fn)
    pool = torch.cuda.graph_pool_handle()
    graph, out = capture(fn, x.device, pool)
    ms = graph_replay_ms(graph, reps=20, warmup=3)
    return ms, out.clone()


def time_prefetcher_alone(x, layers, programs: int) -> float:
    """ms of the prefetcher over the chain's schedule with nothing to wait for, in a graph."""
    schedule = WeightSchedule(x.device, PrefetchSettings(2**20, programs))
    with schedule.recording():
        chain(x, layers)
    schedule.commit()
    schedule.progress.fill_(2**30)  # KB: past every unit's end
    return replay_ms(lambda: launch_prefetcher(schedule))  # 2.4 GB a replay: from HBM each time (L2 is 50 MB)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--layers", type=int, default=75)
    ap.add_argument("--leads", type=float, nargs="+", default=[8, 16, 32], help="MB ahead of the running GEMM")
    ap.add_argument("--programs", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    triton_ops.use_pdl(True)
    layers = make_layers(args.layers)
    gb = sum(w.numel() * w.element_size() for layer in layers for w in layer.values()) / 1e9
    print(f"{args.layers} layers, {gb:.2f} GB of weights; ms a chain, TB/s of weights, same bits as without")
    results = []
    for programs in args.programs:
        ms = time_prefetcher_alone(torch.zeros(1, 1024, device="cuda").bfloat16(), layers, programs)
        print(f"prefetcher alone, {programs:>3} programs: {ms:7.3f} ms  {gb / ms:5.2f} TB/s")
        results.append(dict(rows=0, mode="alone", programs=programs, ms=ms))
    for rows in args.rows:
        triton_ops.pdl_trigger_first(triton_ops.trigger_first_for(rows))
        x = torch.randn(rows, 1024, device="cuda").bfloat16()
        base_ms, base_out = time_chain(x, layers, None)
        print(f"rows {rows:>3}  off{'':>28} {base_ms:7.3f} ms  {gb / base_ms:5.2f} TB/s")
        results.append(dict(rows=rows, mode="off", ms=base_ms))
        # The bound on what any prefetch can buy: every layer the first one's weights (30 MB, mostly
        # in the 50 MB L2 after the first), no prefetcher.
        warm_ms, _ = time_chain(x, layers[:1] * len(layers), None)
        print(f"rows {rows:>3}  warm: one layer's weights {len(layers)} times {warm_ms:7.3f} ms")
        results.append(dict(rows=rows, mode="warm", ms=warm_ms))
        for programs, lead in itertools.product(args.programs, args.leads):
            ms, out = time_chain(x, layers, PrefetchSettings(int(lead * 2**20), programs))
            same = torch.equal(out, base_out)
            print(f"rows {rows:>3}  {programs:>3} programs {lead:>5.0f} MB ahead {ms:7.3f} ms  {gb / ms:5.2f} TB/s  "
                  f"{'same' if same else 'DIFFERENT'}")  # fmt: skip
            results.append(dict(rows=rows, mode="paced", programs=programs, lead_mb=lead, ms=ms, same=same))
    if args.json:
        args.json.write_text(json.dumps(dict(layers=args.layers, gb=gb, results=results), indent=1))


if __name__ == "__main__":
    main()
