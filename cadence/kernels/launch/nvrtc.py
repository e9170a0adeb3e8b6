"""CUDA kernels compiled at run time by NVRTC through `torch.cuda._compile_kernel` (no compiler to
install: PyTorch's CUDA wheels carry NVRTC) and launched through the driver's cuLaunchKernelEx, so
that programmatic dependent launch (PDL) can be asked for (PyTorch's launcher cannot). Each operation
keeps its kernels' sources in its own `cuda/` folder (kernels/linear/cuda, ...); the headers they
share are in kernels/cuda_common."""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger(__name__)

CUDA_COMMON = Path(__file__).resolve().parents[1] / "cuda_common"  # the headers every kernel's source may include


def kernel_text(source: Path, defines: tuple[tuple[str, int], ...]) -> str:
    """What NVRTC compiles for an instance: `source` with its compile-time constants as `#define`s
    prepended (tests/test_cuda_compile.py hands nvcc the same text)."""
    return "".join(f"#define {macro} {value}\n" for macro, value in defines) + source.read_text()


@functools.cache
def compile_source(source: Path, name: str, defines: tuple[tuple[str, int], ...], smem: int = 0):
    """Kernel `name` of `source` with these compile-time constants (kernel_text; the include path is
    the source's folder, then CUDA_COMMON), for compute capability 9.0; allowed `smem` bytes of
    dynamic shared memory where that is more than the default 48 KB."""
    text = kernel_text(source, defines)
    include = [str(source.parent), str(CUDA_COMMON)]
    kernel = torch.cuda._compile_kernel(text, name, compute_capability="90", cuda_include_dirs=include)
    if smem > 48 * 1024:
        allow_shared_memory(kernel, smem)
    return kernel


def runs_on(device: torch.device, what: str, probe: Callable[[], object]) -> bool:
    """Whether a CUDA kernel runs on `device`: compute capability 9.0 or newer (bulk
    copies, mbarriers, griddepcontrol) and NVRTC compiles `probe`'s instance there. Where it cannot
    (no NVRTC, a PyTorch without _compile_kernel) the reason is logged and `what` stays off."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (9, 0):
        return False
    try:
        with torch.cuda.device(device):
            probe()
    except (OSError, RuntimeError, AttributeError) as e:
        log.warning("%s is off: NVRTC could not compile it (%s)", what, e)
        return False
    return True


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


# -- the driver's cuLaunchKernelEx, for programmatic dependent launch -------------------------------


class _AttrValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("programmatic_stream_serialization", ctypes.c_int)]


class _Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [
        ("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
        ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
        ("shared_mem", ctypes.c_uint), ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_Attr)), ("num_attrs", ctypes.c_uint),
    ]  # fmt: skip


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def launch(kernel, grid: int, threads: int, smem: int, args: list, pdl: bool) -> None:
    """kernel<<<grid, threads, smem, current stream>>>(args) through cuLaunchKernelEx, with PDL if
    asked (a CUDA graph being captured on the stream records it as a programmatic edge). Tensors
    are passed as their data pointers, everything else as the ctypes value it is."""
    values = [ctypes.c_void_p(a.data_ptr()) if isinstance(a, torch.Tensor) else a for a in args]
    pointers = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
    attr = _Attr(id=_PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value.programmatic_stream_serialization = 1
    config = _LaunchConfig(grid, 1, 1, threads, 1, 1, smem, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream),
                           ctypes.pointer(attr), 1 if pdl else 0)  # fmt: skip
    libcuda = torch.cuda._utils._get_gpu_runtime_library()
    status = libcuda.cuLaunchKernelEx(ctypes.byref(config), kernel.func, pointers, None)
    if status != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed: CUresult {status}")
