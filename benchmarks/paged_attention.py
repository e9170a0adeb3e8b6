"""Launch-choice sweep of the paged decode attention (`triton_ops.paged_attention`) on the talker's
shapes (16 query / 8 kv heads x 128, 16-token pages, bf16) at decode batch sizes: tokens per
iteration and warps (`AttentionTiles`) and context splits. (Session 6 also swept a prefetch of
the next block, since removed: it never won; docs/data/h200/paged_attention.json has its timings.)

Each configuration is timed as one decode walk's attention: 28 calls, one per layer, each over its
own layer's cache (so the KV comes from HBM, not L2, as in the engine), captured in one CUDA graph.

    python benchmarks/paged_attention.py [--batches 1 64 256] [--context 500] [--json out.json]

Prints, per batch: the shipped choice (`attention_tiles` and `attention_splits`), the fastest
found, in ms per walk and the KV-read bandwidth they reach. GPU only.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from graph_timing import replay_ms

from cadence.kernels import torch_ops, triton_ops

LAYERS, HQ, HKV, D, PAGE = 28, 16, 8, 128, 16
TILES = [
    triton_ops.AttentionTiles(block_tokens, warps) for block_tokens, warps in itertools.product((32, 64, 128), (4, 8))
]
SPLITS = (1, 2, 4, 8, 16)


def label(tiles: triton_ops.AttentionTiles, splits: int) -> str:
    return f"(BT {tiles.block_tokens}, warps {tiles.warps}, splits {splits})"


def sweep_batch(rows: int, context: int) -> dict:
    """Every (tiles, splits) at one batch size; prints and returns the shipped and fastest."""
    pages_per_row = -(-context // PAGE)
    pages = rows * pages_per_row
    caches = [
        (torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16),
         torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16))
        for _ in range(LAYERS)
    ]  # fmt: skip
    table = torch.randperm(pages, device="cuda", dtype=torch.int32).view(rows, pages_per_row)
    ctx = torch.full((rows,), context, device="cuda", dtype=torch.int32)
    q = torch.randn(rows, HQ, D, device="cuda", dtype=torch.bfloat16)
    scale = D**-0.5
    ref = torch_ops.paged_attention(q, *caches[0], table, ctx, scale).float()
    kv_bytes = LAYERS * rows * context * HKV * D * 2 * 2

    def walk(tiles, splits):
        def call():
            for k, v in caches:
                triton_ops.paged_attention(q, k, v, table, ctx, scale, splits=splits, tiles=tiles)

        return call

    timed = {}
    for tiles, splits in itertools.product(TILES, SPLITS):
        out = triton_ops.paged_attention(q, *caches[0], table, ctx, scale, splits=splits, tiles=tiles).float()
        assert (out - ref).abs().max() <= 2e-2, label(tiles, splits)
        timed[(tiles, splits)] = replay_ms(walk(tiles, splits))
    shipped = (triton_ops.attention_tiles(rows), triton_ops.attention_splits(rows, HKV))
    best = min(timed, key=timed.get)

    def cell(ms: float) -> str:
        return f"{ms:6.3f} ms ({kv_bytes / (ms * 1e-3) / 1e12:4.2f} TB/s)"

    print(f"batch {rows:>4}, {context}-token contexts, {LAYERS} layers: shipped {cell(timed[shipped])} "
          f"{label(*shipped)}; best {cell(timed[best])} {label(*best)}", flush=True)  # fmt: skip
    return {"rows": rows, "context": context, "shipped_ms": timed[shipped], "shipped": label(*shipped),
            "best_ms": timed[best], "best": label(*best), "kv_bytes": kv_bytes,
            "all": {label(*key): ms for key, ms in timed.items()}}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 128, 256], help="decode rows to time")
    p.add_argument("--context", type=int, default=500, help="tokens of context per row")
    p.add_argument("--json", help="write every timing here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("paged_attention.py needs a CUDA device")
    torch.manual_seed(0)
    results = []
    for rows in args.batches:
        results.append(sweep_batch(rows, args.context))
        torch.cuda.empty_cache()  # the batch's 28 layer caches are gone; give their memory back
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
