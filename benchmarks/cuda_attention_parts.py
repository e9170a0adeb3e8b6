"""Where the CUDA decode attention's time goes over long contexts (perf-notes #105): the kernel of
kernels/cuda/decode_attention.cu at 64 rows of 500-token contexts, 28 layers each over its own cache
(HBM, as in the walk), one CUDA graph, against the Triton decode kernel the talker runs.

Each variant is a set of AttentionPlan fields (heads_per_cta, stages, warps_per_head, ablate),
launched through cuda_qk_norm_rope_attention without PDL. `ablate` 1 leaves the pages' arithmetic out
(the copies, waits and barriers alone), 2 the copies (the arithmetic over whatever is in shared
memory). Ablated outputs are garbage and are not checked; the others are checked against the
definition (torch_ops).

    python benchmarks/cuda_attention_parts.py [--rows 64] [--context 500] \
        [--variants "heads_per_cta=4,stages=4" "heads_per_cta=4,stages=4,ablate=1" ...] [--json out.json]

Prints ms per 28 layers and the KV-read bandwidth each reaches. GPU only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import torch
from graph_timing import replay_ms
from paged_attention import HKV, HQ, LAYERS, PAGE, D, decode_inputs

from cadence.kernels import cuda_attention, torch_ops, triton_ops

DEFAULT_VARIANTS = [
    "heads_per_cta=4,stages=4",
    "heads_per_cta=4,stages=4,ablate=1",
    "heads_per_cta=4,stages=4,ablate=2",
    "heads_per_cta=2,stages=4",
    "heads_per_cta=1,stages=4",
    "heads_per_cta=1,stages=4,ablate=1",
    "heads_per_cta=1,stages=4,ablate=2",
]


def parse_variant(text: str) -> dict[str, int]:
    """'heads_per_cta=4,stages=4,ablate=1' -> AttentionPlan fields."""
    fields = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=")
        fields[key.strip()] = int(value)
    return fields


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--context", type=int, default=500)
    p.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, help="AttentionPlan fields, ablate=1|2")
    p.add_argument("--json", help="write the timings here")
    args = p.parse_args()
    rows, context = args.rows, args.context

    pages_per_row = -(-context // PAGE)
    pages = rows * pages_per_row
    caches = [tuple(torch.randn(pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
              for _ in range(LAYERS)]  # fmt: skip
    table = torch.randperm(pages, device="cuda").view(rows, pages_per_row)  # scattered pages, int64 as the engine's
    ctx = torch.full((rows,), context, device="cuda", dtype=torch.int64)
    qkv, norm_rope = decode_inputs(rows, context)
    slots = table[:, (context - 1) // PAGE] * PAGE + (context - 1) % PAGE
    scale = D**-0.5
    kv_bytes = LAYERS * rows * context * HKV * D * 2 * 2
    ref = torch_ops.qk_norm_rope_attention(qkv, *norm_rope, *caches[0], slots, table, ctx, scale, HQ, HKV).float()

    def cell(ms: float) -> str:
        return f"{ms:6.3f} ms ({kv_bytes / (ms * 1e-3) / 1e12:4.2f} TB/s)"

    results = {}
    cuda_attention.CONTEXTS = "none"
    triton_ms = replay_ms(lambda: [triton_ops.qk_norm_rope_attention(qkv, *norm_rope, k, v, slots, table, ctx, scale,
                                                                     HQ, HKV) for k, v in caches])  # fmt: skip
    results["triton"] = triton_ms
    print(f"{rows} rows, {context}-token contexts, {LAYERS} layers: Triton {cell(triton_ms)}", flush=True)
    base = cuda_attention.attention_plan(rows, HQ, HKV, D, PAGE, torch.bfloat16, min_rows=1)
    for text in args.variants:
        plan = dataclasses.replace(base, **parse_variant(text))

        def call(k, v, plan=plan):
            return cuda_attention.cuda_qk_norm_rope_attention(qkv, *norm_rope, k, v, slots, table, ctx, scale, HQ, HKV,
                                                              plan)  # fmt: skip

        with triton_ops.pdl_settings(False, False):  # each layer's kernel after the last, as sweeps time them
            if not plan.ablate:
                err = (call(*caches[0]).float() - ref).abs().max().item()
                assert err <= 2e-2, f"{text}: max error {err}"
            ms = replay_ms(lambda call=call: [call(k, v) for k, v in caches])
        results[text] = ms
        print(f"  CUDA {text:<40} {cell(ms)}  ({plan.grid(rows)} CTAs of {plan.threads} threads, "
              f"{plan.smem // 1024} KB)", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "context": context, "kv_bytes": kv_bytes, "ms": results}, f, indent=1)


if __name__ == "__main__":
    main()
