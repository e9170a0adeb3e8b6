"""The CUDA kernels of kernels/cuda compiled by nvcc for sm_90, each as the text NVRTC compiles on
the GPU machine (nvrtc.kernel_text: a served plan's #defines prepended). The CPU emulation
(tests/cuda_emulation) replaces the kernels' PTX with C++, so a mistake there (an operand, a
constraint, an instruction Hopper lacks) shows only here or on a GPU; and ptxas reports each plan's
spills, which the served plans must not have. Skipped where nvcc is not installed."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from cadence.kernels.attention import cuda_decode_attention as cuda_attention
from cadence.kernels.launch.nvrtc import CUDA_COMMON, kernel_text
from cadence.kernels.linear import cuda_slab_gemm
from cadence.kernels.linear.cuda_slab_gemm import AttentionShape
from cadence.kernels.linear.cuda_slab_swiglu_gemm import SOURCE as SLAB_SWIGLU
from cadence.kernels.linear.cuda_slab_swiglu_gemm import slab_swiglu_plan
from cadence.kernels.sampling import cuda_sampler

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")

TALKER = AttentionShape(16, 8, 128, 16)


def _plans() -> dict[str, tuple[Path, tuple[tuple[str, int], ...]]]:
    """(source, defines) of the plans the 0.6B's walks serve (the 64-row graphs launch trigger first)."""
    attention = cuda_attention.attention_plan(64, 16, 8, 128, 16, torch.bfloat16)
    sampler = cuda_sampler.SamplerPlan
    code0 = sampler(3072, True, True, True, True, True, 512, threads=cuda_sampler.threads_for(3072))
    codes = sampler(2048, True, True, False, False, False, 512, threads=cuda_sampler.threads_for(2048))
    slabs = {
        "qkv with its norm": cuda_slab_gemm.slab_plan(4096, 1024, 1, norm=True, residual=True),
        "gate/up SwiGLU": cuda_slab_gemm.slab_plan(3072, 1024, 2, swiglu=True, norm=True, residual=True),
        "o with the attention": cuda_slab_gemm.slab_plan(1024, 2048, 1, attention=TALKER),
    }
    plans = {
        "decode attention": (cuda_attention.SOURCE, attention.defines),
        "decode attention, trigger first": (
            cuda_attention.SOURCE, dataclasses.replace(attention, trigger_first=True).defines),
        "decode attention, two new tokens a stream (the first pass)": (
            cuda_attention.SOURCE,
            cuda_attention.attention_plan(64, 16, 8, 128, 16, torch.bfloat16, new_tokens=2).defines),
        "slab swiglu gemm qkv": (SLAB_SWIGLU, slab_swiglu_plan(4096, 1024, 64).defines),
        "slab swiglu gemm gate/up": (SLAB_SWIGLU, slab_swiglu_plan(3072, 1024, 64, swiglu=True).defines),
        "slab swiglu gemm gate/up, trigger first": (
            SLAB_SWIGLU,
            dataclasses.replace(slab_swiglu_plan(3072, 1024, 64, swiglu=True), trigger_first=True).defines),
        "sampler code0": (cuda_sampler.SOURCE, code0.defines),
        "sampler codes": (cuda_sampler.SOURCE, codes.defines),
    }  # fmt: skip
    for name, plan in slabs.items():
        plans[f"slab {name}"] = (cuda_slab_gemm.SOURCE, plan.defines)
    return plans


PLANS = _plans()


@pytest.mark.parametrize("name", list(PLANS))
def test_compiles_for_hopper_without_spills(tmp_path, name):
    source, defines = PLANS[name]
    unit = tmp_path / source.name
    unit.write_text(kernel_text(source, defines))
    cmd = ["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-I", str(source.parent), "-I", str(CUDA_COMMON), "-o",
           str(tmp_path / "k.cubin"), str(unit)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", done.stderr)]
    assert spills and not any(spills), done.stderr[-2000:]
