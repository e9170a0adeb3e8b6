"""Where a decode GEMM's time goes inside a chain of them (perf-notes #93): clock stamps per program.

The b1 walk is ~430 weight-streaming GEMMs back to back (#91), each ~2 us of fixed cost plus its
weight at ~2.7 TB/s (#89's per-call times), and not understood further. This runs the code
predictor's layer sequence as the walk launches it, without the attention (qkv; o with its
partials; the norm that adds them; gate/up with SwiGLU; down with its partials; the norm), over
LAYERS layers with their own weights (from HBM, as in the walk), in one CUDA graph with the PDL
order the engine gives `rows`, and has every GEMM program stamp the clock (`trace_gemms`): at its
start, after its L2 prefetches, after its PDL wait, after its dots, at its end. Per GEMM kind it
prints medians over the layers (us):

  lead      how long before the previous GEMM's last program ended this one's first started
  release   previous GEMM's last end -> this one's first wait returned (the norm between included)
  waited    first -> last program past its wait
  dots      a program's loop: wait returned -> dots done (median program)
  tail      dots done -> end (stores, the split-K ticket)
  span      previous GEMM's last end -> this one's last end: what the GEMM adds to the chain

and the graph's time with and without the stamps (their own cost).

    python benchmarks/gemm_trace.py [--rows 1 64] [--layers 12] [--json out.json]

GPU only.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from graph_timing import graph_replay_ms

from cadence.kernels import triton_ops
from cadence.kernels.triton_launch import pdl_settings, trigger_first_for
from cadence.kernels.triton_linear import trace_gemms

HIDDEN, INTER, Q_WIDTH, QKV_WIDTH = 1024, 3072, 2048, 4096  # the 0.6B's code predictor (and talker) layer
EPS = 1e-6
KINDS = ("qkv", "o", "gate/up", "down")  # the GEMMs of a layer, in launch order
COLUMNS = (("lead", 6), ("release", 8), ("waited", 7), ("dots", 6), ("tail", 6), ("span", 6))


def layer_weights(layers: int) -> list[tuple[torch.Tensor, ...]]:
    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.02

    ones = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
    return [
        (w(QKV_WIDTH, HIDDEN), w(HIDDEN, Q_WIDTH), w(2 * INTER, HIDDEN), w(HIDDEN, INTER), ones) for _ in range(layers)
    ]


def run_layers(x: torch.Tensor, weights) -> None:
    """The layer sequence of FusedStack's decode walk without the attention (o reads qkv's q part)."""
    h, residual = triton_ops.rms_norm(x, weights[0][4], EPS)
    for wqkv, wo, wgu, wdown, norm in weights:
        qkv = triton_ops.linear(h, wqkv)
        h, residual = triton_ops.linear_rms_norm(qkv[:, :Q_WIDTH], wo, norm, EPS, residual)
        h, residual = triton_ops.linear_rms_norm(triton_ops.linear_swiglu(h, wgu), wdown, norm, EPS, residual)


def capture(rows: int, weights, traced: bool):
    """The graph of the layer sequence at `rows` rows (with the engine's PDL order), and its trace."""
    x = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16)
    with pdl_settings(True, trigger_first_for(rows)):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            run_layers(x, weights)  # compile before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        if not traced:
            with torch.cuda.graph(graph):
                run_layers(x, weights)
            return graph, None
        with trace_gemms(4 * len(weights), x.device) as trace, torch.cuda.graph(graph):
            run_layers(x, weights)
    return graph, trace


def analyse(trace) -> dict[str, dict[str, float]]:
    """Per GEMM kind, medians over the layers of the quantities in the module docstring (us)."""
    stamps = trace.stamps.view(len(trace.calls), trace.programs, -1).cpu()
    per_kind: dict[str, dict[str, list[float]]] = {kind: {} for kind in KINDS}
    prev_end = None
    for i, (_, _, _, programs) in enumerate(trace.calls):
        s = stamps[i, :programs].double() / 1e3  # us
        start, waited, dots, end = s[:, 0], s[:, 2], s[:, 3], s[:, 4]
        row = {
            "waited": float(waited.max() - waited.min()),
            "dots": float((dots - waited).median()),
            "tail": float((end - dots).median()),
            "programs": programs,
            "sms": len(set(s[:, 5].tolist())),
        }
        if prev_end is not None:
            row.update(lead=prev_end - float(start.min()), release=float(waited.min()) - prev_end,
                       span=float(end.max()) - prev_end)  # fmt: skip
        prev_end = float(end.max())
        for key, value in row.items():
            per_kind[KINDS[i % 4]].setdefault(key, []).append(value)
    return {kind: {key: statistics.median(v) for key, v in vals.items()} for kind, vals in per_kind.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 64], help="activation rows (default 1 64)")
    ap.add_argument("--layers", type=int, default=12, help="layers, each with its own weights (default 12)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gemm_trace.py times GPU kernels: no CUDA device here")
    weights = layer_weights(args.layers)
    results = []
    for rows in args.rows:
        plain, _ = capture(rows, weights, traced=False)
        traced, trace = capture(rows, weights, traced=True)
        plain_ms = graph_replay_ms(plain, warmup=3)
        traced_ms = graph_replay_ms(traced, warmup=3)  # the last replay's stamps are read below
        kinds = analyse(trace)
        print(f"\nrows={rows}: {args.layers} layers in {plain_ms * 1e3 / args.layers:.2f} us a layer "
              f"({traced_ms * 1e3 / args.layers:.2f} stamped), medians over layers, us")  # fmt: skip
        print(f"{'GEMM':>8} {'programs':>8} {'SMs':>4} " + " ".join(f"{key:>{width}}" for key, width in COLUMNS))
        for kind, m in kinds.items():
            cells = [f"{m.get(key, 0):>{width}.2f}" for key, width in COLUMNS]
            print(f"{kind:>8} {m['programs']:>8.0f} {m['sms']:>4.0f} " + " ".join(cells))
        results.append({"rows": rows, "layers": args.layers, "graph_ms": plain_ms, "stamped_ms": traced_ms,
                        "kinds": kinds})  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
