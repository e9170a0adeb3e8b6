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
Experimental (perf-notes #45): EngineConfig.persistent_kernel = "cuda" selects it.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from ..engine.sampler import RowParams
from .code_predictor_buffers import CodePredictorBuffers

SOURCE = Path(__file__).with_name("cuda") / "code_predictor.cu"
MAX_STREAMS = 4
CONSUMER_WARPS = 8
STAGE_BYTES = 32 * 1024  # one ring stage; #43 found 32 KB stages at least as good as 16 or 64
MAX_STAGES = 8


@functools.cache
def compile_kernel(defines: tuple[tuple[str, int], ...]):
    """The kernel for these compile-time constants (NVRTC, for compute capability 9.0)."""
    source = "".join(f"#define {name} {value}\n" for name, value in defines) + SOURCE.read_text()
    return torch.cuda._compile_kernel(source, "code_predictor_kernel", compute_capability="90")


class CudaCodePredictor(CodePredictorBuffers):
    """PersistentCodePredictor's interface and buffers, run by the CUDA kernel: `__call__(first,
    params, seed, step)` returns the codes [B, 15] for up to `max_streams` (<= MAX_STREAMS) streams."""

    def __init__(self, stack, heads: list[torch.Tensor], embeddings: list[torch.Tensor], max_streams: int,
                 k_cache: torch.Tensor, v_cache: torch.Tensor):  # fmt: skip
        dev = stack.norm.device
        if dev.type != "cuda" or torch.cuda.get_device_capability(dev) < (9, 0):
            raise RuntimeError("the CUDA code predictor needs a GPU of compute capability 9.0 or newer")
        max_streams = min(max_streams, MAX_STREAMS)
        super().__init__(stack, heads, embeddings, max_streams, k_cache, v_cache)
        dtype = stack.norm.dtype
        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"the CUDA code predictor runs bf16 or fp32 weights, not {dtype}")
        head_dim, group = stack.head_dim, stack.heads // stack.kv_heads
        if head_dim & (head_dim - 1) or group * head_dim > CONSUMER_WARPS * 32:
            raise ValueError(f"head_dim {head_dim} x group {group}: the attention phase needs a power of two "
                             f"and at most {CONSUMER_WARPS * 32} threads")  # fmt: skip
        self.max_rows = 2 * max_streams
        k_max = max(self.hidden, stack.heads * head_dim, self.inter)
        defines = (
            ("ACT_BF16", int(dtype == torch.bfloat16)), ("CONSUMER_WARPS", CONSUMER_WARPS),
            ("MAX_ROWS", self.max_rows), ("HIDDEN", self.hidden), ("INTER", self.inter), ("HEADS", stack.heads),
            ("KV_HEADS", stack.kv_heads), ("HEAD_DIM", head_dim), ("VOCAB", self.vocab),
            ("LAYERS", len(stack.layers)), ("STEPS", self.steps), ("CTX", self.steps + 1), ("K_MAX", k_max),
        )  # fmt: skip
        # Shared memory: the ring, then the kernel's scratch (input rows as fp32, norm partials,
        # reductions, the mbarriers); as many 32 KB stages as the rest leaves, at most MAX_STAGES.
        rows = self.max_rows
        scratch = 4 * (rows * k_max + CONSUMER_WARPS * rows + rows + rows % 2) + 16 * CONSUMER_WARPS
        available = torch.cuda.get_device_properties(dev).shared_memory_per_block_optin
        self.stages = min(MAX_STAGES, (available - scratch) // (STAGE_BYTES + 16))
        if self.stages < 2:
            raise ValueError(f"{max_streams} streams leave no room for the weight ring in shared memory")
        self.smem = self.stages * STAGE_BYTES + scratch + 16 * self.stages
        self.kernel = compile_kernel(defines)
        self.kernel.set_shared_memory_config(self.smem)

    def __call__(self, first: torch.Tensor, params: RowParams, seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """first [2B, H]: each stream's projected talker hidden state and code0 embedding, interleaved."""
        b = first.shape[0] // 2
        if b > self.max_streams:
            raise ValueError(f"the CUDA code predictor holds at most {self.max_streams} streams, got {b}")
        s = self.stack
        self.d[: 2 * b].copy_(first)
        self.counter.zero_()
        self.kernel(
            grid=(self.programs, 1, 1), block=((CONSUMER_WARPS + 1) * 32, 1, 1), shared_mem=self.smem,
            args=[
                self.d, self.ra, self.rb, self.qkv, self.attn, self.o, self.act, self.logits, self.codes, self.counter,
                self.ln1, self.wqkv, self.q_norm, self.k_norm, self.wo, self.ln2, self.wgu, self.wdown, s.norm,
                self.heads, self.embeddings, s.cos, s.sin, self.k_cache, self.v_cache,
                params.do_sample, params.temperature, params.top_k, params.top_p, seed, step,
                b, self.k_cache.stride(0), float(s.eps), float(s.scale), self.stages, STAGE_BYTES,
            ],
        )  # fmt: skip
        return self.codes[:b]
