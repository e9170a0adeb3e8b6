"""benchmarks/triton_ptxas.py compiles Triton kernels for Hopper without a GPU: what it reports must be
the kernel the JIT launches (its hints), and what it reads from the SASS must say what perf-notes #141
relies on, that the norm's weight load sits before its PDL wait only where W_EARLY puts it.
Where Triton is installed (not CI's CPU machine; the compiles need no GPU)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

pytest.importorskip("triton")

import triton_ptxas  # noqa: E402

from cadence.kernels import triton_launch, triton_ops  # noqa: E402


def _norm_loads(multiples_of_16: tuple[str, ...]) -> set[str]:
    types = dict(triton_ptxas.NORM_TYPES, x_ptr="*bf16")
    consts = dict(HAS_RES=True, PARTS=0, BLOCK=1024, USE_PDL=triton_launch.PDL_TRIGGER_FIRST)
    kernel, _ = triton_ptxas.compile_with_ptxas(
        triton_ops._rms_norm_kernel, types, consts, 4, 90, multiples_of_16=multiples_of_16
    )
    return set(re.findall(r"LDG\.E[.\w]*", triton_ptxas.sass(kernel)))


def test_an_integer_given_the_jits_hint_compiles_to_the_launched_vector_loads():
    """n_cols = 1024 at every launch: the JIT hints its divisibility by 16, so the masked loads are
    16-byte vectors; compiled without the hint they are 2-byte loads (session 43's misleading SASS)."""
    assert _norm_loads(("n_cols", "part_stride")) == {"LDG.E.128"}
    assert "LDG.E.U16" in _norm_loads(())


@pytest.mark.parametrize("parts", [0, 4])
def test_the_norms_weight_is_loaded_before_the_pdl_wait_only_with_w_early(parts: int):
    warps = triton_ops.PARTS_NORM_WARPS if parts else 4
    early = triton_ptxas.norm_report(parts, warps, 90, W_EARLY=True)
    late = triton_ptxas.norm_report(parts, warps, 90, W_EARLY=False)
    assert "1 global load(s) before the wait" in early
    assert "0 global load(s) before the wait" in late
    registers = [int(re.match(r"(\d+) registers", report).group(1)) for report in (early, late)]
    assert all(0 < r <= 64 for r in registers)  # a norm CTA stays small beside the GEMMs (#134)


def _linear_report(n: int, k: int, hinted: bool) -> str:
    from cadence.kernels import triton_linear

    tiles = triton_linear.skinny_tiles(n, k, 64)
    consts = triton_ptxas.linear_constexprs(k, tiles, swiglu=False, reduce=tiles.split_k == 1)
    hints = triton_ptxas.linear_hints(64, n, k) if hinted else ()
    return triton_ptxas.ptxas_report(triton_linear._skinny_linear_kernel, triton_ptxas.LINEAR_TYPES, consts,
                                     tiles.warps, 90, tiles.stages, hints)  # fmt: skip


def test_the_64_row_tiles_as_launched_take_no_spills_and_fill_shared_memory():
    """Session 45: compiled with the JIT's hints on M, N and x's row stride (all multiples of 16 at
    64 rows), qkv's 64-row tiles take ~120 registers and no spills; without them, 255 and spills
    (#111's and #134's reports). What keeps the next GEMM off an SM is then its shared memory
    (4 stages of a 64 x 256 x tile and a 32 x 256 weight tile: 192 KB)."""
    hinted, bare = _linear_report(4096, 1024, True), _linear_report(4096, 1024, False)
    registers = [int(re.search(r"Used (\d+) registers", r).group(1)) for r in (hinted, bare)]
    assert registers[0] < 160 < registers[1] and "0 bytes spill stores" in hinted
    assert "196,608 bytes of shared memory" in hinted


def _norm_linear_build() -> tuple[object, str]:
    """triton_norm_linear's kernel (#144) as the walk would launch it after down (4 fp32 partials, the
    64-row qkv tiles, PDL, a KV prefetch), and ptxas's report."""
    from cadence.kernels import triton_linear, triton_norm_linear

    tiles = triton_linear.skinny_tiles(4096, 1024, 64)
    types = {"parts_ptr": "*fp32", "res_ptr": "*bf16", "nw_ptr": "*bf16", "h_ptr": "*bf16", "sum_ptr": "*bf16",
             "sync_ptr": "*i32", "w_ptr": "*bf16", "out_ptr": "*bf16", "M": "i32", "N": "i32", "part_stride": "i32",
             "eps": "fp32", "kc_ptr": "*bf16", "vc_ptr": "*bf16", "bt_ptr": "*i32", "ctx_ptr": "*i64",
             "bt_stride": "i32", "num_pages": "i32"}  # fmt: skip
    consts = dict(K=1024, PARTS=4, BLOCK_M=64, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, NORM_BLOCK=1024,
                  USE_PDL=True, KV_TOKENS=16, KV_SLOTS=128, PS=16, TOKEN_ELEMS=1024)  # fmt: skip
    fn, hints = triton_norm_linear._norm_linear_kernel, ("M", "N", "part_stride")
    return triton_ptxas.compile_with_ptxas(fn, types, consts, tiles.warps, 90, tiles.stages, multiples_of_16=hints)


def test_qkv_with_the_norm_inside_compiles_without_spills():
    """No spills, and no more shared memory than qkv's own tiles."""
    kernel, stderr = _norm_linear_build()
    assert "0 bytes spill stores" in stderr and kernel.metadata.shared == 196_608


def test_qkv_with_the_norm_inside_fences_only_where_it_publishes_a_row():
    """The claims, tickets and the exit count are relaxed atomics: an acq_rel one is a MEMBAR.ALL.GPU
    that waits for the program's loads in flight (the row's, issued before its claim) or its output's
    stores. The only fences are the release adds that publish a row (the own row's and a ticket's)."""
    kernel, _ = _norm_linear_build()
    code = [line for line in triton_ptxas.sass(kernel).splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
    assert sum("MEMBAR.ALL.GPU" in line for line in code) == sum("REDG" in line for line in code) == 2
    first_claim = next(i for i, line in enumerate(code) if "ATOMG.E.EXCH" in line)
    assert sum("LDG.E.128" in line for line in code[:first_claim]) >= 5  # 4 partials and the residual
