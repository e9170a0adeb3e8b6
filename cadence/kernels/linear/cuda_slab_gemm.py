"""The slab GEMM (linear/cuda/slab_gemm.cu): the decode GEMM whose weights arrive before it may
start, for one to eight activation rows (the talker's and code predictor's steps of small batches,
and the code predictor's first pass, two rows a stream).

Every CTA copies its slab of weight rows into shared memory with the copy engine before it waits
for the kernel before it (programmatic dependent launch), so a GEMM's weight read overlaps the
kernel before instead of following its wait, and the RMSNorm before qkv and gate/up is done by
those GEMMs' CTAs on their input rows (no norm kernel between two GEMMs): a layer's chain of four
GEMMs is about a quarter shorter than the Triton layer kernels' at one row.

Compiled at first use by NVRTC (`torch.cuda._compile_kernel`), one instance per shape; launched
through the driver's cuLaunchKernelEx so that PDL can be asked for (PyTorch's launcher cannot).
Hopper and newer (bulk copies, mbarriers, griddepcontrol). KernelConfig.slab_max_rows (`cadence
serve --slab-max-rows`) says up to how many rows the decode graphs use it. The tensor cores take
the rows at no extra cost (an m16 tile holds eight input rows, two A rows each), so a GEMM of eight
rows takes about as long as one of a single row.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import SLAB_MAX_ROWS
from ..launch.nvrtc import compile_source, launch, runs_on
from ..launch.pdl import pdl_on
from ..tile_table import current_table

SOURCE = Path(__file__).with_name("cuda") / "slab_gemm.cu"
THREADS = 256
MAX_ROWS = SLAB_MAX_ROWS  # the kernel's input rows at most (slab_gemm.cu's M)
# The rows an o GEMM with the attention inside takes at most: one decode row, or the code
# predictor's first pass (two tokens of one stream in one page).
ATTENTION_MAX_ROWS = 2
# A CTA's shared memory at most: two CTAs must fit on an SM (this GEMM's and the next one's, which
# copies its slab while this one runs): half of Hopper's 228 KB an SM, less the 1 KB reserved a CTA.
SMEM_LIMIT = 113 * 1024


@dataclass(frozen=True)
class AttentionShape:
    """The attention an o projection's slab GEMM takes in (linear/cuda/slab_attention.cuh): rows
    whose whole context is one cache page of `page_size` tokens, either one decode row or up to
    ATTENTION_MAX_ROWS consecutive tokens of one stream (the code predictor's first pass)."""

    heads: int
    kv_heads: int
    head_dim: int
    page_size: int

    def fits(self, k: int, m: int) -> bool:
        """The kernel's lane layout: a warp a kv head, a lane a (query head, token)."""
        lanes = self.heads // self.kv_heads * self.page_size
        return (m <= ATTENTION_MAX_ROWS and self.kv_heads == THREADS // 32 and self.head_dim == 128
                and k == self.heads * self.head_dim and self.heads % self.kv_heads == 0 and lanes == 32)  # fmt: skip


@dataclass(frozen=True)
class SlabPlan:
    """One instance of the kernel and its launch: y [m, n] from an [n, k] weight (SwiGLU: [2n, k]),
    `rows_per_cta` weight rows (outputs) a CTA, the norm folded in or not."""

    n: int
    k: int
    m: int
    swiglu: bool
    norm: bool
    residual: bool
    rows_per_cta: int
    trigger_first: bool = False
    attention: AttentionShape | None = None  # x is a qkv row, the input its decode attention

    @property
    def grid(self) -> int:
        return -(-self.n // self.rows_per_cta)

    @property
    def smem(self) -> int:
        """The slab (whose space the warps' sums of every output take after the dots, its tiles
        rounded up to 8 rows), the page's keys and values with an attention, the input rows, the
        mbarrier and the norm's partial sums (16-byte aligned)."""
        pair = 2 if self.swiglu else 1
        sums = (THREADS // 32) * self.m * pair * -(-self.rows_per_cta // 8) * 8 * 4
        space = -(-max(pair * self.rows_per_cta * self.k * 2, sums) // 16) * 16
        if (a := self.attention) is not None:
            space += 2 * a.page_size * a.kv_heads * a.head_dim * 2
        partials = self.m * (THREADS // 32) * 4
        return -(-(space + self.m * self.k * 2 + 8 + partials) // 16) * 16

    @property
    def defines(self) -> tuple[tuple[str, int], ...]:
        return (("K", self.k), ("M", self.m), ("PAIR", 2 if self.swiglu else 1), ("NORM", int(self.norm)),
                ("HAS_RES", int(self.residual)), ("THREADS", THREADS),
                ("TRIGGER_FIRST", int(self.trigger_first)), ("ROWS", self.rows_per_cta),
                ("ATTN", int(self.attention is not None))) + self._attention_defines  # fmt: skip

    @property
    def _attention_defines(self) -> tuple[tuple[str, int], ...]:
        a = self.attention
        return () if a is None else (("HQ", a.heads), ("HKV", a.kv_heads), ("HD", a.head_dim), ("PS", a.page_size))


def slab_plan(n: int, k: int, m: int, swiglu: bool = False, norm: bool = False, residual: bool = False,
              attention: AttentionShape | None = None):  # fmt: skip
    """The kernel's plan for this GEMM over the tile table's slab_gemm.ctas CTAs (at most one an SM,
    so that the next kernel's sit beside them), or None where it does not apply: more than MAX_ROWS
    rows, K not a multiple of 256, a CTA's slab too large for two CTAs an SM (the 1.7B's gate/up), or
    an attention the kernel cannot take in (another head layout)."""
    if not 1 <= m <= MAX_ROWS or k % 256 or k > 16 * THREADS:
        return None
    if attention is not None and (norm or swiglu or not attention.fits(k, m)):
        return None
    ctas = current_table().slab_gemm.ctas
    plan = SlabPlan(n, k, m, swiglu, norm, residual and norm, rows_per_cta=-(-n // ctas), attention=attention)
    return plan if plan.smem <= SMEM_LIMIT else None


@dataclass(frozen=True)
class LayerPlans:
    """A decoder layer's four GEMMs as slab GEMMs: qkv with the input norm folded in (the first
    layer's without a residual to add), o, gate/up with SwiGLU and the post-attention norm, down;
    and where asked and possible o with the decode attention before it taken in (o_attention)."""

    qkv_first: SlabPlan
    qkv: SlabPlan
    o: SlabPlan
    gate_up: SlabPlan
    down: SlabPlan
    o_attention: SlabPlan | None = None

    @classmethod
    def of(cls, qkv: tuple, o: tuple, gate_up: tuple, down: tuple, rows: int,
           attention: AttentionShape | None = None) -> LayerPlans | None:  # fmt: skip
        """From the weights' shapes ([n, k]; gate/up's [2n, k]); None if one GEMM has no plan."""
        plans = (
            slab_plan(qkv[0], qkv[1], rows, norm=True),
            slab_plan(qkv[0], qkv[1], rows, norm=True, residual=True),
            slab_plan(o[0], o[1], rows),
            slab_plan(gate_up[0] // 2, gate_up[1], rows, swiglu=True, norm=True, residual=True),
            slab_plan(down[0], down[1], rows),
        )
        if None in plans:
            return None
        # The attention reads the page's earlier tokens before its wait: the qkv GEMM before it must
        # have passed its own wait when it lets the o GEMM launch (none of these GEMMs triggers
        # first), so that every kernel before it, the tokens' writers among them, has completed.
        o_attention = slab_plan(o[0], o[1], rows, attention=attention) if attention is not None else None
        return cls(*plans, o_attention)


@functools.cache
def slab_supported(device: torch.device) -> bool:
    """Whether the kernel can run on `device` (nvrtc.runs_on: a small instance is built to find
    out; where it cannot be, the layer kernels run)."""
    probe = slab_plan(current_table().slab_gemm.ctas, 256, 1)
    return runs_on(device, "the slab GEMM", lambda: _kernel(probe.defines, probe.smem))


def _kernel(defines: tuple[tuple[str, int], ...], smem: int):
    """The compiled instance for these constants, allowed `smem` bytes of dynamic shared memory."""
    return compile_source(SOURCE, "slab_gemm_kernel", defines, smem)


class _Attention(ctypes.Structure):  # slab_gemm.cu's struct Attention
    _POINTERS = ("q_norm", "k_norm", "cos", "sin", "position", "slot", "context", "page", "k_cache", "v_cache")
    _fields_ = [(name, ctypes.c_void_p) for name in _POINTERS] + [("scale", ctypes.c_float)]


def slab_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    plan: SlabPlan,
    norm_weight: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """y = in @ weight^T (plan.swiglu: silu(in @ gate^T) * (in @ up^T) for weight = [gate; up]),
    where in = x, or with plan.norm rms_norm(x + residual) * norm_weight. Returns y and, with the
    norm, the rows' residual for the layer's next norm (x + residual, or x without one)."""
    m, k = x.shape
    if plan.attention is not None:
        raise ValueError("the plan takes an attention in: call slab_attention_linear")
    if (m, k) != (plan.m, plan.k) or weight.shape != ((2 if plan.swiglu else 1) * plan.n, k):
        raise ValueError(f"x {tuple(x.shape)} and weight {tuple(weight.shape)} do not fit {plan}")
    if plan.norm and norm_weight is None:
        raise ValueError("the plan folds a norm in: norm_weight is needed")
    if plan.residual and residual is None:
        raise ValueError("the plan adds a residual before its norm: residual is needed")
    x = x.contiguous()
    y = torch.empty(m, plan.n, dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(x) if plan.residual else x
    res = residual.contiguous() if plan.residual else x
    nw = norm_weight if plan.norm else x
    _run(plan, x, weight, y, res, nw, res_out, eps, _Attention())
    return y, (res_out if plan.norm else None)


def _run(plan: SlabPlan, x, weight, y, res, nw, res_out, eps: float, attention: _Attention) -> None:
    args = [x, weight, y, res, nw, res_out, ctypes.c_int(plan.n), ctypes.c_int(plan.rows_per_cta), ctypes.c_float(eps),
            attention]  # fmt: skip
    launch(_kernel(plan.defines, plan.smem), plan.grid, THREADS, plan.smem, args, pdl_on(x))


@dataclass
class DecodeAttention:
    """The attention of rows in one cache page as slab_attention_linear takes it in: the reference
    qk_norm_rope_store (QK-norm weights, RoPE tables [positions, head_dim], the cache of one layer
    [pages, page_size, kv heads, head_dim]) and paged_attention (each row's position, flat cache
    slot and context length, the page table [rows, 1] whose first entry is the page; int64, read by
    the kernel before its PDL wait, so they must not be written by the kernel before it)."""

    q_norm: torch.Tensor
    k_norm: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    context_lens: torch.Tensor
    block_table: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    scale: float

    def struct(self) -> _Attention:
        indices = (self.positions, self.slots, self.context_lens, self.block_table)
        if any(t.dtype != torch.int64 for t in indices):
            raise ValueError("positions, slots, context_lens and block_table must be int64")
        tensors = (self.q_norm, self.k_norm, self.cos, self.sin, self.k_cache, self.v_cache)
        if not all(t.is_contiguous() and t.dtype == torch.bfloat16 for t in tensors):
            raise ValueError("the norms, RoPE tables and caches must be contiguous bfloat16")
        ptr = [t.data_ptr() for t in (*tensors[:4], *indices, *tensors[4:])]
        return _Attention(*ptr, self.scale)


def slab_attention_linear(qkv: torch.Tensor, weight: torch.Tensor, plan: SlabPlan, attention: DecodeAttention,
                          eps: float = 1e-6) -> torch.Tensor:  # fmt: skip
    """o = attention(qkv) @ weight^T for one decode row, or plan.m consecutive tokens of one stream
    in one page, the attention (QK-norm, RoPE, the new keys and values written to the cache,
    attention over the page) done inside the GEMM (plan.attention)."""
    a = plan.attention
    width = (a.heads + 2 * a.kv_heads) * a.head_dim if a is not None else 0
    if a is None or qkv.shape != (plan.m, width) or weight.shape != (plan.n, plan.k):
        raise ValueError(f"qkv {tuple(qkv.shape)} and weight {tuple(weight.shape)} do not fit {plan}")
    if attention.k_cache.shape[1:] != (a.page_size, a.kv_heads, a.head_dim):
        want = f"[pages, {a.page_size}, {a.kv_heads}, {a.head_dim}]"
        raise ValueError(f"the cache {tuple(attention.k_cache.shape)} is not {want}")
    qkv = qkv.contiguous()
    y = torch.empty(plan.m, plan.n, dtype=qkv.dtype, device=qkv.device)
    _run(plan, qkv, weight, y, qkv, qkv, qkv, eps, attention.struct())
    return y
