"""Where a decode kernel's time goes inside a chain of them (perf-notes #93): clock stamps per program.

Every program of a traced kernel (`triton_launch.trace_kernels`) writes the clock (%globaltimer,
32 ns steps on Hopper, one clock for all SMs) at its start, after what it does before its PDL wait
(the GEMM's L2 prefetches), after the wait, after its main loop, at its end, and its SM.

GEMMs: the b1 walk is ~430 weight-streaming GEMMs back to back (#91), and #89's per-call times fit
~2 us of fixed cost a GEMM plus its weight at ~2.7 TB/s. This runs the code predictor's layer
sequence as the walk launches it, without the attention (qkv; o with its split-K partials; the norm
that adds them; gate/up with SwiGLU; down with its partials; the norm), over --layers layers with
their own weights (from HBM, as in the walk), in one CUDA graph with the engine's PDL order for the
rows. Per GEMM kind, medians over the layers, us:

  lead      how long before the previous GEMM's last program ended this one's first started
  release   previous GEMM's last end -> this one's first program past its wait (a norm between included)
  waited    first -> last program past its wait
  loop      a program's K loop: wait returned -> dots done (the median program)
  tail      dots done -> end (stores, the split-K ticket)
  span      previous GEMM's last end -> this one's last end: what the GEMM adds to the chain

Attention: the talker's fused decode attention over 28 layers at --context tokens, alone in a graph
(#90 put b64's at 40 us a layer against 34 of streaming). Per layer, medians over the layers: the
same columns (the loop is the block loop), and the programs a SM held at once (the most seen).

    python benchmarks/kernel_trace.py [--rows 1 64] [--no-norms] [--attention-rows 64] [--json out.json]

Each part also prints its graph's time with and without the stamps (their own cost). GPU only.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from graph_timing import graph_replay_ms
from paged_attention import HKV, HQ, LAYERS, PAGE, D  # the talker's attention shapes
from walk_timeline import call_columns  # the columns a stamped call is read into, as for a walk

from cadence.kernels import triton_ops
from cadence.kernels.triton_launch import pdl_settings, trace_kernels, trigger_first_for

HIDDEN, INTER, Q_WIDTH, QKV_WIDTH = 1024, 3072, HQ * D, (HQ + 2 * HKV) * D  # a 0.6B layer
EPS = 1e-6
GEMM_KINDS = ("qkv", "o", "gate/up", "down")  # the GEMMs of a layer, in launch order
COLUMNS = (("lead", 6), ("release", 8), ("waited", 7), ("loop", 6), ("tail", 6), ("span", 6), ("per SM", 6))


def layer_weights(layers: int) -> list[tuple[torch.Tensor, ...]]:
    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.02

    ones = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
    return [
        (w(QKV_WIDTH, HIDDEN), w(HIDDEN, Q_WIDTH), w(2 * INTER, HIDDEN), w(HIDDEN, INTER), ones) for _ in range(layers)
    ]


def gemm_chain(rows: int, weights, norms: bool = True) -> Callable[[], None]:
    """The layer sequence of FusedStack's decode walk without the attention (o reads qkv's q part);
    without `norms`, the o and down GEMMs only store their partials and the next GEMM reads the
    layer's input again (what a norm folded into the next GEMM at no cost would leave)."""
    x = torch.randn(rows, HIDDEN, device="cuda", dtype=torch.bfloat16)

    def linear_norm(a: torch.Tensor, w: torch.Tensor, norm: torch.Tensor, residual: torch.Tensor):
        if norms:
            return triton_ops.linear_rms_norm(a, w, norm, EPS, residual)
        triton_ops.skinny_linear_partials(a, w, triton_ops.linear_tiles(a, w))
        return x, residual

    def run() -> None:
        h, residual = triton_ops.rms_norm(x, weights[0][4], EPS)
        for wqkv, wo, wgu, wdown, norm in weights:
            qkv = triton_ops.linear(h, wqkv)
            h, residual = linear_norm(qkv[:, :Q_WIDTH], wo, norm, residual)
            h, residual = linear_norm(triton_ops.linear_swiglu(h, wgu), wdown, norm, residual)

    return run


