"""Running a CUDA kernel's source on the CPU (tests/cuda_emulation: every CUDA thread a fiber, the
PTX the kernels use emulated): each kernel has a driver that reads its arguments from a file and
writes its outputs to another. For tests/test_slab_gemm.py, test_cuda_sampler.py and
test_cuda_attention.py."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import torch

from cadence.kernels.launch.nvrtc import CUDA_COMMON

EMULATION = Path(__file__).parent / "cuda_emulation"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the CPU emulation")


def blob(t: torch.Tensor | None) -> bytes:
    """A tensor as the drivers read a buffer: its byte count (u64), then its bytes (None: 0 bytes)."""
    if t is None:
        return struct.pack("<Q", 0)
    data = t.contiguous().cpu().view(torch.uint8).numpy().tobytes()
    return struct.pack("<Q", len(data)) + data


def emulate(tmp_path: Path, driver: str, source: Path, defines, args: bytes) -> bytes:
    """Builds `driver` (tests/cuda_emulation/DRIVER.cpp) around `source` with the kernel's
    `defines`, runs it on `args` and returns its output file."""
    exe = tmp_path / driver
    flags = [f"-D{name}={value}" for name, value in defines] + ["-DACT_BF16=1"]  # the kernels' bf16 stand-ins
    cmd = ["g++", "-std=c++20", "-O1", "-DCADENCE_EMULATE", *flags, f'-DKERNEL_SOURCE="{source}"',
           f"-I{EMULATION}", f"-I{CUDA_COMMON}", str(EMULATION / f"{driver}.cpp"), "-o", str(exe)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    (tmp_path / "args").write_bytes(args)
    done = subprocess.run([str(exe), str(tmp_path / "args"), str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return (tmp_path / "out").read_bytes()
