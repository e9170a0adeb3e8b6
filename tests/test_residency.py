"""benchmarks/residency.py's arithmetic of an SM's limits (perf-notes #134): what a CTA takes and which
kernels' CTAs fit on one SM together. The compiles themselves need Triton and nvcc (the script)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from residency import KernelCost, limits_exceeded, resident  # noqa: E402

# session 38's sm_90 compiles (Triton 3.6, nvcc): the 64-row Triton tile, the norm, the slab gate/up
O_TILE = KernelCost("o", 128, 128, 255, 81920)
NORM = KernelCost("norm", 64, 256, 32, 2048)
GATE_UP = KernelCost("gate/up", 132, 256, 140, 101392)


def test_a_ctas_registers_are_allocated_a_warp_at_a_time():
    assert O_TILE.cta_registers == 4 * 8192  # 255 a thread: 8,160 a warp, allocated as 8,192
    assert GATE_UP.cta_registers == 8 * 4608 and NORM.cta_registers == 8192
    assert O_TILE.cta_shared == 81920 + 1024  # and the system's 1 KB a CTA


def test_the_limits_an_sms_ctas_exceed_are_named():
    assert limits_exceeded([(O_TILE, 1), (NORM, 1)]) == []
    over = limits_exceeded([(O_TILE, 1), (NORM, 1), (GATE_UP, 1)])
    assert over == ["registers 77,824 > 65,536"]
    capped = KernelCost("o", 128, 128, 160, 81920)  # CADENCE_GEMM64_TILES' register cap
    assert limits_exceeded([(capped, 1), (NORM, 1), (GATE_UP, 1)]) == []
    assert limits_exceeded([(KernelCost("big", 1, 64, 32, 120_000), 2)]) == ["shared memory 242,048 > 233,472"]
    assert limits_exceeded([(KernelCost("tiny", 1, 32, 16, 0), 33)]) == ["CTAs 33 > 32"]


def test_resident_ctas_are_the_grid_over_the_sms_as_far_as_they_fit():
    attention = KernelCost("attention", 512, 128, 118, 38912)
    assert resident(attention, 132) == 4
    assert resident(O_TILE, 132) == 1
    wide = KernelCost("wide", 512, 128, 255, 81920)  # 4 an SM by the grid, 2 by registers and memory
    assert resident(wide, 132) == 2


def test_the_walks_kernels_compile_for_hopper():
    """walk_kernels compiles every kernel it weighs (Triton's with its bundled ptxas, the CUDA ones
    with nvcc), plain and stamped, with and without the norms' KV prefetch: an argument added to a
    kernel (the norm's stamps, its prefetch) must not break the script before a session that needs
    it. Where Triton and nvcc are installed (not CI's CPU machine)."""
    import shutil

    import pytest

    pytest.importorskip("triton")
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc (the CUDA toolkit)")
    from residency import walk_kernels

    for stamped, kv_prefetch in ((False, 0), (True, 0), (False, 128)):
        kernels = walk_kernels(64, 132, stamped, kv_prefetch)
        norm = kernels["norm (o's or down's partials)"]
        assert (norm.grid, norm.threads) == (64, 256) and 0 < norm.registers <= 255
        assert all(k.registers > 0 for k in kernels.values())
