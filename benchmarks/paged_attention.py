"""Launch-choice sweep of the paged decode attention (`triton_ops.paged_attention`) on the talker's
shapes (16 query / 8 kv heads x 128, 16-token pages, bf16) at decode batch sizes: tokens per
iteration, warps and the block loop's pipelining depth (`AttentionTiles`), and context splits.
With --fused it times the decode kernel the walk runs up to 64 rows (`qk_norm_rope_attention`: the
rows' QK-norm, RoPE and cache write too).

Each configuration is timed as one decode walk's attention: 28 calls, one per layer, each over its
own layer's cache (so the KV comes from HBM, not L2, as in the engine), captured in one CUDA graph.

    python benchmarks/paged_attention.py [--batches 1 64 256] [--context 500] [--fused [--chain]]
        [--layers] [--contiguous] [--stages 0 2] [--splits 1 2 4 8 16] [--cuda 2 3 4] [--json out.json]

--contiguous gives each row consecutive pages (as a fresh engine does) instead of scattered ones;
--chain puts each layer's decode kernel behind the GEMM making its qkv rows, launched as the engine
launches them (PDL, trigger first above 32 rows), and takes the GEMMs' own time off (perf-notes #73:
the talker's attention takes 61 us a layer in the b64 walk, 38-45 alone). --layers puts it inside
its whole decoder layer as `FusedStack` runs one (qkv GEMM, attention, o GEMM + norm, gate/up with
SwiGLU, down GEMM + norm; random weights of the talker's shapes) and takes off the same chain with
the attention left out (perf-notes #79: is the walk's ~55-61 us the layer's own chain?).

The sweep is of the Triton kernel (the CUDA one is kept out of it); --cuda (with --fused) also times
the CUDA decode kernel (kernels/cuda/decode_attention.cu, perf-notes #104) with those pages in
flight a CTA, checked against the definition as every configuration is.

Prints, per batch: the shipped choice (`attention_tiles` and `attention_splits`), the fastest
found, in ms per walk and the KV-read bandwidth they reach. GPU only.
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
from cadence.models.qwen3_tts.fused_stack import FusedLayer

LAYERS, HQ, HKV, D, PAGE = 28, 16, 8, 128, 16
HIDDEN, INTERMEDIATE, EPS = 1024, 3072, 1e-6  # the talker's
torch_ops, triton_ops = load_ops("torch"), load_ops("triton")


def label(tiles: AttentionTiles, splits: int) -> str:
    return f"(BT {tiles.block_tokens}, warps {tiles.warps}, stages {tiles.stages}, splits {splits})"


def decode_inputs(rows: int, context: int):
    """The fused kernel's extra inputs: each row's qkv, norms, RoPE tables, and its new token at
    position context - 1 in a cache slot of its own last page."""
    from cadence.models.qwen3_tts.layers import rope_cos_sin

    qkv = torch.randn(rows, (HQ + 2 * HKV) * D, device="cuda", dtype=torch.bfloat16)
    qn, kn = (1 + 0.1 * torch.randn(2, D, device="cuda")).to(torch.bfloat16)
    cos, sin = rope_cos_sin(torch.arange(context, device="cuda"), D, 1e6, torch.bfloat16)
    pos = torch.full((rows,), context - 1, device="cuda")
    return qkv, (qn, kn, 1e-6, cos, sin, pos)


def pdl_as_engine(rows: int):
    """Kernels launched as the engine launches a graph of `rows` rows: with programmatic dependent
    launch, triggering first above 32 rows."""
    return triton_ops.pdl_settings(True, triton_ops.trigger_first_for(rows))


def random_layer(
    hidden: int = HIDDEN, intermediate: int = INTERMEDIATE, heads: int = HQ, kv_heads: int = HKV, head_dim: int = D
) -> FusedLayer:
    """One decoder layer's weights in the fused layout, random, of the talker's shapes by default."""

    def w(n: int, k: int) -> torch.Tensor:
        return torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5

    def norm() -> torch.Tensor:
        return (1 + 0.1 * torch.randn(hidden, device="cuda")).to(torch.bfloat16)

    qn, kn = (1 + 0.1 * torch.randn(2, head_dim, device="cuda")).to(torch.bfloat16)
    return FusedLayer(ln1=norm(), wqkv=w((heads + 2 * kv_heads) * head_dim, hidden), q_norm=qn, k_norm=kn,
                      wo=w(hidden, heads * head_dim),
                      ln2=norm(), wgu=w(2 * intermediate, hidden), wdown=w(hidden, intermediate))  # fmt: skip


def decoder_layers(x: torch.Tensor, layers: list[FusedLayer], final_norm: torch.Tensor, eps: float, attend):
    """`layers` run over rows x as FusedStack's decode runs them (qkv GEMM, attention, o GEMM + norm,
    gate/up with SwiGLU, down GEMM + the next norm), each layer's attention output attend(i, its qkv
    rows): here, where the attention is left out, as FusedStack cannot."""
    h, residual = triton_ops.rms_norm(x, layers[0].ln1, eps)
    for i, L in enumerate(layers):
        a = attend(i, triton_ops.linear(h, L.wqkv))
        h, residual = triton_ops.linear_rms_norm(a, L.wo, L.ln2, eps, residual)
        after = layers[i + 1].ln1 if i + 1 < len(layers) else final_norm
        h, residual = triton_ops.linear_rms_norm(triton_ops.linear_swiglu(h, L.wgu), L.wdown, after, eps, residual)
    return h


def sweep_batch(
    rows: int, context: int, fused: bool, stages: list[int], splits_list: list[int], contiguous: bool, chain: bool,
    layers: bool = False, cuda_stages: tuple[int, ...] = (),
) -> dict:  # fmt: skip
    """Every (tiles, splits) at one batch size; prints and returns the shipped and fastest."""
    pages_per_row = -(-context // PAGE)
    pages = rows * pages_per_row
    caches = [
        (torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16),
         torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16))
        for _ in range(LAYERS)
    ]  # fmt: skip
    # the engine's allocator hands a fresh stream consecutive pages; scattered pages are the worst case
    order = torch.arange(pages, device="cuda") if contiguous else torch.randperm(pages, device="cuda")
    # int64 table and lengths, as the engine passes them (its state's `longs`): with int32 ones this
    # benchmark timed the pipelined loop 35 % faster than the walk ran it (perf-notes #83, #84)
    table = order.view(rows, pages_per_row)
    ctx = torch.full((rows,), context, device="cuda", dtype=torch.int64)
    q = torch.randn(rows, HQ, D, device="cuda", dtype=torch.bfloat16)
    qkv, norm_rope = decode_inputs(rows, context)
    slots = table[:, (context - 1) // PAGE] * PAGE + (context - 1) % PAGE
    scale = D**-0.5

    def attend(ops, k, v, splits=None, tiles=None, rows_qkv=qkv):
        if isinstance(ops, cuda_attention.AttentionPlan):  # the CUDA kernel with this plan
            return cuda_attention.cuda_qk_norm_rope_attention(rows_qkv, *norm_rope, k, v, slots, table, ctx, scale, HQ,
                                                              HKV, ops)  # fmt: skip
        if fused:
            return ops.qk_norm_rope_attention(rows_qkv, *norm_rope, k, v, slots, table, ctx, scale, HQ, HKV, splits,
                                              **({"tiles": tiles} if tiles else {}))  # fmt: skip
        return ops.paged_attention(q, k, v, table, ctx, scale, splits, **({"tiles": tiles} if tiles else {}))

    ref = attend(torch_ops, *caches[0]).float()
    kv_bytes = LAYERS * rows * context * HKV * D * 2 * 2
    # --chain: each layer's attention behind the GEMM that makes its qkv rows, launched as the engine
    # launches them (PDL); the GEMMs alone are timed too, so the attention's share is the difference
    x = torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16)
    w_qkv = [
        torch.randn(qkv.shape[1], 1024, device="cuda", dtype=torch.bfloat16) / 32 for _ in range(LAYERS if chain else 0)
    ]
    # --layers: each attention inside its decoder layer as FusedStack runs it; without the attention
    # the same chain (the o GEMM reads a fixed tensor), whose time is taken off
    stack = [random_layer() for _ in range(LAYERS if layers else 0)]
    no_attention = torch.randn(rows, HQ * D, device="cuda", dtype=torch.bfloat16)

    def in_layers(tiles=None, splits=None, with_attention=True):
        def attention(i, rows_qkv):
            return attend(triton_ops, *caches[i], splits, tiles, rows_qkv) if with_attention else no_attention

        # the first layer's input norm closes the stack, as random layers have no final norm
        return decoder_layers(x, stack, stack[0].ln1, EPS, attention)

    def walk(tiles, splits, ops=triton_ops):
        def call():
            if layers:
                return in_layers(tiles, splits)
            for i, (k, v) in enumerate(caches):
                attend(ops, k, v, splits, tiles, triton_ops.linear(x, w_qkv[i]) if chain else qkv)

        return call

    def timed_ms(call) -> float:
        if not (chain or layers):
            return replay_ms(call)
        with pdl_as_engine(rows):
            return replay_ms(call)

    if layers:
        gemms_ms = timed_ms(lambda: in_layers(with_attention=False))
    else:
        gemms_ms = timed_ms(lambda: [triton_ops.linear(x, w) for w in w_qkv]) if chain else 0.0

    grid = [
        AttentionTiles(block_tokens, warps, stage)
        for block_tokens, warps, stage in itertools.product((32, 64, 128), (4, 8), stages)
    ]  # fmt: skip
    timed = {}
    # the Triton kernel's sweep: without max_context the dispatcher leaves every call to it
    for tiles, splits in itertools.product(grid, splits_list):
        try:
            out = attend(triton_ops, *caches[0], splits, tiles).float()
        except triton.runtime.errors.OutOfResources as e:  # deep pipelines of long blocks outgrow shared memory
            print(f"  {label(tiles, splits)}: skipped ({e})")
            continue
        assert (out - ref).abs().max() <= 2e-2, label(tiles, splits)
        timed[(tiles, splits)] = timed_ms(walk(tiles, splits)) - gemms_ms
    shipped = (triton_ops.attention_tiles(rows), triton_ops.attention_splits(rows, HKV))
    if shipped not in timed:
        timed[shipped] = timed_ms(walk(*shipped)) - gemms_ms
    best = min(timed, key=timed.get)
    cuda_ms = {}
    for stages in cuda_stages if fused and not layers else ():
        plan = cuda_attention.attention_plan(rows, HQ, HKV, D, PAGE, torch.bfloat16, min_rows=1)
        plan = dataclasses.replace(plan, stages=stages)
        assert (attend(plan, *caches[0]).float() - ref).abs().max() <= 2e-2, f"cuda stages {stages}"
        cuda_ms[stages] = timed_ms(walk(None, None, plan)) - gemms_ms

    def cell(ms: float) -> str:
        return f"{ms:6.3f} ms ({kv_bytes / (ms * 1e-3) / 1e12:4.2f} TB/s)"

    kind = ("fused decode kernel" if fused else "attention") + (
        ", behind the qkv GEMMs (their time taken off)" if chain else ""
    )
    kind += f", inside its decoder layers (the layers without it, {gemms_ms:.3f} ms, taken off)" if layers else ""
    kind += ", each row's pages consecutive" if contiguous else ""
    print(f"batch {rows:>4}, {context}-token contexts, {LAYERS} layers, {kind}: shipped {cell(timed[shipped])} "
          f"{label(*shipped)}; best {cell(timed[best])} {label(*best)}", flush=True)  # fmt: skip
    for stages, ms in cuda_ms.items():
        print(f"  CUDA kernel, {stages} pages in flight a CTA: {cell(ms)}", flush=True)
    return {"rows": rows, "context": context, "fused": fused, "contiguous": contiguous, "chain": chain,
            "layers": layers, "gemms_ms": gemms_ms, "shipped_ms": timed[shipped], "shipped": label(*shipped),
            "best_ms": timed[best], "best": label(*best), "kv_bytes": kv_bytes,
            "all": {label(*key): ms for key, ms in timed.items()}, "cuda": cuda_ms}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 128, 256], help="decode rows to time")
    p.add_argument("--context", type=int, default=500, help="tokens of context per row")
    p.add_argument("--fused", action="store_true", help="time the decode kernel with QK-norm, RoPE and cache write")
    p.add_argument("--stages", type=int, nargs="+", default=[0, 2], help="block-loop pipelining depths (0: plain)")
    p.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="context splits to try")
    p.add_argument("--contiguous", action="store_true", help="each row's pages consecutive (a fresh engine's layout)")
    p.add_argument("--chain", action="store_true", help="each attention behind its qkv GEMM under PDL (needs --fused)")
    p.add_argument("--layers", action="store_true", help="each attention inside its decoder layer (needs --fused)")
    p.add_argument("--cuda", type=int, nargs="*", default=[], help="time the CUDA kernel too, these pages in flight")
    p.add_argument("--json", help="write every timing here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("paged_attention.py needs a CUDA device")
    if args.chain and not args.fused:
        raise SystemExit("--chain times the decode kernel behind its qkv GEMM: add --fused")
    if args.layers and (args.chain or not args.fused):
        raise SystemExit("--layers times the decode kernel inside its decoder layers: add --fused, drop --chain")
    torch.manual_seed(0)
    results = []
    for rows in args.batches:
        flags = (args.fused, args.stages, args.splits, args.contiguous, args.chain, args.layers, tuple(args.cuda))
        results.append(sweep_batch(rows, args.context, *flags))
        torch.cuda.empty_cache()  # the batch's 28 layer caches are gone; give their memory back
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