def attention_layers(rows: int, context: int) -> Callable[[], None]:
    """The talker's 28 fused decode attentions (QK-norm, RoPE, cache write, attention) at `rows`
    rows of `context` tokens, each layer on its own cache (from HBM), the engine's tiles and splits."""
    pages_per_row = -(-context // PAGE)
    table = torch.arange(rows * pages_per_row, device="cuda").view(rows, pages_per_row)  # int64, as the engine's
    caches = [
        tuple(torch.randn(rows * pages_per_row, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        for _ in range(LAYERS)
    ]  # fmt: skip
    qkv = torch.randn(rows, QKV_WIDTH, device="cuda", dtype=torch.bfloat16)
    ctx = torch.full((rows,), context, device="cuda", dtype=torch.int64)  # the engine's dtypes (#84)
    positions = ctx - 1
    slots = table[:, -1] * PAGE + (context - 1) % PAGE
    norm = torch.ones(D, device="cuda", dtype=torch.bfloat16)
    cos = torch.randn(context, D, device="cuda", dtype=torch.bfloat16)
    sin = torch.randn(context, D, device="cuda", dtype=torch.bfloat16)

    def run() -> None:
        for k, v in caches:
            triton_ops.qk_norm_rope_attention(
                qkv, norm, norm, EPS, cos, sin, positions, k, v, slots, table, ctx, D**-0.5, HQ, HKV,
                max_context=context,
            )  # fmt: skip

    return run


def capture(run: Callable[[], None], rows: int, calls: int, traced: bool):
    """`run` in a CUDA graph with the engine's PDL order for `rows`, and its trace (or None)."""
    with pdl_settings(True, trigger_first_for(rows)):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            run()  # compile before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        if not traced:
            with torch.cuda.graph(graph):
                run()
            return graph, None
        with trace_kernels(calls, torch.device("cuda"), programs=2048) as trace, torch.cuda.graph(graph):
            run()
    return graph, trace


def most_per_sm(sm: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> int:
    """The most programs any SM held at once (from their start and end stamps)."""
    most = 0
    for s in sm.unique():
        on = sm == s
        events = sorted([(t, 1) for t in start[on].tolist()] + [(t, -1) for t in end[on].tolist()])
        held = 0
        for _, step in events:
            held += step
            most = max(most, held)
    return most


def analyse(trace, kinds: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per kind (call i is kinds[i % len(kinds)]), medians over its calls of the columns (us)."""
    stamps = trace.by_call()
    per_kind: dict[str, dict[str, list[float]]] = {kind: {} for kind in kinds}
    prev_end = None
    for i, (_, programs) in enumerate(trace.calls):
        s = stamps[i, :programs].double() / 1e3  # us
        row = call_columns(s, prev_end)
        row.update({
            "waited": float(s[:, 2].max() - s[:, 2].min()),
            "per SM": most_per_sm(stamps[i, :programs, 5], stamps[i, :programs, 0], stamps[i, :programs, 4]),
            "programs": programs,
        })  # fmt: skip
        prev_end = float(s[:, 4].max())
        for key, value in row.items():
            per_kind[kinds[i % len(kinds)]].setdefault(key, []).append(value)
    return {kind: {key: statistics.median(v) for key, v in vals.items()} for kind, vals in per_kind.items()}


def report(title: str, run: Callable[[], None], rows: int, calls: int, kinds: tuple[str, ...], per: int) -> dict:
    """Time `run` in a graph with and without stamps, print the stamps' columns per kind."""
    plain, _ = capture(run, rows, calls, traced=False)
    traced, trace = capture(run, rows, calls, traced=True)
    plain_ms = graph_replay_ms(plain, warmup=3)
    traced_ms = graph_replay_ms(traced, warmup=3)  # the last replay's stamps are read below
    result = analyse(trace, kinds)
    print(f"\n{title}, rows={rows}: {plain_ms * 1e3 / per:.2f} us a layer "
          f"({traced_ms * 1e3 / per:.2f} stamped); medians, us")  # fmt: skip
    print(f"{'kernel':>9} {'programs':>8} " + " ".join(f"{key:>{width}}" for key, width in COLUMNS))
    for kind, m in result.items():
        cells = " ".join(f"{m.get(key, 0):>{width}.2f}" for key, width in COLUMNS)
        print(f"{kind:>9} {m['programs']:>8.0f} {cells}")
    return {"part": title, "rows": rows, "graph_ms": plain_ms, "stamped_ms": traced_ms, "kinds": result}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 64], help="GEMM chain rows (default 1 64)")
    ap.add_argument("--layers", type=int, default=12, help="GEMM chain layers, each its own weights (default 12)")
    ap.add_argument("--no-norms", action="store_true", help="the GEMM chain without its norms, too")
    ap.add_argument("--attention-rows", type=int, nargs="*", default=[64], help="attention rows (default 64)")
    ap.add_argument("--context", type=int, default=514, help="attention context tokens (default 514)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("kernel_trace.py times GPU kernels: no CUDA device here")
    weights = layer_weights(args.layers)
    chains = [("GEMM chain", True)] + [("GEMM chain without norms", False)] * args.no_norms
    results = [
        report(title, gemm_chain(rows, weights, norms), rows, 4 * args.layers, GEMM_KINDS, args.layers)
        for rows in args.rows
        for title, norms in chains
    ]
    for rows in args.attention_rows:
        attention = attention_layers(rows, args.context)
        results.append(report("talker attention", attention, rows, LAYERS, ("attn",), LAYERS))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
