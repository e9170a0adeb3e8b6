"""The slab SwiGLU GEMM (linear/cuda/slab_swiglu_gemm.cu): the MLP's gate/up GEMM with SwiGLU for
33-64 activation rows, whose weights arrive before it may start. Each CTA copies its slab of weight
rows into shared memory before its programmatic-dependent-launch wait, as the one- and two-row slab
GEMM (cuda_slab_gemm.py) does at batch 1, then reads the 64 input rows from L2 straight into the
tensor cores' registers. The kernel also runs plain GEMMs (PAIR 1: tests, tile sweeps), but only
gate/up is routed here: for qkv and the heads the Triton tiles are faster, and o and down (K of 2048
and 3072: every CTA would read 256-384 KB of input from L2) keep the split-K Triton kernel, whose
partials the norm after them adds.

`slab_swiglu_route` says which calls take it: the SwiGLU GEMM, bf16 on Hopper, the rows of the tile
table's slab_swiglu_gemm section (33-64 in the families' tables).
Compiled at first use by NVRTC, one instance per shape and row count (launch/nvrtc.py).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from ..launch.nvrtc import compile_source, launch, runs_on
from ..launch.pdl import pdl_on, trigger_first_now
from ..tile_table import current_table

SOURCE = Path(__file__).with_name("cuda") / "slab_swiglu_gemm.cu"
MAX_ROWS = 64  # the kernel's input rows at most (slab_swiglu_gemm.cu's M); the tile table says which the route sends
MAX_K = 1024  # every CTA reads all of x from L2: 128 KB at 64 rows and K = 1024
# A CTA's shared memory at most: the kernels around it (the norm before, attention or down after)
# must still fit an SM beside it, or its slab copy cannot start before their end.
SMEM_LIMIT = 128 * 1024
# The kernel's warps (slab_swiglu_gemm.cu): 2 x 4, the rows' m16 tiles in two and K in WARP_KS quarters
# whose sums meet in shared memory.
THREADS = 256
WARP_KS = 4
PAD = 32  # elements after each slab row in shared memory (the kernel's LD = K + 32)
# K steps a warp's input loads cover at once (a divisor of K / 128; 8: all of a warp's quarter at K = 1024).
BATCH = 8


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class SlabSwigluPlan:
    """One instance of the kernel and its launch: y [m, n] from an [n, k] weight (SwiGLU: [2n, k],
    y = silu(x @ gate^T) * (x @ up^T)), `rows_per_cta` weight rows (of each) a CTA."""

    n: int
    k: int
    m: int
    swiglu: bool
    rows_per_cta: int
    trigger_first: bool = False  # the next kernel launches at this one's start (the graph's PDL order)
    batch: int = BATCH
    ctas: int = 0

    @property
    def threads(self) -> int:
        return THREADS

    @property
    def grid(self) -> int:
        return self.ctas or _ceil_div(self.n, self.rows_per_cta)

    @property
    def smem(self) -> int:
        """The slab (rows padded), or the K shares' sums that reuse it if larger, then the mbarrier.
        The sums: per warp row and part (a warp's share of the row's outputs), each K share's floats
        a lane (the kernel's share_at)."""
        pair = 2 if self.swiglu else 1
        slab = pair * self.rows_per_cta * (self.k + PAD) * 2
        warp_rows = THREADS // 32 // WARP_KS
        m16_tiles_a_warp = _ceil_div(_ceil_div(self.m, 16), warp_rows)
        units = m16_tiles_a_warp * _ceil_div(self.rows_per_cta, 8) * 4  # a lane's outputs
        sums = warp_rows * WARP_KS * WARP_KS * _ceil_div(units, WARP_KS) * pair * 32 * 4
        return _ceil_div(max(slab, sums), 16) * 16 + 16

    @property
    def defines(self) -> tuple[tuple[str, int], ...]:
        return (
            ("K", self.k),
            ("M", self.m),
            ("PAIR", 2 if self.swiglu else 1),
            ("ROWS", self.rows_per_cta),
            ("THREADS", THREADS),
            ("TRIGGER_FIRST", int(self.trigger_first)),
            ("BATCH", self.steps_in_flight),
        )

    @property
    def steps_in_flight(self) -> int:
        """`batch`, or the largest divisor of a warp's K steps (K / 128) below it."""
        steps = self.k // (32 * WARP_KS)
        return max(b for b in range(1, min(self.batch, steps) + 1) if steps % b == 0)  # fmt: skip


def slab_swiglu_plan(n: int, k: int, m: int, swiglu: bool = False, ctas: int = 132) -> SlabSwigluPlan | None:
    """The kernel's plan for this GEMM over `ctas` CTAs (the GPU's SMs: the route passes its count), or
    None where it does not apply: more than 64 rows, K not a multiple of 128 or above MAX_K, a slab
    over SMEM_LIMIT."""
    if not 1 <= m <= MAX_ROWS or k % 128 or k > MAX_K or ctas > n:
        return None
    plan = SlabSwigluPlan(n, k, m, swiglu, rows_per_cta=_ceil_div(n, ctas), ctas=ctas)
    return plan if plan.smem <= SMEM_LIMIT else None


@functools.cache
def slab_swiglu_supported(device: torch.device) -> bool:
    """Whether the kernel can run on `device` (nvrtc.runs_on builds a small instance to find out)."""
    probe = slab_swiglu_plan(128, 128, 64, ctas=128)
    return runs_on(device, "the slab SwiGLU GEMM", lambda: _kernel(probe.defines, probe.smem))


def slab_swiglu_route(x: torch.Tensor, gate_up: torch.Tensor) -> SlabSwigluPlan | None:
    """The plan for the SwiGLU GEMM of x and gate_up ([gate; up]) where it runs here, else None (the
    Triton or cuBLAS route): bf16 rows, as many as the tile table's slab_swiglu_gemm min_rows to
    max_rows, a Hopper GPU."""
    m, k = x.shape
    routed = current_table().slab_swiglu_gemm
    if not routed.min_rows <= m <= routed.max_rows or x.dtype != torch.bfloat16 or gate_up.dtype != torch.bfloat16:
        return None
    if x.device.type != "cuda" or not slab_swiglu_supported(x.device):
        return None
    return slab_swiglu_plan(gate_up.shape[0] // 2, k, m, True, ctas_for(x.device))


def ctas_for(device: torch.device) -> int:
    """CTAs a GEMM on `device`: the tile table's slab_swiglu_gemm.ctas_per_sm on each of its SMs."""
    return _sms(device) * current_table().slab_swiglu_gemm.ctas_per_sm


@functools.cache
def _sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _kernel(defines: tuple[tuple[str, int], ...], smem: int):
    return compile_source(SOURCE, "slab_swiglu_gemm_kernel", defines, smem)


def registers(plan: SlabSwigluPlan) -> tuple[int, int]:
    """The compiled instance's registers a thread and bytes of local memory (spills) a thread."""
    libcuda = torch.cuda._utils._get_gpu_runtime_library()
    values = []
    for attribute in (4, 3):  # CU_FUNC_ATTRIBUTE_NUM_REGS, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
        value = ctypes.c_int()
        libcuda.cuFuncGetAttribute(ctypes.byref(value), attribute, _kernel(plan.defines, plan.smem).func)
        values.append(value.value)
    return values[0], values[1]


def slab_swiglu_gemm(x: torch.Tensor, weight: torch.Tensor, plan: SlabSwigluPlan) -> torch.Tensor:
    """x @ weight^T (plan.swiglu: silu(x @ gate^T) * (x @ up^T) for weight = [gate; up]), [m, n]."""
    m, k = x.shape
    if (m, k) != (plan.m, plan.k) or weight.shape != ((2 if plan.swiglu else 1) * plan.n, k):
        raise ValueError(f"x {tuple(x.shape)} and weight {tuple(weight.shape)} do not fit {plan}")
    if not weight.is_contiguous():
        raise ValueError("the weight must be contiguous (its rows are bulk-copied)")
    x = x.contiguous()
    y = torch.empty(m, plan.n, dtype=x.dtype, device=x.device)
    plan = dataclasses.replace(plan, trigger_first=trigger_first_now(x))
    args = [x, weight, y, ctypes.c_int(plan.n)]
    launch(_kernel(plan.defines, plan.smem), plan.grid, plan.threads, plan.smem, args, pdl_on(x))
    return y
