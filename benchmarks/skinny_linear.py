"""Tile sweep of the weight-streaming GEMM (`triton_streaming_gemm.streaming_gemm`) on a model size's decode
shapes (`--size`, default 0.6b), against cuBLAS: weight rows per program, K step, warps, stages and split-K. Each
configuration is timed as 50 calls inside one CUDA graph (a decode walk replays its GEMMs from a
graph too), so launch cost counts as it does in the engine, each call on its own copy of the weight
so that, as in a walk, it is read from HBM rather than L2.

    python benchmarks/skinny_linear.py [--size 1.7b] [--rows 1 16] [--shapes 4096x1024 ...] [--partials] \
        [--json out.json]

--partials times the split-K tiles without their ticket: the programs only store fp32 partials, for
the next kernel to add (as the RMSNorm after o and down adds theirs).

Prints, per (rows, N, K): cuBLAS, the tiles TritonOps.linear uses (`gemm_tiles`), and the
fastest tiles found (BN, BK, warps, stages, split-K), in us per call and the weight-read bandwidth
they reach; then what one decode walk's GEMM mix would cost with each. GPU only.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from pathlib import Path

import torch
import triton
from graph_timing import replay_ms

from cadence.kernels.linear import triton_streaming_gemm as triton_ops
from cadence.kernels.tile_table import current_table

# (N, K) of the decode walk's projections and how often one batch-1 walk runs each, by model size:
# the talker's 28 layers and codec head, the code predictor's 15 steps x 5 layers and its 15 heads,
# and on the 1.7B the projection of the talker's 2048-wide states to the code predictor's 1024
# (15 a walk). The code predictor is the same on both sizes.
CODE_PREDICTOR = {
    (4096, 1024): 75,  # QKV
    (1024, 2048): 75,  # O
    (6144, 1024): 75,  # gate/up
    (1024, 3072): 75,  # down
    (2048, 1024): 15,  # heads
}
TALKERS = {
    "0.6b": {(4096, 1024): 28, (1024, 2048): 28, (6144, 1024): 28, (1024, 3072): 28, (3072, 1024): 1},
    "1.7b": {
        (4096, 2048): 28,  # QKV
        (2048, 2048): 28,  # O
        (12288, 2048): 28,  # gate/up
        (2048, 6144): 28,  # down
        (3072, 2048): 1,  # codec head
        (1024, 2048): 15,  # the projection into the code predictor
    },
}
SHAPES = {
    size: {nk: talker.get(nk, 0) + CODE_PREDICTOR.get(nk, 0) for nk in {**talker, **CODE_PREDICTOR}}
    for size, talker in TALKERS.items()
}


# Every tile shape, unsplit and split over K (the programs' fp32 partials added by a ticket).
def sweep_tiles(stages: tuple[int, ...] = (3,)) -> list[triton_ops.GemmTiles]:
    return [
        triton_ops.GemmTiles(block_n, block_k, warps, stage, split)
        for block_n, block_k, warps, stage, split in itertools.product(
            (16, 32, 64), (256, 512), (4, 8), stages, (1, 2, 4, 8)
        )
    ]


CALLS = 50


def time_graph(fn, calls: int = CALLS) -> float:
    """us per call of `fn(i)`, i = 0..calls-1 captured in one CUDA graph (median replay)."""
    return replay_ms(lambda: [fn(i) for i in range(calls)]) * 1e3 / calls


def skinny(x: torch.Tensor, weights: list[torch.Tensor], out: torch.Tensor, tiles: triton_ops.GemmTiles,
           partials: bool = False):  # fmt: skip
    """Call i of a timed graph: the GEMM into `out`, or with `partials` (split-K tiles) only their
    fp32 partials, summed into `out` afterwards by the caller's check, not in the timed calls."""
    if partials and tiles.split_k > 1:
        return lambda i: triton_ops.streaming_gemm_partials(x, weights[i], tiles)
    return lambda i: triton_ops.streaming_gemm(x, weights[i], tiles, out=out)


