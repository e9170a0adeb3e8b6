"""Does the KV pool's layout limit the talker's decode attention? (perf-notes #90)

The engine's pool is [pages, page_size, kv_heads, head_dim]: one kv head's 16 tokens of a page are
16 rows of 256 bytes, 2 KB apart, so a 64-token block is 64 scattered 256-byte reads. Laid out
[pages, kv_heads, page_size, head_dim], the same block is four contiguous 4 KB runs. Without
changing the kernel, this times both: the shipped layout at `rows` rows and 8 kv heads, and the
head-major one as rows x 8 "rows" of one kv head each (2 query heads), whose pages are the pool's
(page, kv head) runs, through a block table of page * 8 + kv head. The same programs, bytes and
arithmetic, only the addresses differ. Each timed as one walk's 28 layers on their own caches
(from HBM), in one CUDA graph, plain attention kernel (no PDL), the tiles and splits the engine
gives `rows` rows (the head-major runs take the same, not those of rows x 8).

    python benchmarks/kv_layout.py [--batches 64 256] [--context 514] [--json out.json]

On the H200 (perf-notes #90) the layouts ran alike at b64 (40.0 us a layer) and head-major 3 %
slower at b256, so the engine keeps its layout. GPU only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from graph_timing import replay_ms
from paged_attention import HKV, HQ, LAYERS, PAGE, D  # the talker's shapes, as the attention sweep times them

from cadence.kernels import triton_ops


def layouts(rows: int, context: int) -> dict[str, tuple]:
    """Each layout's 28 layers of caches, queries, table and lengths: the head-major caches are the
    shipped ones' values moved (so both give the same output; checked before timing)."""
    pages_per_row = -(-context // PAGE)
    pages = rows * pages_per_row
    table = torch.arange(pages, device="cuda").view(rows, pages_per_row)  # consecutive, as a fresh engine's
    caches = [
        (torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16),
         torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16))
        for _ in range(LAYERS)
    ]  # fmt: skip
    q = torch.randn(rows, HQ, D, device="cuda", dtype=torch.bfloat16)
    # row n's kv head h is virtual row n * HKV + h, with its query heads; its page p is the pool's run p * HKV + h
    runs = [tuple(c.permute(0, 2, 1, 3).reshape(pages * HKV, PAGE, 1, D).contiguous() for c in kv) for kv in caches]
    run_table = (table[:, None, :] * HKV + torch.arange(HKV, device="cuda")[None, :, None]).reshape(rows * HKV, -1)
    q_runs = q.reshape(rows * HKV, HQ // HKV, D)

    def lengths(n: int) -> torch.Tensor:
        return torch.full((n,), context, device="cuda", dtype=torch.int64)

    return {"shipped": (caches, q, table, lengths(rows)), "head-major": (runs, q_runs, run_table, lengths(rows * HKV))}


def attend_all(rows: int, caches, q, table, ctx) -> torch.Tensor:
    """The 28 layers' attention with the tiles and splits the engine gives `rows` rows; the last output."""
    tiles, splits = triton_ops.attention_tiles(rows), triton_ops.attention_splits(rows, HKV)
    for k, v in caches:
        out = triton_ops.paged_attention(q, k, v, table, ctx, D**-0.5, splits, tiles=tiles)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[64, 256], help="decode rows to time")
    p.add_argument("--context", type=int, default=514, help="tokens of context per row (the b64 walk's: 514)")
    p.add_argument("--rounds", type=int, default=3, help="times each layout is timed, alternating")
    p.add_argument("--json", help="write the timings here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("kv_layout.py needs a CUDA device")
    torch.manual_seed(0)
    results = []
    for rows in args.batches:
        kv_bytes = LAYERS * rows * args.context * HKV * D * 2 * 2
        inputs = layouts(rows, args.context)
        shipped = attend_all(rows, *inputs["shipped"])
        moved = attend_all(rows, *inputs["head-major"]).view(rows, HQ * D)
        diff = (shipped.float() - moved.float()).abs().max().item()
        print(f"batch {rows:>4}: the layouts' outputs differ by at most {diff:.3g} (0: the same bits)")
        assert diff <= 2e-2, "the head-major layout must give the same output"
        for r in range(args.rounds):
            for name, args_ in inputs.items():
                ms = replay_ms(lambda rows=rows, args_=args_: attend_all(rows, *args_))
                print(f"batch {rows:>4} round {r + 1} {name:>10}: {ms:.3f} ms, {ms / LAYERS * 1e3:6.1f} us a layer, "
                      f"{kv_bytes / (ms * 1e-3) / 1e12:.2f} TB/s", flush=True)  # fmt: skip
                results.append({"rows": rows, "round": r + 1, "layout": name, "ms": ms, "kv_bytes": kv_bytes})
        del inputs
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
