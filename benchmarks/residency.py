"""Which of the b64 decode walk's kernels can sit on an SM beside the one before them (perf-notes #134).

Under programmatic dependent launch in trigger-first order (33-64 rows) each kernel launches once
every CTA of the kernel before it has started, and its CTAs then wait on the SMs for that kernel to
end. A CTA that cannot fit beside the running kernel's starts only as that kernel ends, and so does
every kernel behind it: the slab GEMM's weight copy before its wait, or the Triton tiles' prefetch,
then overlaps nothing. Session 38's stamps (#129-#133) show the GEMM after each norm (gate/up, qkv)
starting that late whatever the shared memory of the GEMM before the norm (#132), so this counts
all four limits of an SM: 64 K registers (allocated in 256-register units a warp), 228 KB of shared
memory (1 KB more a CTA for the system), 2,048 threads, 32 CTAs.

Each kernel is compiled for sm_90 here, without a GPU: the Triton ones by `triton.compile` with
its bundled ptxas (benchmarks/triton_ptxas.py; compile with the GPU machine's Triton, 3.6, as its
docstring says), the CUDA ones by nvcc from the served plans' text. Prints each kernel's cost a
CTA, then, for each step of a talker and a code-predictor layer, whether one CTA of the next kernel
(and of the one after it) fits beside the CTAs an SM holds of the running one.

    PYTHONPATH=$PWD /tmp/t36/bin/python benchmarks/residency.py [--sms 132] [--rows 64]

CADENCE_GEMM64_TILES applies, so that a tile override (a register cap: `NxK=BN:BK:WARPS:STAGES:SPLIT:MAXNREG`)
can be checked here before it is walked.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from cadence.kernels.nvrtc import kernel_text

# An SM of compute capability 9.0
SM_REGISTERS, SM_SHARED, SM_THREADS, SM_CTAS = 65536, 228 * 1024, 2048, 32
CTA_RESERVED_SHARED = 1024  # shared memory the system keeps a CTA
REGISTER_UNIT = 256  # registers are allocated a warp at a time, in units of this many


@dataclass(frozen=True)
class KernelCost:
    """What one CTA of a kernel takes of an SM, and the kernel's grid."""

    name: str
    grid: int
    threads: int
    registers: int  # a thread
    shared: int  # bytes a CTA, static and dynamic

    @property
    def cta_registers(self) -> int:
        per_warp = -(-self.registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
        return self.threads // 32 * per_warp

    @property
    def cta_shared(self) -> int:
        return self.shared + CTA_RESERVED_SHARED


def limits_exceeded(ctas: list[tuple[KernelCost, int]]) -> list[str]:
    """The SM limits that these CTAs (kernel, how many) together exceed; empty if they fit."""
    totals = {
        "registers": (sum(k.cta_registers * n for k, n in ctas), SM_REGISTERS),
        "shared memory": (sum(k.cta_shared * n for k, n in ctas), SM_SHARED),
        "threads": (sum(k.threads * n for k, n in ctas), SM_THREADS),
        "CTAs": (sum(n for _, n in ctas), SM_CTAS),
    }
    return [f"{name} {used:,} > {limit:,}" for name, (used, limit) in totals.items() if used > limit]


def resident(kernel: KernelCost, sms: int) -> int:
    """CTAs an SM holds of `kernel` while it runs alone: its grid over the SMs, as far as they fit."""
    count = -(-kernel.grid // sms)
    while count > 1 and limits_exceeded([(kernel, count)]):
        count -= 1
    return count


def triton_cost(
    name: str,
    grid: int,
    fn,
    types: dict,
    constexprs: dict,
    warps: int,
    stages: int,
    max_registers: int = 0,
    multiples_of_16: tuple[str, ...] = (),
) -> KernelCost:
    from triton_ptxas import compile_with_ptxas  # here: the arithmetic above needs no Triton (its tests)

    kernel, report = compile_with_ptxas(fn, types, constexprs, warps, 90, stages, max_registers, multiples_of_16)
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    return KernelCost(name, grid, 32 * warps, registers, kernel.metadata.shared)


def cuda_cost(name: str, grid: int, source: Path, defines, threads: int, dynamic_shared: int) -> KernelCost:
    with tempfile.TemporaryDirectory() as tmp:
        unit = Path(tmp) / source.name
        unit.write_text(kernel_text(source, defines))
        cmd = ["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-I", str(source.parent), "-o",
               str(Path(tmp) / "k.cubin"), str(unit)]  # fmt: skip
        report = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    static = re.search(r"(\d+) bytes smem", report)
    return KernelCost(name, grid, threads, registers, dynamic_shared + (int(static.group(1)) if static else 0))


def linear_cost(name: str, n: int, k: int, rows: int, stamped: bool) -> KernelCost:
    """The 64-row Triton tiles of an [n, k] weight (skinny_tiles, with CADENCE_GEMM64_TILES' overrides),
    as the walk launches them: split-K ones store partials for the norm (no ticket)."""
    import triton
    from triton_ptxas import LINEAR_TYPES, linear_constexprs, linear_hints

    from cadence.kernels import triton_linear

    tiles = triton_linear.skinny_tiles(n, k, rows)
    consts = linear_constexprs(k, tiles, swiglu=False, reduce=tiles.split_k == 1, stamp=stamped)
    grid = triton.cdiv(n, tiles.block_n) * tiles.split_k
    return triton_cost(name, grid, triton_linear._skinny_linear_kernel, LINEAR_TYPES, consts, tiles.warps,
                       tiles.stages, tiles.max_registers, multiples_of_16=linear_hints(rows, n, k))  # fmt: skip


def walk_kernels(rows: int, sms: int, stamped: bool = False, kv_prefetch: int = 0) -> dict[str, KernelCost]:
    """The kernels of a b64 talker and code-predictor layer (0.6B shapes), compiled for sm_90;
    `stamped`: the builds `walk_timeline.py --stamps` runs (the norm as without --stamp-norms); `kv_prefetch`:
    the norm pulling that many cached tokens a row into L2 (CADENCE_KV_PREFETCH, perf-notes #135)."""
    from triton_ptxas import ATTENTION_TYPES

    from cadence.kernels import cuda_attention, cuda_gemm64, triton_attention, triton_ops

    norm_types = {"x_ptr": "*fp32", "res_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "sum_ptr": "*bf16",
                  "n_cols": "i32", "part_stride": "i32", "eps": "fp32", "kc_ptr": "*bf16", "vc_ptr": "*bf16",
                  "bt_ptr": "*i64", "ctx_ptr": "*i64", "bt_stride": "i32", "num_pages": "i32"}  # fmt: skip
    norm_consts = dict(HAS_RES=True, PARTS=4, BLOCK=1024, USE_PDL=True, KV_TOKENS=kv_prefetch, PS=16,
                       KV_SLOTS=32 * triton_ops.PARTS_NORM_WARPS, TOKEN_ELEMS=8 * 128)  # fmt: skip
    tiles = triton_attention.attention_tiles(rows)
    attention_consts = dict(HQ=16, HKV=8, D=128, PS=16, G=2, G_PAD=16, BT=tiles.block_tokens, SPLITS=1, IEEE=False,
                            FUSED=True, STAGES=tiles.stages, PREFETCH=tiles.prefetch, USE_PDL=True,
                            STAMP=stamped)  # fmt: skip
    gate_up = cuda_gemm64.gemm64_plan(3072, 1024, rows, swiglu=True, ctas=sms)
    cp_attention = cuda_attention.attention_plan(rows, 16, 8, 128, 16, torch.bfloat16)
    # the walk's order at 33-64 rows: the next kernel launches at each one's start
    gate_up = dataclasses.replace(gate_up, trigger_first=True, stamp=stamped)
    cp_attention = dataclasses.replace(cp_attention, trigger_first=True, stamp=stamped)
    kernels = [
        triton_cost("norm (o's or down's partials)", rows, triton_ops._rms_norm_kernel, norm_types, norm_consts,
                    triton_ops.PARTS_NORM_WARPS, 1, multiples_of_16=("n_cols", "part_stride")),
        linear_cost("qkv 4096x1024", 4096, 1024, rows, stamped),
        triton_cost("talker attention", rows * 8, triton_attention._paged_attention_kernel, ATTENTION_TYPES,
                    attention_consts, tiles.warps, max(tiles.stages, 1)),
        cuda_cost("code predictor attention", cp_attention.grid(rows), cuda_attention.SOURCE,
                  cp_attention.defines, cp_attention.threads, cp_attention.smem),
        linear_cost("o 1024x2048", 1024, 2048, rows, stamped),
        cuda_cost("gate/up slab 6144x1024", gate_up.grid, cuda_gemm64.SOURCE, gate_up.defines, gate_up.threads,
                  gate_up.smem),
        linear_cost("down 1024x3072", 1024, 3072, rows, stamped),
    ]  # fmt: skip
    return {k.name: k for k in kernels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sms", type=int, default=132, help="SMs of the GPU (an H200: 132)")
    ap.add_argument("--rows", type=int, default=64, help="decode rows (33-64: the trigger-first walk)")
    ap.add_argument("--stamped", action="store_true", help="the clock-stamped builds (walk_timeline.py --stamps)")
    ap.add_argument(
        "--kv-prefetch",
        type=int,
        default=0,
        metavar="TOKENS",
        help="the norms pulling each row's first TOKENS cached tokens into L2 (CADENCE_KV_PREFETCH)",
    )
    args = ap.parse_args()
    if shutil.which("nvcc") is None:
        raise SystemExit("residency.py needs nvcc (the CUDA toolkit) for the CUDA kernels")
    kernels = walk_kernels(args.rows, args.sms, args.stamped, args.kv_prefetch)
    import triton

    print(f"Triton {triton.__version__}, sm_90, {args.rows} rows, {args.sms} SMs; a CTA of each kernel takes:")
    print(f"{'kernel':<32} {'grid':>5} {'threads':>7} {'regs':>5} {'regs/CTA':>9} {'shared/CTA':>11} {'CTAs/SM':>8}")
    for k in kernels.values():
        print(f"{k.name:<32} {k.grid:>5} {k.threads:>7} {k.registers:>5} {k.cta_registers:>9,} {k.cta_shared:>11,} "
              f"{resident(k, args.sms):>8}")  # fmt: skip
    norm = "norm (o's or down's partials)"
    layers = {
        "talker layer": ["qkv 4096x1024", "talker attention", "o 1024x2048", norm, "gate/up slab 6144x1024",
                         "down 1024x3072", norm, "qkv 4096x1024"],
        "code predictor layer": ["qkv 4096x1024", "code predictor attention", "o 1024x2048", norm,
                                 "gate/up slab 6144x1024", "down 1024x3072", norm, "qkv 4096x1024"],
    }  # fmt: skip
    for layer, chain in layers.items():
        print(f"\n{layer}: while a kernel runs (its CTAs an SM), does a CTA of the next kernel fit beside them,")
        print("and then a CTA of the one after it?")
        for running, after, after_next in zip(chain[:-1], chain[1:], chain[2:] + [None], strict=True):
            a = kernels[running]
            on_sm = [(a, resident(a, args.sms))]
            first = limits_exceeded(on_sm + [(kernels[after], 1)])
            line = (
                f"  {running:<30} x{on_sm[0][1]} + {after}: {'fits' if not first else 'NO (' + ', '.join(first) + ')'}"
            )
            if after_next and not first:
                second = limits_exceeded(on_sm + [(kernels[after], 1), (kernels[after_next], 1)])
                line += f"; + {after_next}: {'fits' if not second else 'NO (' + ', '.join(second) + ')'}"
            print(line)


if __name__ == "__main__":
    main()