def label(t: triton_ops.GemmTiles | None) -> str:
    if t is None:
        return "cuBLAS"
    return f"({t.block_n}, {t.block_k}, {t.warps}, {t.stages}, {t.split_k})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--rows", type=int, nargs="+", default=[1, 16],
        help="activation rows (batch) to time; above 16 (up to 64) the tiles hold the next power of two "
        "rows; 'shipped' is what TritonOps.linear runs (gemm_tiles: cuBLAS for some shapes)",
    )  # fmt: skip
    p.add_argument(
        "--stages", type=int, nargs="+", default=[3],
        help="pipeline stages to sweep (default 3; each adds 48 tiles a shape)",
    )  # fmt: skip
    p.add_argument("--size", choices=sorted(SHAPES), default="0.6b", help="whose decode shapes (default 0.6b)")
    p.add_argument("--shapes", nargs="+", metavar="NxK", help="only these of the walk's shapes (default: all)")
    p.add_argument("--partials", action="store_true",
                   help="split-K tiles store their partials only, no ticket (the next kernel adds them)")  # fmt: skip
    p.add_argument("--json", help="write every timing here")
    args = p.parse_args()
    walk_shapes = SHAPES[args.size]
    shapes = {nk: c for nk, c in walk_shapes.items() if not args.shapes or f"{nk[0]}x{nk[1]}" in args.shapes}
    if not shapes:
        names = ", ".join(f"{n}x{k}" for n, k in walk_shapes)
        raise SystemExit(f"--shapes: none of {args.shapes} is a walk shape ({names})")
    if not torch.cuda.is_available():
        raise SystemExit("skinny_linear.py needs a CUDA device")
    torch.manual_seed(0)
    results = []
    if max(args.rows) > 64:
        raise SystemExit("--rows: at most 64 (the kernel holds all rows of a call in one program)")
    for rows in args.rows:
        block_m = max(current_table().streaming_gemm.small_rows, triton.next_power_of_2(rows))
        sweep = [dataclasses.replace(t, block_m=block_m) for t in sweep_tiles(tuple(args.stages))]
        print(f"\nrows={rows}: us per call (weight GB/s)")
        print(f"{'N':>6} {'K':>5} {'cuBLAS':>15} {'shipped':>15} {'best':>15}  best (BN, BK, warps, stages, split)")
        walk = {"cublas": 0.0, "shipped": 0.0, "best": 0.0}
        for (n, k), count in shapes.items():
            x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
            # Each call of a graph reads its own copy, so the weights come from HBM as in a walk
            # (one 8-12 MB weight read 50 times would sit in the 50 MB L2).
            weights = [w] + [w.clone() for _ in range(CALLS - 1)]
            out = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.nn.functional.linear(x, w)
            cublas = time_graph(lambda i, x=x, ws=weights: torch.nn.functional.linear(x, ws[i]))
            timed = {}
            for tiles in sweep:
                call = skinny(x, weights, out, tiles, args.partials)
                try:
                    timed[tiles] = time_graph(call)
                except Exception as e:  # a tile too large for shared memory: skip it
                    print(f"  skipped {label(tiles)}: {type(e).__name__}")
                    continue
                if args.partials and tiles.split_k > 1:  # the last call's partials (weight copy 49), summed
                    got = triton_ops.streaming_gemm_partials(x, weights[-1], tiles)[:, :rows].sum(0)
                    assert (got - ref.float()).abs().max() <= 2e-2 * ref.float().abs().max(), label(tiles)
                    continue
                assert (out.float() - ref.float()).abs().max() <= 2e-2 * ref.float().abs().max(), label(tiles)
            shipped = triton_ops.gemm_tiles(n, k, rows)  # what TritonOps.linear uses; None: cuBLAS
            if shipped is not None and shipped not in timed:  # outside the swept stages
                timed[shipped] = time_graph(skinny(x, weights, out, shipped))
            timed[None] = cublas
            best = min(timed, key=timed.get)

            def cell(us: float, n=n, k=k) -> str:
                return f"{us:>7.2f} ({n * k * 2 / (us * 1e-6) / 1e9:>5.0f})"

            print(f"{n:>6} {k:>5} {cell(cublas)} {cell(timed[shipped])} {cell(timed[best])}  {label(best)}")
            walk["cublas"] += count * cublas
            walk["shipped"] += count * timed[shipped]
            walk["best"] += count * timed[best]
            results.append(
                {"rows": rows, "n": n, "k": k, "cublas_us": cublas, "shipped_us": timed[shipped],
                 "best_us": timed[best], "best_tiles": label(best), "all": {label(t): v for t, v in timed.items()}}
            )  # fmt: skip
        print(
            f"one decode walk's GEMMs at {rows} rows: cuBLAS {walk['cublas'] / 1e3:.2f} ms, "
            f"shipped {walk['shipped'] / 1e3:.2f} ms, best tiles {walk['best'] / 1e3:.2f} ms"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
