"""Tile sweep of the paged decode attention (`TritonOps.paged_attention`) on the talker's shapes
(16 query / 8 kv heads x 128, 16-token pages, bf16) at decode batch sizes: tokens per iteration,
warps and the block loop's pipelining depth (`AttentionTiles`), and context splits. With --fused it
times the decode kernel the decode step runs up to 64 rows (`qk_norm_rope_attention`: the rows'
QK-norm, RoPE and cache write too). The attention tile tables are read from its output.

Each configuration is timed as one decode step's attention: 28 calls, one per layer, each over its
own layer's cache (so the KV comes from HBM, not L2, as in the engine), captured in one CUDA graph,
and checked against the PyTorch definition.

    python benchmarks/paged_attention.py [--batches 1 64 256] [--context 500] [--fused] [--contiguous]
        [--stages 0 2] [--splits 1 2 4 8 16] [--cuda 2 3 4] [--json out.json]

--contiguous gives each row consecutive pages (as a fresh engine does) instead of scattered ones.
The sweep is of the Triton kernel; --cuda (with --fused) also times the CUDA decode kernel
(kernels/attention/cuda/decode_attention.cu) with those pages in flight a CTA.

Prints, per batch: the shipped choice (`attention_tiles` and `attention_splits`) and the fastest
found, in ms per step and the KV-read bandwidth they reach. GPU only.
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

from cadence.kernels.attention import cuda_decode_attention as cuda_attention
from cadence.kernels.attention.triton_paged_attention import AttentionTiles
from cadence.kernels.ops import load_ops

LAYERS, HQ, HKV, D, PAGE = 28, 16, 8, 128, 16
torch_ops, triton_ops = load_ops("torch"), load_ops("triton")


def label(tiles: AttentionTiles, splits: int) -> str:
    return f"(BT {tiles.block_tokens}, warps {tiles.warps}, stages {tiles.stages}, splits {splits})"


@dataclasses.dataclass
class DecodeBatch:
    """One batch's attention inputs: every layer's cache, the page table and lengths (int64, as the
    engine passes them), the rows' queries, and for the fused kernel their qkv rows, norms and RoPE
    tables, each row's new token at position context - 1 in a cache slot of its own last page."""

    rows: int
    caches: list[tuple[torch.Tensor, torch.Tensor]]
    table: torch.Tensor
    lengths: torch.Tensor
    q: torch.Tensor
    qkv: torch.Tensor
    norm_rope: tuple
    slots: torch.Tensor

    @classmethod
    def random(cls, rows: int, context: int, contiguous: bool) -> DecodeBatch:
        from cadence.models.qwen3_tts.layers import rope_cos_sin

        pages_per_row = -(-context // PAGE)
        pages = rows * pages_per_row

        def cache() -> torch.Tensor:
            return torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16)

        caches = [(cache(), cache()) for _ in range(LAYERS)]
        # the engine's allocator hands a fresh stream consecutive pages; scattered pages are the worst case
        order = torch.arange(pages, device="cuda") if contiguous else torch.randperm(pages, device="cuda")
        table = order.view(rows, pages_per_row)
        qn, kn = (1 + 0.1 * torch.randn(2, D, device="cuda")).to(torch.bfloat16)
        cos, sin = rope_cos_sin(torch.arange(context, device="cuda"), D, 1e6, torch.bfloat16)
        pos = torch.full((rows,), context - 1, device="cuda")
        return cls(
            rows=rows,
            caches=caches,
            table=table,
            lengths=torch.full((rows,), context, device="cuda", dtype=torch.int64),
            q=torch.randn(rows, HQ, D, device="cuda", dtype=torch.bfloat16),
            qkv=torch.randn(rows, (HQ + 2 * HKV) * D, device="cuda", dtype=torch.bfloat16),
            norm_rope=(qn, kn, 1e-6, cos, sin, pos),
            slots=table[:, (context - 1) // PAGE] * PAGE + (context - 1) % PAGE,
        )

    def attend(self, ops, layer: int, fused: bool, splits: int | None = None, tiles=None) -> torch.Tensor:
        """One layer's attention by `ops` (an Ops backend, or a CUDA AttentionPlan)."""
        k, v = self.caches[layer]
        common = (self.slots, self.table, self.lengths, D**-0.5, HQ, HKV)
        if isinstance(ops, cuda_attention.AttentionPlan):
            return cuda_attention.cuda_qk_norm_rope_attention(self.qkv, *self.norm_rope, k, v, *common, ops)
        extra = {"tiles": tiles} if tiles else {}
        if fused:
            return ops.qk_norm_rope_attention(self.qkv, *self.norm_rope, k, v, *common, splits, **extra)
        return ops.paged_attention(self.q, k, v, self.table, self.lengths, D**-0.5, splits, **extra)

    def step_ms(self, ops, fused: bool, splits: int | None = None, tiles=None) -> float:
        """One decode step's attention, every layer, replayed from a CUDA graph."""
        return replay_ms(lambda: [self.attend(ops, i, fused, splits, tiles) for i in range(LAYERS)])


def sweep_triton(batch: DecodeBatch, fused: bool, stages: list[int], splits_list: list[int]) -> dict:
    """{(tiles, splits): ms} over the grid, each configuration checked against the definition first;
    without max_context the dispatcher leaves every call to the Triton kernel."""
    ref = batch.attend(torch_ops, 0, fused).float()
    grid = [
        AttentionTiles(block_tokens, warps, stage)
        for block_tokens, warps, stage in itertools.product((32, 64, 128), (4, 8), stages)
    ]  # fmt: skip
    timed = {}
    for tiles, splits in itertools.product(grid, splits_list):
        try:
            out = batch.attend(triton_ops, 0, fused, splits, tiles).float()
        except triton.runtime.errors.OutOfResources as e:  # deep pipelines of long blocks outgrow shared memory
            print(f"  {label(tiles, splits)}: skipped ({e})")
            continue
        assert (out - ref).abs().max() <= 2e-2, label(tiles, splits)
        timed[(tiles, splits)] = batch.step_ms(triton_ops, fused, splits, tiles)
    return timed


def sweep_cuda(batch: DecodeBatch, cuda_stages: tuple[int, ...]) -> dict[int, float]:
    """{pages in flight a CTA: ms} of the CUDA decode kernel, each checked against the definition."""
    ref = batch.attend(torch_ops, 0, True).float()
    timed = {}
    for stages in cuda_stages:
        plan = cuda_attention.attention_plan(batch.rows, HQ, HKV, D, PAGE, torch.bfloat16, min_rows=1)
        plan = dataclasses.replace(plan, stages=stages)
        assert (batch.attend(plan, 0, True).float() - ref).abs().max() <= 2e-2, f"cuda stages {stages}"
        timed[stages] = batch.step_ms(plan, True)
    return timed


def sweep_batch(
    rows: int, context: int, fused: bool, stages: list[int], splits_list: list[int], contiguous: bool,
    cuda_stages: tuple[int, ...] = (),
) -> dict:  # fmt: skip
    """Every (tiles, splits) at one batch size; prints and returns the shipped and fastest."""
    batch = DecodeBatch.random(rows, context, contiguous)
    timed = sweep_triton(batch, fused, stages, splits_list)
    shipped = (triton_ops.attention_tiles(rows), triton_ops.attention_splits(rows, HKV))
    if shipped not in timed:
        timed[shipped] = batch.step_ms(triton_ops, fused, shipped[1], shipped[0])
    best = min(timed, key=timed.get)
    cuda_ms = sweep_cuda(batch, cuda_stages) if fused else {}
    kv_bytes = LAYERS * rows * context * HKV * D * 2 * 2

    def cell(ms: float) -> str:
        return f"{ms:6.3f} ms ({kv_bytes / (ms * 1e-3) / 1e12:4.2f} TB/s)"

    kind = ("fused decode kernel" if fused else "attention") + (", each row's pages consecutive" if contiguous else "")
    print(f"batch {rows:>4}, {context}-token contexts, {LAYERS} layers, {kind}: shipped {cell(timed[shipped])} "
          f"{label(*shipped)}; best {cell(timed[best])} {label(*best)}", flush=True)  # fmt: skip
    for stages, ms in cuda_ms.items():
        print(f"  CUDA kernel, {stages} pages in flight a CTA: {cell(ms)}", flush=True)
    return {"rows": rows, "context": context, "fused": fused, "contiguous": contiguous,
            "shipped_ms": timed[shipped], "shipped": label(*shipped), "best_ms": timed[best], "best": label(*best),
            "kv_bytes": kv_bytes, "all": {label(*key): ms for key, ms in timed.items()}, "cuda": cuda_ms}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 128, 256], help="decode rows to time")
    p.add_argument("--context", type=int, default=500, help="tokens of context per row")
    p.add_argument("--fused", action="store_true", help="time the decode kernel with QK-norm, RoPE and cache write")
    p.add_argument("--stages", type=int, nargs="+", default=[0, 2], help="block-loop pipelining depths (0: plain)")
    p.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="context splits to try")
    p.add_argument("--contiguous", action="store_true", help="each row's pages consecutive (a fresh engine's layout)")
    p.add_argument("--cuda", type=int, nargs="*", default=[], help="time the CUDA kernel too, these pages in flight")
    p.add_argument("--json", help="write every timing here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("paged_attention.py needs a CUDA device")
    torch.manual_seed(0)
    results = []
    for rows in args.batches:
        flags = (args.fused, args.stages, args.splits, args.contiguous, tuple(args.cuda))
        results.append(sweep_batch(rows, args.context, *flags))
        torch.cuda.empty_cache()  # the batch's 28 layer caches are gone; give their memory back
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
