"""The decode step's sampler as a CUDA kernel (sampling/cuda/sampler.cu), one CTA a row: what
`sample_tokens` does (reference.py has the definition; triton_sampler.py the same in Triton), with
the row's parameters, seed, frame counter, history and Gumbel noise taken before its PDL wait and
the top-k threshold found by a radix select, 16 bits wide on bf16 logits without a penalty. It runs
where it can (dispatch.py: Hopper, NVRTC, fp32 or bf16 logits of up to MAX_VOCAB columns).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from ..launch.nvrtc import compile_source, launch, runs_on
from ..launch.pdl import pdl_on, trigger_first_now
from ..tile_table import current_table
from .reference import check_token_outputs
from .spec import NEW_TOKENS, TokenOutputs, TokenSampling

SOURCE = Path(__file__).with_name("cuda") / "sampler.cu"
THREADS = 256  # a plan's threads where none are given (a probe's); a launch takes threads_for(vocab)
MAX_VOCAB = 4096  # columns a row: 16 a thread at most, every one in registers (the Triton kernel above)


@dataclass(frozen=True)
class SamplerPlan:
    """One compiled instance: the vocabulary, the logits' dtype, which optional inputs and outputs
    the call has, and the top-k keys' width (16 where the logits are bf16 values: no penalty)."""

    vocab: int
    bf16: bool
    rows: bool
    seen: bool
    mark_seen: bool
    ban: bool
    embed_words: int
    trigger_first: bool = False
    threads: int = THREADS

    @property
    def key_bits(self) -> int:
        return 16 if self.bf16 and not self.seen else 32

    @property
    def smem(self) -> int:
        """sampler.cu's `struct Shared` (which it asserts fits): the bins, one set a pass of 8 bits,
        the pass's choice and the warps' partial results."""
        return self.key_bits // 8 * 256 * 4 + 8 + self.threads // 32 * 16

    @property
    def defines(self) -> tuple[tuple[str, int], ...]:
        return (("V", self.vocab), ("THREADS", self.threads), ("LOGITS_BF16", int(self.bf16)),
                ("KEY_BITS", self.key_bits), ("HAS_ROWS", int(self.rows)), ("HAS_SEEN", int(self.seen)),
                ("MARK_SEEN", int(self.mark_seen)), ("HAS_BAN", int(self.ban)), ("EMBED_WORDS", self.embed_words),
                ("TRIGGER_FIRST", int(self.trigger_first)), ("SMEM_BYTES", self.smem))  # fmt: skip


def threads_for(vocab: int) -> int:
    """A CTA's threads for rows of `vocab` columns: the tile table's sampler.cuda_threads, or its
    cuda_wide_threads above cuda_wide_above_vocab columns."""
    table = current_table().sampler
    return table.cuda_wide_threads if vocab > table.cuda_wide_above_vocab else table.cuda_threads


@functools.cache
def _kernel(defines: tuple[tuple[str, int], ...]):
    return compile_source(SOURCE, "sample_kernel", defines)


@functools.cache
def sampler_supported(device: torch.device) -> bool:
    """Whether the CUDA sampler runs on `device` (nvrtc.runs_on); else the Triton kernel samples."""
    probe = SamplerPlan(2048, True, False, False, False, False, 0)
    return runs_on(device, "the CUDA sampler", lambda: _kernel(probe.defines))


def _words(t: torch.Tensor, what: str) -> int:
    """A tensor's 4-byte words from its element count, checked to be whole."""
    if (t.numel() * t.element_size()) % 4:
        raise ValueError(f"{what} must be a whole number of 4-byte words")
    return t.numel() * t.element_size() // 4


def cuda_fits(logits: torch.Tensor, spec: TokenSampling, outputs: TokenOutputs) -> bool:
    """The kernel's argument types (else the Triton kernel, which converts as it loads)."""
    if not logits.is_cuda or logits.dtype not in (torch.float32, torch.bfloat16) or not logits.is_contiguous():
        return False
    if logits.dim() != 2 or logits.shape[1] > MAX_VOCAB:
        return False
    history, eos, params = spec.history, spec.eos, spec.params
    tables = [spec.seed, spec.frame, spec.rows, history.penalty if history else None, eos.ban if eos else None]
    dtypes = (torch.long, torch.long, torch.long, torch.float32, torch.bool)
    given = [(t, dt) for t, dt in zip(tables, dtypes, strict=True) if t is not None]
    given += [(params.do_sample, torch.bool), (params.temperature, torch.float32), (params.top_k, torch.long),
              (params.top_p, torch.float32)]  # fmt: skip
    if any(t.dtype != dt or not t.is_contiguous() for t, dt in given):
        return False
    if (table := outputs.embed_table) is not None:  # rows copied as 16-byte or 4-byte words
        emb = outputs.embed_out
        row_bytes = table.shape[1] * table.element_size()
        align = 16 if row_bytes % 16 == 0 else 4
        starts = (table.data_ptr(), emb.data_ptr(), emb.stride(0) * emb.element_size())
        if row_bytes % 4 or any(s % align for s in starts):
            return False
    return True


def cuda_sample_tokens(
    logits: torch.Tensor, spec: TokenSampling, outputs: TokenOutputs = NEW_TOKENS, threads: int | None = None
) -> torch.Tensor:
    """reference.sample_tokens by the CUDA kernel alone (`threads` a CTA: threads_for(vocab) unless a
    benchmark sweeps it); arguments it does not take (other dtypes, strides or alignments than
    cuda_fits allows) are a ValueError.

    Everything but the logits (rows, the parameters, seed, frame counter, history, the EOS ban) is
    read before the kernel's PDL wait, so no kernel launched ahead of it under PDL may write them:
    the engine writes them with host copies and PyTorch kernels (which never let the next kernel in
    early) between walks, and the kernel it waits for writes only the logits."""
    if not cuda_fits(logits, spec, outputs):
        raise ValueError(f"the CUDA sampler takes contiguous fp32 or bf16 logits of up to {MAX_VOCAB} columns, the "
                         "tables' dtypes as SlotState holds them and 4-byte aligned embedding rows")  # fmt: skip
    n, v = logits.shape
    out = check_token_outputs(n, logits.device, outputs, spec.history)
    if n == 0:
        return out
    rows, history, eos, params = spec.rows, spec.history, spec.eos, spec.params
    table, emb = outputs.embed_table, outputs.embed_out
    words = _words(table[0], "an embedding row") if table is not None else 0
    plan = SamplerPlan(v, logits.dtype == torch.bfloat16, rows is not None, history is not None,
                       history is not None and history.record, eos is not None, words, trigger_first_now(logits),
                       threads or threads_for(v))  # fmt: skip
    eos_id, suppress_start, min_frames = (eos.eos_id, eos.suppress_start, eos.min_frames) if eos else (-1, -1, 0)
    null = ctypes.c_void_p(0)
    args = [
        logits, rows if rows is not None else null, history.seen if history else null,
        history.penalty if history else null, eos.ban if eos else null, params.do_sample, params.temperature,
        params.top_k, params.top_p, spec.seed, spec.frame, out, table if words else null, emb if words else null,
        ctypes.c_int(eos_id), ctypes.c_int(suppress_start), ctypes.c_int(min_frames),
        ctypes.c_uint((spec.codebook * 0x1E3779B9) & 0xFFFFFFFF), ctypes.c_int(out.stride(0)),
        ctypes.c_int(emb.stride(0) * emb.element_size() // 4 if words else 0),
    ]  # fmt: skip
    launch(_kernel(plan.defines), n, plan.threads, plan.smem, args, pdl_on(logits))
    return out
