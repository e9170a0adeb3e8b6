"""CUDA kernels compiled at run time by NVRTC through `torch.cuda._compile_kernel` (no compiler to
install: PyTorch's CUDA wheels carry NVRTC), for the kernels in kernels/cuda/: the persistent code
predictor (cuda_code_predictor.py) and the slab GEMM (cuda_gemv.py)."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch


@functools.cache
def compile_source(source: Path, name: str, defines: tuple[tuple[str, int], ...]):
    """Kernel `name` of `source` with these compile-time constants (`#define`s prepended; the
    source's folder is the include path), for compute capability 9.0."""
    text = "".join(f"#define {macro} {value}\n" for macro, value in defines) + source.read_text()
    return torch.cuda._compile_kernel(text, name, compute_capability="90", cuda_include_dirs=[str(source.parent)])


def allow_shared_memory(kernel, nbytes: int) -> None:
    """Lets `kernel` take `nbytes` (> 48 KB) of dynamic shared memory: through the kernel's own
    method where this PyTorch has it, else the driver's cuFuncSetAttribute."""
    if hasattr(kernel, "set_shared_memory_config"):
        kernel.set_shared_memory_config(nbytes)
        return
    max_dynamic_shared_size_bytes = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    status = torch.cuda._utils._get_gpu_runtime_library().cuFuncSetAttribute(
        kernel.func, max_dynamic_shared_size_bytes, ctypes.c_int(nbytes)
    )
    if status != 0:
        raise RuntimeError(f"cuFuncSetAttribute(max dynamic shared memory {nbytes}) failed: CUresult {status}")
