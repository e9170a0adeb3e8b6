"""The code predictor's 15 steps as one persistent CUDA kernel (kernels/cuda/code_predictor.cu).

The phases, buffers and call of the Triton persistent kernel (triton_code_predictor.py), but each
CTA's weight rows stream into a shared-memory ring through the copy engine (cp.async.bulk), issued
by a producer warp that runs ahead of the grid barriers: in Triton a barrier's release waits for
every load in flight, which held a phase at >= 3.6 us (perf-notes #37-#40); the same chain in CUDA
measured 3.7 us a phase with weights and no more than the ring's 0.55 ms when streaming alone
(#43). Hopper and newer only (mbarrier transaction counts, bulk copies).

Compiled at first use by NVRTC through `torch.cuda._compile_kernel` (no compiler to install:
PyTorch's CUDA wheels carry NVRTC), with the model's dimensions as compile-time constants; up to
MAX_STREAMS streams (each stream's rows of every phase sit in shared memory beside the ring).
tests/test_cuda_code_predictor_emulated.py runs the same source on the CPU.
Experimental (perf-notes #45): EngineConfig.persistent_kernel = "cuda" selects it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ..engine.sampler import RowParams
from .code_predictor_buffers import CodePredictorBuffers
from .nvrtc import compile_source

SOURCE = Path(__file__).with_name("cuda") / "code_predictor.cu"
MAX_STREAMS = 4
CONSUMER_WARPS = 8
STAGE_BYTES = 32 * 1024  # one ring stage; #43 found 32 KB stages at least as good as 16 or 64
MAX_STAGES = 8
SAMPLER_WORDS = 4 * 256 + 2  # shared memory the sampler's radix select counts in (sampling.cuh)


@dataclass(frozen=True)
class KernelPlan:
    """The kernel's compile-time constants and its shared memory: the weight ring (as many 32 KB
    stages as the rest leaves, at most MAX_STAGES), then its scratch (input rows as fp32, norm
    partials, reductions, the mbarriers), laid out as the kernel expects."""

    defines: tuple[tuple[str, int], ...]
    stages: int
    smem: int
    consumer_warps: int
    ll: bool  # SYNC_LL: activations as {value, tag} words, no grid barrier (use_words)

    @classmethod
    def of(cls, cp: CodePredictorBuffers, shared_memory: int, consumer_warps: int = CONSUMER_WARPS,
           ll: bool = False, trace: bool = False) -> KernelPlan:  # fmt: skip
        """trace: every CTA stamps its clock into `cp.trace` five times a phase (benchmarks)."""
        s = cp.stack
        head_dim, group = s.head_dim, s.heads // s.kv_heads
        if cp.d.dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"the CUDA code predictor runs bf16 or fp32 weights, not {cp.d.dtype}")
        if head_dim & (head_dim - 1) or group * head_dim > consumer_warps * 32:
            raise ValueError(f"head_dim {head_dim} x group {group}: the attention phase needs a power of two "
                             f"and at most {consumer_warps * 32} threads")  # fmt: skip
        rows = 2 * cp.max_streams
        k_max = max(cp.hidden, s.heads * head_dim, cp.inter)
        defines = (
            ("ACT_BF16", int(cp.d.dtype == torch.bfloat16)), ("CONSUMER_WARPS", consumer_warps),
            ("MAX_ROWS", rows), ("HIDDEN", cp.hidden), ("INTER", cp.inter), ("HEADS", s.heads),
            ("KV_HEADS", s.kv_heads), ("HEAD_DIM", head_dim), ("VOCAB", cp.vocab), ("LAYERS", len(s.layers)),
            ("STEPS", cp.steps), ("CTX", cp.steps + 1), ("K_MAX", k_max), ("SYNC_LL", int(ll)),
            ("TRACE", int(trace)),
        )  # fmt: skip
        xs = max(rows * k_max, SAMPLER_WORDS)  # the input rows, or the sampler's bins
        scratch = 4 * (xs + consumer_warps * rows + rows + rows % 2) + 16 * consumer_warps
        stages = min(MAX_STAGES, (shared_memory - scratch) // (STAGE_BYTES + 16))
        if stages < 2:
            raise ValueError(f"{cp.max_streams} streams leave no room for the weight ring in shared memory")
        return cls(defines, stages, stages * STAGE_BYTES + scratch + 16 * stages, consumer_warps, ll)


ACTIVATIONS = ("d", "ra", "rb", "qkv", "attn", "o", "act", "logits")  # the buffers that cross CTAs


def use_words(cp: CodePredictorBuffers) -> None:
    """The cross-CTA activation buffers as SYNC_LL's 64-bit words (same shapes), every tag all ones:
    a tag no phase writes (a frame's tags are epoch * 1024 + at most 405)."""
    for name in ACTIVATIONS:
        setattr(cp, name, torch.full(getattr(cp, name).shape, -1, dtype=torch.long, device=cp.d.device))


def as_words(values: torch.Tensor, tag: torch.Tensor) -> torch.Tensor:
    """bf16 / fp32 values as SYNC_LL words: their bits below `tag` (a device tensor; no host sync)."""
    if values.dtype == torch.bfloat16:
        bits = values.view(torch.int16).to(torch.long) & 0xFFFF
    else:
        bits = values.view(torch.int32).to(torch.long) & 0xFFFFFFFF
    return bits | (tag.to(torch.long) << 32)


def kernel_arguments(cp: CodePredictorBuffers, plan: KernelPlan, first: torch.Tensor, params: RowParams,
                     seed: torch.Tensor, step: torch.Tensor) -> list:  # fmt: skip
    """The kernel's arguments, in its signature's order, for the streams of `first` (copied into the
    input rows; the barrier counter zeroed)."""
    b = first.shape[0] // 2
    if b > cp.max_streams:
        raise ValueError(f"the CUDA code predictor holds at most {cp.max_streams} streams, got {b}")
    s = cp.stack
    if plan.ll:  # a new epoch: no word of an earlier frame carries one of this frame's tags
        cp.epoch.add_(1)
        cp.d[: 2 * b].copy_(as_words(first, cp.epoch * 1024))
    else:
        cp.d[: 2 * b].copy_(first)
    cp.counter.zero_()
    return [
        cp.d, cp.ra, cp.rb, cp.qkv, cp.attn, cp.o, cp.act, cp.logits, cp.codes, cp.counter, cp.epoch, cp.trace,
        cp.ln1, cp.wqkv, cp.q_norm, cp.k_norm, cp.wo, cp.ln2, cp.wgu, cp.wdown, s.norm,
        cp.heads, cp.embeddings, s.cos, s.sin, cp.k_cache, cp.v_cache,
        params.do_sample, params.temperature, params.top_k, params.top_p, seed, step,
        b, cp.k_cache.stride(0), float(s.eps), float(s.scale), plan.stages, STAGE_BYTES,
    ]  # fmt: skip


def compile_kernel(defines: tuple[tuple[str, int], ...], smem: int):
    """The kernel for these compile-time constants (NVRTC, for compute capability 9.0), allowed `smem`
    bytes of dynamic shared memory."""
    return compile_source(SOURCE, "code_predictor_kernel", defines, smem)


class CudaCodePredictor(CodePredictorBuffers):
    """PersistentCodePredictor's interface and buffers, run by the CUDA kernel: `__call__(first,
    params, seed, step)` returns the codes [B, 15] for up to `max_streams` (<= MAX_STREAMS) streams."""

    def __init__(self, stack, heads: list[torch.Tensor], embeddings: list[torch.Tensor], max_streams: int,
                 k_cache: torch.Tensor, v_cache: torch.Tensor, sync: str = "barrier"):  # fmt: skip
        dev = stack.norm.device
        if dev.type != "cuda" or torch.cuda.get_device_capability(dev) < (9, 0):
            raise RuntimeError("the CUDA code predictor needs a GPU of compute capability 9.0 or newer")
        if sync not in ("barrier", "ll"):
            raise ValueError(f"unknown sync '{sync}'; allowed: barrier, ll")
        super().__init__(stack, heads, embeddings, min(max_streams, MAX_STREAMS), k_cache, v_cache)
        optin = torch.cuda.get_device_properties(dev).shared_memory_per_block_optin
        self.plan = KernelPlan.of(self, optin, ll=sync == "ll")
        self.planned = self.plan  # as planned, before any rebuild
        if self.plan.ll:
            use_words(self)
        try:
            self.kernel = compile_kernel(self.plan.defines, self.plan.smem)
        except (OSError, RuntimeError, AttributeError) as e:  # no NVRTC, a PyTorch without _compile_kernel
            raise RuntimeError(
                f"the CUDA code predictor could not be compiled with NVRTC ({e}); "
                "use persistent_kernel 'triton' or persistent_max_rows 0"
            ) from e

    def rebuild(self, trace: bool, **switches: int) -> None:
        """The kernel compiled again with its trace on or off and experiment switches set (extra
        macros the source tests, `#ifdef NAME`; benchmarks: `code_predictor.py --variants`); the plan's
        own constants, which fix the launch and the shared memory, stay."""
        values = dict(self.planned.defines) | {"TRACE": int(trace)}
        fixed = set(switches) & (set(values) - {"TRACE"})
        if fixed:
            raise ValueError(f"{sorted(fixed)} are the plan's (launch, shared memory), not switches")
        self.plan = dataclasses.replace(self.plan, defines=tuple((values | switches).items()))
        self.kernel = compile_kernel(self.plan.defines, self.plan.smem)

    def __call__(self, first: torch.Tensor, params: RowParams, seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """first [2B, H]: each stream's projected talker hidden state and code0 embedding, interleaved."""
        args = kernel_arguments(self, self.plan, first, params, seed, step)
        threads = (self.plan.consumer_warps + 1) * 32
        self.kernel(grid=(self.programs, 1, 1), block=(threads, 1, 1), shared_mem=self.plan.smem, args=args)
        return self.codes[: first.shape[0] // 2]
