"""Registers and spills of Triton kernels compiled for a GPU this machine need not have.

Triton compiles for any CUDA target without a device (`triton.compile` with a `GPUTarget`), and
its bundled ptxas reports each kernel's registers and local-memory spills. A CPU-only session can
so see whether a kernel change adds spills before any device time is spent on it (perf-notes #58:
the decode attention's first fused design spilled 6 KB a thread at 128-token blocks).

    python benchmarks/triton_ptxas.py            # paged attention, the GEMM's tiles, the sampler, the norm
    python benchmarks/triton_ptxas.py --arch 90 --warps 4 8

Compile with the GPU machine's Triton (3.6 there), not only this machine's: a sampler written with
a [16, vocab] comparison compiled here under 3.9 without spills, and under 3.6 to 32 registers and
11.5 KB of local memory a thread, taking ~80 s, and hung the GPU (perf-notes #68); and 3.9 compiles
the norm's sum of squares with one CTA barrier where 3.6 has two. A venv of it:

    python3 -m venv /tmp/t36 && /tmp/t36/bin/pip install triton==3.6.0 torch==2.13.0
    PYTHONPATH=$PWD /tmp/t36/bin/python benchmarks/triton_ptxas.py

`sass(kernel)` disassembles a compiled kernel (Triton's bundled cuobjdump), e.g. to see which loads a
kernel issues before its PDL wait (griddepcontrol.wait: ACQBULK in Hopper's SASS).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from cadence.kernels import triton_attention, triton_launch, triton_linear, triton_ops, triton_sampler

# The argument types the kernels are launched with (bf16 activations and cache).
ATTENTION_TYPES = {
    "q_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16", "bt_ptr": "*i32", "ctx_ptr": "*i64", "m_ptr": "*fp32",
    "l_ptr": "*fp32", "acc_ptr": "*fp32", "o_ptr": "*bf16", "scale": "fp32", "bt_stride": "i32", "num_pages": "i32",
    "qn_ptr": "*bf16", "kn_ptr": "*bf16", "cos_ptr": "*bf16", "sin_ptr": "*bf16", "pos_ptr": "*i64",
    "slot_ptr": "*i64", "eps": "fp32", "stamp_ptr": "*i64", "stamp_row": "i32",
}  # fmt: skip
LINEAR_TYPES = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "part_ptr": "*fp32", "count_ptr": "*i32",
                "stamp_ptr": "*i64", "stamp_row": "i32", "M": "i32", "N": "i32", "stride_xm": "i32"}  # fmt: skip


def linear_hints(rows: int, n: int, k: int) -> tuple[str, ...]:
    """The GEMM's integer arguments that the JIT hints as multiples of 16 at a launch of `rows` rows of
    an [n, k] weight (x's row stride is k). Without the hint x's loads compile scalar: the 64-row tiles
    then report 255 registers and spills, where the kernel that runs takes ~110-130 and none (session 45)."""
    return tuple(name for name, value in (("M", rows), ("N", n), ("stride_xm", k)) if value % 16 == 0)


def linear_constexprs(k: int, tiles, swiglu: bool, reduce: bool, stamp: bool = False) -> dict[str, object]:
    """The weight-streaming GEMM's compile-time arguments for `tiles` as the walk launches it (K, a
    positional argument of the launch, and PDL on)."""
    return dict(K=k, **tiles.constexprs(k, swiglu, reduce), USE_PDL=True, STAMP=stamp)


def ptxas_report(
    fn,
    types: dict[str, str],
    constexprs: dict[str, object],
    warps: int,
    arch: int,
    stages: int = 3,
    multiples_of_16: tuple[str, ...] = (),
) -> str:
    """Compile `fn` (a @triton.jit function) for sm_{arch}a and return ptxas's register/spill line,
    and the shared memory a CTA takes."""
    kernel, stderr = compile_with_ptxas(fn, types, constexprs, warps, arch, stages, multiples_of_16=multiples_of_16)
    lines = [line.split("info    : ")[-1].strip() for line in stderr.splitlines()]
    report = "; ".join(line for line in lines if "registers" in line or "spill" in line)
    # A software-pipelined loop's wait: num = 0 means no copy stays in flight while a step computes
    waits = re.findall(r"ttg.async_wait[^{]*\{num = (\d+)", kernel.asm["ttgir"])
    report += f"; {kernel.metadata.shared:,} bytes of shared memory"
    return report + (f"; async_wait num {', '.join(waits)}" if waits else "")


def compile_with_ptxas(
    fn,
    types: dict[str, str],
    constexprs: dict[str, object],
    warps: int,
    arch: int,
    stages: int = 3,
    max_registers: int = 0,
    multiples_of_16: tuple[str, ...] = (),
) -> tuple[object, str]:
    """`fn` (a @triton.jit function) compiled for sm_{arch}a (a thread's registers capped at
    `max_registers` where it is set: Triton's maxnreg), and ptxas -v's report of its PTX.

    multiples_of_16: the integer arguments whose launch values are multiples of 16 (a row length of
    1024, a stride). The JIT gives such a value the same divisibility hint as an aligned pointer;
    without it a mask built from the integer may keep Triton from vectorising the loads it guards,
    and the kernel compiled here is not the one that runs (the norm: four 2-byte loads a thread and
    five barriers instead of one 8-byte load and two; session 43)."""
    names = fn.arg_names
    # An argument with a default that is not named here (a compile-time one, or one given no type,
    # such as the norm's stamp pointer) takes that default as a constant, as at a launch that leaves it
    # out (so a switch or an optional argument added to a kernel later does not break these compiles).
    defaults = {p.name: p.default for p in fn.params if p.has_default and (p.is_constexpr or p.name not in types)}
    constexprs = {**defaults, **constexprs}
    signature = {n: "constexpr" if n in constexprs else types[n] for n in names}
    # The hint the JIT gives every 16-byte-aligned tensor argument at launch: without it Triton may
    # not prove a load's alignment and compiles it scalar (the decode attention's K/V loads did,
    # reporting other registers than the kernel that runs; perf-notes #88).
    pointers = [n for n in names if n not in constexprs and types[n].startswith("*")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in (*pointers, *multiples_of_16)}
    src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(k),): v for k, v in constexprs.items()},
                    attrs=attrs)  # fmt: skip
    options = {"num_warps": warps, "num_stages": stages, **({"maxnreg": max_registers} if max_registers else {})}
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    ptxas = _ptxas(arch)
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "k.ptx")
        with open(ptx, "w") as f:
            f.write(kernel.asm["ptx"])
        run = subprocess.run([ptxas, "-v", f"--gpu-name=sm_{arch}a", ptx, "-o", ptx + ".cubin"],
                             capture_output=True, text=True, check=True)  # fmt: skip
    return kernel, run.stderr


def _ptxas(arch: int) -> str:
    """The ptxas Triton itself runs for sm_{arch}, whose PTX version it emits (3.6: the CUDA 12.8 one
    for sm_90; 3.9: the CUDA 13 one it names ptxas-blackwell; the other rejects that PTX)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(arch).path


def sass(kernel) -> str:
    """The SASS of a kernel `compile_with_ptxas` returned (Triton's bundled cuobjdump on its cubin)."""
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(kernel.asm["cubin"])
        return subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-sass", cubin], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip


# The norm's argument types as the walk launches it after o or down (their split-K partials in fp32).
NORM_TYPES = {"x_ptr": "*fp32", "res_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "sum_ptr": "*bf16",
              "n_cols": "i32", "part_stride": "i32", "eps": "fp32"}  # fmt: skip


def norm_report(parts: int, warps: int, arch: int, **constexprs) -> str:
    """The RMSNorm (+ residual) kernel for a 1024-wide row as the walk launches it (PDL trigger first,
    the JIT's hints on n_cols and part_stride): registers, barriers, and where the weight's load sits
    against the PDL wait (griddepcontrol.wait, ACQBULK in the SASS)."""
    types = dict(NORM_TYPES, x_ptr="*fp32" if parts else "*bf16")
    consts = dict(HAS_RES=True, PARTS=parts, BLOCK=1024, USE_PDL=triton_launch.PDL_TRIGGER_FIRST, **constexprs)
    kernel, stderr = compile_with_ptxas(triton_ops._rms_norm_kernel, types, consts, warps, arch,
                                        multiples_of_16=("n_cols", "part_stride"))  # fmt: skip
    registers = re.search(r"Used (\d+) registers", stderr).group(1)
    code = [line for line in sass(kernel).splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
    wait = next(i for i, line in enumerate(code) if "ACQBULK" in line)
    barriers = sum("BAR.SYNC" in line for line in code)
    loads_ahead = sum("LDG" in line for line in code[:wait])
    return f"{registers} registers, {barriers} barriers, {loads_ahead} global load(s) before the wait"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (default 90: Hopper)")
    ap.add_argument("--warps", type=int, nargs="+", default=[4], help="num_warps to compile with (default 4)")
    args = ap.parse_args()
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    ptr, types = "*bf16", ATTENTION_TYPES
    # Another Triton version (the GPU machine's) may allocate differently: read it as a warning sign.
    print(f"Triton {triton.__version__}, sm_{args.arch}a; paged attention, GQA 16/8 x 128, bf16 cache, 16-token pages")
    for warps in args.warps:
        for fused in (False, True):
            # batch 1 talker, code predictor, batch 8-256 talker (pipelined loop), deeper pipelines (#88)
            for splits, block, stages in ((16, 64, 0), (1, 32, 0), (1, 128, 0), (1, 64, 2), (1, 64, 3), (1, 32, 4)):
                consts = dict(HQ=16, HKV=8, D=128, PS=16, G=2, G_PAD=16, BT=block, SPLITS=splits, IEEE=False,
                              FUSED=fused, STAGES=stages, PREFETCH=False, USE_PDL=True, STAMP=False)  # fmt: skip
                report = ptxas_report(triton_attention._paged_attention_kernel, types, consts, warps, args.arch)
                print(f"  {'fused' if fused else 'plain'} splits {splits:>2} block {block:>3} stages {stages} "
                      f"warps {warps}: {report}")  # fmt: skip
    linear_types = LINEAR_TYPES
    print("weight-streaming GEMM (skinny_tiles) on the 0.6B's decode shapes, bf16")
    for rows in (16, 32, 64):
        for n, k, swiglu in ((4096, 1024, False), (1024, 2048, False), (6144, 1024, True), (1024, 3072, False),
                             (3072, 1024, False), (2048, 1024, False)):  # fmt: skip
            tiles = triton_linear.swiglu_tiles(n, k, rows) if swiglu else triton_linear.skinny_tiles(n, k, rows)
            if tiles is None:
                print(f"  rows {rows:>2} {n:>4}x{k:<4}: cuBLAS")
                continue
            consts = linear_constexprs(k, tiles, swiglu, reduce=True)
            report = ptxas_report(triton_linear._skinny_linear_kernel, linear_types, consts, tiles.warps, args.arch,
                                  tiles.stages, linear_hints(rows, n, k))  # fmt: skip
            print(f"  rows {rows:>2} {n:>4}x{k:<4}{' swiglu' if swiglu else ''} {tiles}: {report}")
    sample_types = {n: "*fp32" for n in triton_sampler._sample_kernel.arg_names if n.endswith("_ptr")}
    sample_types.update(logits_ptr=ptr, rows_ptr="*i64", seen_ptr="*i1", ban_ptr="*i1", do_ptr="*i1",
                        topk_ptr="*i64", seed_ptr="*i64", frame_ptr="*i64", out_ptr="*i64", table_ptr=ptr,
                        emb_ptr=ptr)  # fmt: skip
    sample_types.update({n: "i32" for n in ("V", "eos_id", "suppress_start", "eos_min_frames", "codebook_key",
                                            "out_stride", "emb_stride", "H")})  # fmt: skip
    print("sampler (sample_tokens), the code predictor's 2048 codes and the talker's 3072, with the embedding")
    for v, first in ((2048, False), (3072, True)):
        for ways in (2, 4, 5):
            consts = dict(HAS_ROWS=True, HAS_SEEN=first, MARK_SEEN=first, HAS_BAN=first, HAS_EMBED=True,
                          BLOCK=triton.next_power_of_2(v),
                          BLOCK_H=1024, TOPK_WAYS=ways, TOPK_PASSES=triton_sampler.topk_search_passes(ways),
                          USE_PDL=True)  # fmt: skip
            for warps in args.warps:
                report = ptxas_report(triton_sampler._sample_kernel, sample_types, consts, warps, args.arch)
                print(f"  {v} codes, {ways:>2} ways, warps {warps}: {report}")
    print("RMSNorm (+ residual), 1024 wide, as the walk launches it (after o or down: their 4 split-K partials)")
    for parts, warps in ((0, 4), (4, triton_ops.PARTS_NORM_WARPS)):
        for early in (False, True):
            report = norm_report(parts, warps, args.arch, W_EARLY=early)
            print(f"  parts {parts} warps {warps} W_EARLY {int(early)}: {report}")


if __name__ == "__main__":
    main()
