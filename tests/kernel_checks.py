"""What the kernel tests share: where the Triton ones run, how close a kernel must come to its
PyTorch definition (each operation's reference.py), and the decode attention's inputs (the CUDA
kernel's tests too).

They run on a CUDA device, or on the CPU through Triton's interpreter (TRITON_INTERPRET=1, fp32
only: scripts/test.sh installs Triton and sets it where no GPU is), and are skipped where Triton
is not installed. Their `ops` fixture (the Triton kernels and the definitions) is in conftest.py."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from cadence.kernels.backends import triton_available

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
NEEDS_TRITON = pytest.mark.skipif(
    not triton_available() or not (torch.cuda.is_available() or INTERPRET),
    reason="needs Triton with a CUDA device, or TRITON_INTERPRET=1",
)
DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32] if INTERPRET else [torch.float32, torch.bfloat16]


def tol(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 2e-2


def decode_rows(shape, dtype, seed, device=DEV, new_tokens: int = 1):
    """Inputs of one decode attention: each row its own sequence's new token, its pages its own,
    and the new tokens' cache cells NaN (a kernel that read them instead of taking the key and value
    from registers, or that left one unwritten, shows NaN). With new_tokens > 1, each sequence's
    last new_tokens tokens as that many consecutive rows (each row's context its position + 1, the
    sequence's page table on each), as the code predictor's first pass lays out its two positions."""
    from cadence.models.qwen3_tts.layers import rope_cos_sin

    hq, hkv, d, ps, contexts = shape
    g = torch.Generator(device=device).manual_seed(seed)
    n, p = len(contexts), -(-max(contexts) // ps)
    pages = 2 * n * p
    bt = torch.randperm(pages, device=device, generator=g)[: n * p].view(n, p).repeat_interleave(new_tokens, 0)
    last = torch.tensor(contexts, device=device) - 1
    pos = (last[:, None] - new_tokens + 1 + torch.arange(new_tokens, device=device)).flatten()
    ctx = pos + 1
    slots = bt.gather(1, (pos // ps)[:, None])[:, 0] * ps + pos % ps
    qkv = torch.randn(n * new_tokens, (hq + 2 * hkv) * d, device=device, generator=g).to(dtype)
    qn = (1 + 0.1 * torch.randn(d, device=device, generator=g)).to(dtype)
    kn = (1 + 0.1 * torch.randn(d, device=device, generator=g)).to(dtype)
    cos, sin = rope_cos_sin(torch.arange(max(contexts), device=device), d, 1e6, dtype)
    caches = [torch.randn(pages, ps, hkv, d, device=device, generator=g).to(dtype) for _ in range(2)]
    for c in caches:
        c.view(-1, hkv, d)[slots] = float("nan")
    return qkv, (qn, kn, 1e-6, cos, sin, pos), caches, (slots, bt, ctx, d**-0.5, hq, hkv)


def assert_pdl_graph_replays_eager(run, trigger_first: bool, replays: int = 5) -> None:
    """run() (returning tensors) eagerly, then captured in a CUDA graph launched with PDL in either
    order and replayed `replays` times: every replay gives the eager launches' bits (a kernel that
    leaves its workspace dirty for the next call, or reads what another program has not yet written,
    shows here)."""
    from cadence.kernels.launch.pdl import pdl_settings

    want = run()
    with pdl_settings(True, trigger_first=trigger_first):
        run()  # compiled and warm
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = run()
    for _ in range(replays):
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@contextlib.contextmanager
def switched(module, name: str, value):
    """A module constant read at call time (`module.name`, e.g. cuda_gemm64's MAX_ROWS) set to
    `value` for the block only."""
    previous = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, previous)


class Switched:
    """`fn` called with `module.name` set to `value` for each call only: a stack or a chain of ops
    that a test runs, and captures in a graph, with a module constant changed (`switched`)."""

    def __init__(self, fn, module, name: str, value):
        self.fn, self.module, self.name, self.value = fn, module, name, value

    def __call__(self, *args, **kwargs):
        with switched(self.module, self.name, self.value):
            return self.fn(*args, **kwargs)
