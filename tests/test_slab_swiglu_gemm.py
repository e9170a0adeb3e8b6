"""The slab SwiGLU GEMM (kernels/linear/cuda/slab_swiglu_gemm.cu, 33-64 rows: weights copied into
shared memory before the PDL wait, 64 input rows read from L2 into the tensor cores' registers)
against its PyTorch definition: its source run on the CPU emulation for small shapes, the kernel
itself on a Hopper GPU ("gpu" marker) for the 0.6B's, and the routing and plans everywhere.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch
from cuda_driver import blob, emulate, needs_gxx
from kernel_checks import Switched, assert_pdl_graph_replays_eager
from test_slab_gemm import _reference as slab_reference

from cadence.kernels.linear import cuda_slab_swiglu_gemm
from cadence.kernels.linear.cuda_slab_swiglu_gemm import SMEM_LIMIT, SlabSwigluPlan, slab_swiglu_gemm, slab_swiglu_plan
from cadence.kernels.ops import load_ops

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
needs_hopper = pytest.mark.skipif(not HOPPER, reason="needs a GPU of compute capability >= 9")


def test_plans_cover_the_06b_gemms_with_k_1024():
    """qkv, gate/up (SwiGLU: 24 gate and 24 up rows a CTA), the code predictor's heads and the codec
    head have plans at 64 rows in 132 CTAs (an H200's SMs) under the shared-memory limit; o and down (K 2048, 3072:
    every CTA would read 256-384 KB of input from L2) do not."""
    plans = {
        "qkv": slab_swiglu_plan(4096, 1024, 64),
        "gate_up": slab_swiglu_plan(3072, 1024, 64, swiglu=True),
        "heads": slab_swiglu_plan(2048, 1024, 64),
        "codec_head": slab_swiglu_plan(3072, 1024, 64),
    }
    for plan in plans.values():
        assert plan is not None and plan.grid == 132 and plan.smem <= SMEM_LIMIT
    assert [p.rows_per_cta for p in plans.values()] == [32, 24, 16, 24]
    # the slab with its padded rows, or the sums if larger, and the mbarrier
    assert plans["qkv"].smem == 32 * (1024 + 32) * 2 + 16
    assert plans["gate_up"].smem == 2 * 24 * (1024 + 32) * 2 + 16
    assert slab_swiglu_plan(1024, 2048, 64) is None and slab_swiglu_plan(1024, 3072, 64) is None
    assert slab_swiglu_plan(4096, 1024, 65) is None and slab_swiglu_plan(4096, 1000, 64) is None


def test_route_takes_the_swiglu_gemm_at_33_to_64_bf16_rows_on_hopper(monkeypatch):
    """The MLP's gate/up with SwiGLU (the slab SwiGLU GEMM): bf16 rows of 33-64 on a Hopper GPU; not on the
    CPU, not at other row counts or in fp32."""
    x, gate_up = torch.zeros(64, 1024, dtype=torch.bfloat16), torch.zeros(6144, 1024, dtype=torch.bfloat16)
    assert cuda_slab_swiglu_gemm.slab_swiglu_route(x, gate_up) is None  # on the CPU
    monkeypatch.setattr(cuda_slab_swiglu_gemm, "slab_swiglu_supported", lambda device: True)
    monkeypatch.setattr(cuda_slab_swiglu_gemm, "ctas_for", lambda device: 132)
    fake_cuda = type("X", (), {"shape": x.shape, "dtype": x.dtype, "device": torch.device("cuda", 0)})()
    assert cuda_slab_swiglu_gemm.slab_swiglu_route(fake_cuda, gate_up) == slab_swiglu_plan(3072, 1024, 64, swiglu=True)
    for rows in (32, 65):
        short = type("X", (), {"shape": (rows, 1024), "dtype": x.dtype, "device": fake_cuda.device})()
        assert cuda_slab_swiglu_gemm.slab_swiglu_route(short, gate_up) is None
    fp32 = type("X", (), {"shape": x.shape, "dtype": torch.float32, "device": fake_cuda.device})()
    assert cuda_slab_swiglu_gemm.slab_swiglu_route(fp32, gate_up.float()) is None


def test_slab_swiglu_gemm_linear_refuses_what_does_not_fit_its_plan():
    w = torch.zeros(4096, 1024, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="do not fit"):
        slab_swiglu_gemm(torch.zeros(48, 1024, dtype=torch.bfloat16), w, slab_swiglu_plan(4096, 1024, 64))
    with pytest.raises(ValueError, match="contiguous"):
        slab_swiglu_gemm(torch.zeros(64, 1024, dtype=torch.bfloat16), w.t().contiguous().t(),
                                  slab_swiglu_plan(4096, 1024, 64))  # fmt: skip


def _reference(x: torch.Tensor, w: torch.Tensor, swiglu: bool) -> torch.Tensor:
    """The definition, as the one- and two-row slab GEMM's tests take it (no norm folded in here)."""
    return slab_reference(x, w, swiglu, None, None)[0]


def _case(g: torch.Generator, m: int, n: int, k: int, swiglu: bool, device="cpu"):
    x = torch.randn(m, k, generator=g, device=device).to(torch.bfloat16)
    w = (torch.randn((2 if swiglu else 1) * n, k, generator=g, device=device) / k**0.5).to(torch.bfloat16)
    return x, w


