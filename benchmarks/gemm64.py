"""The 33-64-row slab GEMM (`cuda_gemm64`, perf-notes #115) alone against the route it would replace
(the Triton 64-row tiles, or cuBLAS and silu_mul for gate/up), on the 0.6B's K = 1024 GEMMs.

Each variant is timed as 50 calls inside one CUDA graph launched with programmatic dependent launch
in the walk's order at these rows (triton_launch.trigger_first_for), each call on its own copy of
the weight so that it comes from HBM as in a walk. Two chains: the GEMMs back to back (`alone`), and
each after an RMSNorm kernel that writes its input (`after norm`: the walk's order for qkv and
gate/up, where the kernel before is short and the slab copy's head start is what that kernel
takes). The slab GEMM also without PDL (its copy then starts at its launch, after the kernel before).

    python benchmarks/gemm64.py [--rows 48 64] [--json out.json]

Prints us per call (per norm + GEMM pair for `after norm`) and the walk's mix (calls a b64 walk
makes: qkv and gate/up 103, heads 15, codec head 1). GPU only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch
from graph_timing import replay_ms

from cadence.kernels import cuda_gemm64, triton_ops
from cadence.kernels.triton_launch import pdl_settings, trigger_first_for

# (name, N, K, SwiGLU, calls in a b64 walk)
SHAPES = [
    ("qkv", 4096, 1024, False, 103),
    ("gate_up", 3072, 1024, True, 103),
    ("heads", 2048, 1024, False, 15),
    ("codec_head", 3072, 1024, False, 1),
]
CALLS = 50


def shipped(x: torch.Tensor, w: torch.Tensor, swiglu: bool) -> torch.Tensor:
    """What the walk runs at these rows without the switch."""
    return triton_ops.linear_swiglu(x, w) if swiglu else triton_ops.linear(x, w)


def time_shape(name: str, n: int, k: int, swiglu: bool, rows: int, variants: list[list[int]]) -> dict:
    """One GEMM's timings at `rows` rows, us a call (a norm + GEMM pair for the *_norm ones): the
    shipped route, and the slab GEMM at each (K steps in flight, CTAs an SM) variant."""
    w = torch.randn((2 if swiglu else 1) * n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    weights = [w] + [w.clone() for _ in range(CALLS - 1)]
    x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    norm_w = torch.ones(k, device="cuda", dtype=torch.bfloat16)
    want = shipped(x, w, swiglu).float()

    def chain(plan, after_norm: bool):
        # Under PDL each kernel waits for the one before it in the stream, whatever it reads.
        def run():
            for i in range(CALLS):
                inp = triton_ops.rms_norm(x, norm_w, 1e-6)[0] if after_norm else x
                cuda_gemm64.gemm64_linear(inp, weights[i], plan) if plan else shipped(inp, weights[i], swiglu)

        return lambda: replay_ms(run) * 1e3 / CALLS

    row = {"rows": rows, "gemm": name, "n": n, "k": k, "variants": []}
    with pdl_settings(True, trigger_first_for(rows)):
        row["shipped_us"], row["shipped_norm_us"] = chain(None, False)(), chain(None, True)()
    for batch, min_blocks, ablate, padded, ctas in variants:
        plan = cuda_gemm64.gemm64_plan(n, k, rows, swiglu, ctas)
        plan = dataclasses.replace(plan, batch=batch, min_blocks=min_blocks, ablate=ablate, padded=bool(padded))
        got = cuda_gemm64.gemm64_linear(x, w, plan).float()
        assert ablate or (got - want).abs().max() <= 2e-2 * want.abs().max(), (name, batch, min_blocks)
        regs, spills = cuda_gemm64.registers(plan)
        v = {"batch": plan.steps_in_flight, "min_blocks": min_blocks, "ablate": ablate, "padded": padded,
             "ctas": ctas, "registers": regs, "spill_bytes": spills}  # fmt: skip
        with pdl_settings(True, trigger_first_for(rows)):
            v["us"], v["norm_us"] = chain(plan, False)(), chain(plan, True)()
        with pdl_settings(False, False):
            v["nopdl_us"] = chain(plan, False)()
        row["variants"].append(v)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[48, 64], help="activation rows (33-64)")
    p.add_argument(
        "--variants", nargs="+", default=["4:1:0:1:128", "2:2:0:1:128", "2:2", "2:2:1", "2:2:2", "2:2:0:0"],
        help="the slab GEMM's variants, BATCH:MIN_BLOCKS:ABLATE:PADDED:CTAS (K steps a warp's loads cover at "
        "once : CTAs an SM : 1 leaves the input's loads out, 2 the slab's copy, 3 the K shares' sums, wrong "
        "results timing the rest : "
        "0 the slab as one copy, rows unpadded : CTAs a GEMM); parts left off on the right take cuda_gemm64's "
        "defaults (its switches, no ablation, the SMs)",
    )  # fmt: skip
    p.add_argument("--json", help="write every timing here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gemm64.py needs a CUDA device")
    ctas = cuda_gemm64.ctas_for(torch.device("cuda", 0))
    defaults = [cuda_gemm64.BATCH, cuda_gemm64.MIN_BLOCKS, 0, int(cuda_gemm64.PADDED), ctas]
    variants = [[int(v) for v in spec.split(":")] + defaults[len(spec.split(":")) :] for spec in args.variants]
    cuda_gemm64.ENABLED = False  # `shipped`: the Triton / cuBLAS route (the switch off; gate/up is on it by default)
    torch.manual_seed(0)
    results = []
    for rows in args.rows:
        print(f"\nrows={rows}: us a call alone / a norm + GEMM pair / alone without PDL; registers, spill bytes")
        walk = {"shipped": 0.0}
        for name, n, k, swiglu, count in SHAPES:
            row = time_shape(name, n, k, swiglu, rows, variants)
            print(f"{name:<11} {n:>5} shipped {row['shipped_us']:>6.2f} / {row['shipped_norm_us']:>6.2f}")
            walk["shipped"] += count * row["shipped_norm_us"]
            for v in row["variants"]:
                key = f"{v['batch']}:{v['min_blocks']}:{v['ablate']}:{v['padded']}:{v['ctas']}"
                print(f"{'':<17} slab64 {key} {v['us']:>6.2f} / {v['norm_us']:>6.2f} / {v['nopdl_us']:>6.2f}"
                      f"  {v['registers']} regs, {v['spill_bytes']} B spilled")  # fmt: skip
                walk[key] = walk.get(key, 0.0) + count * v["norm_us"]
            results.append(row)
        mix = ", ".join(f"{key} {us / 1e3:.3f}" for key, us in walk.items())
        print(f"a b64 walk's norm + GEMM pairs at {rows} rows, ms: {mix}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
