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