def _emulate(tmp_path: Path, plan: SlabSwigluPlan, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The kernel of `plan` built for the CPU emulation and run on x, w: y [m, n]."""
    args = blob(x) + blob(w) + struct.pack("<qqq", plan.n, plan.grid, plan.smem)
    out = emulate(tmp_path, "slab_swiglu_driver", cuda_slab_swiglu_gemm.SOURCE, plan.defines, args)
    return torch.frombuffer(bytearray(out), dtype=torch.bfloat16).view(plan.m, plan.n)


@needs_gxx
@pytest.mark.parametrize(
    "m,k,swiglu",
    [(64, 256, False), (48, 384, True), (33, 256, False), (5, 128, True), (64, 256, True), (40, 384, False),
     (33, 512, False), (48, 1024, True)],
)  # fmt: skip
def test_slab_swiglu_gemm_kernel_logic_on_the_cpu(tmp_path, m, k, swiglu):
    """The kernel's source on the CPU emulation (every CUDA thread a fiber; the bulk copies,
    mbarriers and mma.sync emulated): 40 outputs over four CTAs of 12 rows (the last with 4, so its
    tiles reach past the slab); 64 rows, 48 (an odd count of m16 tiles: one warp row has a tile
    past the input), 40, 33 (a tile of one row), 5; K in 2-step to 8-step warp quarters; SwiGLU.
    Within a bf16 rounding step of the definition (the sums add in another order)."""
    n = 40
    plan = SlabSwigluPlan(n, k, m, swiglu, rows_per_cta=12)
    assert plan.threads == 256
    x, w = _case(torch.Generator().manual_seed(m * k), m, n, k, swiglu)
    y = _emulate(tmp_path, plan, x, w)
    ref = _reference(x, w, swiglu)
    assert torch.isfinite(y).all()
    assert (y.float() - ref).abs().max() <= 1e-2 * ref.abs().max()


@pytest.mark.parametrize("m", [33, 48, 64])
@pytest.mark.parametrize(
    "n,k,swiglu", [(4096, 1024, False), (3072, 1024, True), (2048, 1024, False), (1030, 1024, False)]
)
@pytest.mark.gpu
@needs_hopper
def test_slab_swiglu_gemm_linear_matches_the_definition(m, n, k, swiglu):
    """The 0.6B's K = 1024 GEMMs (and 1030 outputs: a last CTA with fewer rows) within a bf16
    rounding step of the definition."""
    plan = slab_swiglu_plan(n, k, m, swiglu)
    x, w = _case(torch.Generator(device="cuda").manual_seed(n + m), m, n, k, swiglu, device="cuda")
    y = slab_swiglu_gemm(x, w, plan)
    ref = _reference(x, w, swiglu)
    assert y.shape == (m, n) and torch.isfinite(y).all()
    assert (y.float() - ref).abs().max() <= 1e-2 * ref.abs().max()


@pytest.mark.gpu
@needs_hopper
def test_slab_swiglu_gemm_inside_a_pdl_graph_matches_eager():
    """Three GEMMs chained in a CUDA graph with PDL (each CTA's slab copied before its wait, each
    input written by the kernel before) give the bits the same calls give one at a time."""
    g = torch.Generator(device="cuda").manual_seed(7)
    x, w1 = _case(g, 64, 1024, 1024, False, device="cuda")
    w2 = (torch.randn(2 * 1024, 1024, generator=g, device="cuda") / 32).to(torch.bfloat16)
    w3 = (torch.randn(1024, 1024, generator=g, device="cuda") / 32).to(torch.bfloat16)
    p1, p2, p3 = (
        slab_swiglu_plan(1024, 1024, 64),
        slab_swiglu_plan(1024, 1024, 64, swiglu=True),
        slab_swiglu_plan(1024, 1024, 64),
    )

    def chain():
        return (
            slab_swiglu_gemm(
                slab_swiglu_gemm(slab_swiglu_gemm(x, w1, p1), w2, p2),
                w3,
                p3,
            ),
        )

    assert_pdl_graph_replays_eager(chain, trigger_first=False, replays=3)


def _decode_case(seed: int):
    """64 decode rows at position 39 over a paged cache of 40 tokens a row (3 layers, 16-token pages,
    4 pages a row): the rows, the stack's index arguments and the caches."""
    rows, ps, ctx = 64, 16, 40
    g = torch.Generator(device="cuda").manual_seed(seed)
    cache_shape = (3, 4 * rows, ps, 8, 128)
    k0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    v0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(rows, 1024, device="cuda", generator=g).to(torch.bfloat16)
    table = torch.arange(4 * rows, device="cuda").view(rows, 4)
    positions, lens = torch.full((rows,), ctx - 1, device="cuda"), torch.full((rows,), ctx, device="cuda")
    slots = table[:, (ctx - 1) // ps] * ps + (ctx - 1) % ps
    return x, [positions, table, lens, slots], k0, v0


@pytest.mark.gpu
@needs_hopper
def test_stack_at_64_rows_with_the_slab_gemm_matches_the_triton_route(monkeypatch):
    """Three full-size layers decoding 64 streams over a paged cache of 40 earlier tokens: with
    gate/up on this kernel the hidden states and cache writes are within bf16 rounding of the
    Triton and cuBLAS route's (the kernel's row range emptied), eagerly and replayed from a graph
    captured with PDL (test_slab_gemm's check), and the kernel did run."""
    from test_slab_gemm import _check_against_layer_kernels, _stack

    from cadence.models.qwen3_tts.fused_stack import FusedStack

    calls = []
    real = cuda_slab_swiglu_gemm.slab_swiglu_gemm
    monkeypatch.setattr(
        cuda_slab_swiglu_gemm, "slab_swiglu_gemm", lambda x, w, plan: calls.append(plan) or real(x, w, plan)
    )
    fused = FusedStack(_stack(), load_ops("triton"), 64)
    x, index, k0, v0 = _decode_case(64)
    off = Switched(fused, cuda_slab_swiglu_gemm, "MAX_ROWS", 0)
    _check_against_layer_kernels(off, fused, x, index, k0, v0, decode=True)
    assert {(p.n, p.swiglu) for p in calls} == {(3072, True)}
