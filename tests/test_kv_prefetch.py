"""Cached keys and values pulled into L2 ahead of a decode layer's attention (kernels/norm/kv_prefetch.py,
the KV prefetch): the budget, which norm of a stack prefetches which layer (CPU, the PyTorch ops),
which pages a norm program picks (the Triton helper, under the interpreter too), and on a GPU that a
stack with the prefetch on computes the same bits as without it (a hint only)."""

from __future__ import annotations

import os

import pytest
import torch

from cadence.kernels.linear import reference as linear
from cadence.kernels.norm import reference as norm
from cadence.kernels.norm.kv_prefetch import KvPrefetch, KvPrefetchPlan
from cadence.kernels.ops import TorchOps, load_ops, triton_available
from cadence.models.qwen3_tts.config import DecoderStackConfig
from cadence.models.qwen3_tts.fused_stack import FusedStack
from cadence.models.qwen3_tts.layers import Qwen3Stack


def test_the_budget_is_shared_by_the_rows():
    """32 MB a layer of the 0.6B talker's bf16 keys and values (4 KB a token): 128 tokens a row at
    64 rows, 32 at 256; none where a row's token does not fit."""
    k = torch.empty(2, 16, 8, 128, dtype=torch.bfloat16)
    plan = KvPrefetchPlan(megabytes=32)
    assert [plan.tokens(rows, k) for rows in (1, 64, 256)] == [8192, 128, 32]
    assert KvPrefetchPlan(megabytes=0.001).tokens(1, k) == 0 and KvPrefetchPlan().tokens(64, k) == 0


def _tiny_stack(layers: int = 3) -> Qwen3Stack:
    cfg = DecoderStackConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=1e4, vocab_size=32,
                             num_code_groups=4)  # fmt: skip
    torch.manual_seed(0)
    return Qwen3Stack(cfg)


class RecordingOps(TorchOps):
    """The PyTorch ops, recording each norm's prefetch (which layer's keys, or None) in call order."""

    def __init__(self, calls: list):
        self.calls = calls

    def rms_norm(self, x, weight, eps, residual=None, prefetch=None):
        self.calls.append(("norm", prefetch))
        return norm.rms_norm(x, weight, eps, residual)

    def linear_rms_norm(self, x, weight, norm_weight, eps, residual, prefetch=None):
        self.calls.append(("linear+norm", prefetch))
        return norm.rms_norm(linear.linear(x, weight), norm_weight, eps, residual)


def _decode_inputs(rows: int, layers: int, ctx: int = 20, ps: int = 8):
    g = torch.Generator().manual_seed(1)
    pages = rows * 4
    k = torch.randn(layers, pages, ps, 2, 16, generator=g)
    v = torch.randn(layers, pages, ps, 2, 16, generator=g)
    table = torch.randperm(pages, generator=g).view(rows, 4)
    lens = torch.full((rows,), ctx)
    slots = table[:, (ctx - 1) // ps] * ps + (ctx - 1) % ps
    x = torch.randn(rows, 64, generator=g)
    return x, [lens - 1, table, lens, slots], k, v


def test_the_norm_before_a_layers_attention_prefetches_that_layers_cache():
    """Layer 0's cache from the stack's first norm; layer i + 1's from the norm after layer i's down
    (before its qkv); nothing after the last layer, nothing for prefill rows or two new tokens a
    sequence (a norm program is a row's sequence only in one-token decode), nothing with the plan
    off. The stack's output is the same either way."""
    layers = 3
    calls: list = []
    stack = _tiny_stack(layers)
    x, index, k, v = _decode_inputs(rows=3, layers=layers)
    # 12 tokens a row: 3 rows of 256-byte tokens (keys and values, 2 heads of 16 fp32)
    plan = KvPrefetchPlan(megabytes=3 * 12 * 256 / 2**20)
    with torch.no_grad():
        out = FusedStack(stack, RecordingOps(calls), 64, kv_prefetch=plan)(x, *index, k, v, decode=True)
    assert [kind for kind, _ in calls] == ["norm"] + ["linear+norm"] * 2 * layers
    prefetched = [(n, p) for n, (_, p) in enumerate(calls) if p is not None]
    # call 0: the first norm; then layer i's norm after o is call 1 + 2i, after down 2 + 2i
    assert [n for n, _ in prefetched] == [0] + [2 * i for i in range(1, layers)]
    for layer, (_, p) in enumerate(prefetched):
        assert isinstance(p, KvPrefetch) and p.tokens == 12
        assert p.k_cache.data_ptr() == k[layer].data_ptr() and p.v_cache.data_ptr() == v[layer].data_ptr()
        assert p.block_table is index[1] and p.context_lens is index[2]
    calls.clear()
    with torch.no_grad():
        off = FusedStack(stack, RecordingOps(calls), 64)(x, *index, k, v, decode=True)
        assert torch.equal(out, off) and all(p is None for _, p in calls)
        calls.clear()
        FusedStack(stack, RecordingOps(calls), 64, kv_prefetch=plan)(x, *index, k, v, decode=False)
        assert all(p is None for _, p in calls)
        calls.clear()  # nor for two new tokens a sequence (the code predictor's first pass: rows are not sequences)
        two = FusedStack(stack, RecordingOps(calls), 64, kv_prefetch=plan)
        two(x[:2], *(t[:2] for t in index), k, v, decode=True, new_tokens=2)
        assert calls and all(p is None for _, p in calls)


if triton_available():  # CI's torch has no Triton
    import triton
    import triton.language as tl

    from cadence.kernels.norm.triton_kv_prefetch import kv_prefetch_pages

    @triton.jit
    def _pages_kernel(bt_ptr, ctx_ptr, page_ptr, tokens_ptr, bt_stride, num_pages, TOKENS: tl.constexpr,
                      SLOTS: tl.constexpr, PS: tl.constexpr):  # fmt: skip
        """Each program's kv_prefetch_pages, stored: a row's slots' pages and token counts."""
        row = tl.program_id(0)
        page, count = kv_prefetch_pages(bt_ptr, ctx_ptr, row, bt_stride, num_pages, TOKENS, SLOTS, PS)
        i = tl.arange(0, SLOTS)
        tl.store(page_ptr + row * SLOTS + i, page)
        tl.store(tokens_ptr + row * SLOTS + i, count)


needs_triton = pytest.mark.skipif(
    not triton_available() or not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"),
    reason="needs Triton with a CUDA device, or TRITON_INTERPRET=1",
)


@needs_triton
@pytest.mark.parametrize("tokens", [12, 16, 40, 200])
def test_a_norm_program_picks_its_rows_first_tokens_pages(tokens):
    """kv_prefetch_pages: slot i names page i of the row's table and how many of its tokens fall in
    the row's first min(context, tokens); together the slots cover exactly those cells. Table
    entries outside the pool are clamped into it, and a table shorter than the tokens ends there."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ps, num_pages, slots = 16, 50, 32
    g = torch.Generator().manual_seed(tokens)
    table = torch.randperm(num_pages, generator=g)[:40].view(4, 10)
    table[3, 0], table[3, 1] = -7, num_pages + 3  # outside the pool: clamped
    ctx = torch.tensor([1, 15, 33, 170])  # row 3's past its table's 10 pages (a stale context read early)
    page = torch.full((4, slots), -1, dtype=torch.int64, device=dev)
    count = torch.full((4, slots), -1, dtype=torch.int32, device=dev)
    _pages_kernel[(4,)](table.to(dev), ctx.to(dev), page, count, table.stride(0), num_pages, TOKENS=tokens,
                       SLOTS=slots, PS=ps)  # fmt: skip
    page, count = page.cpu(), count.cpu()
    assert bool(((page >= 0) & (page < num_pages)).all())
    for row in range(4):
        covered = min(int(ctx[row]), tokens, 10 * ps)
        want = {(int(table[row, t // ps].clamp(0, num_pages - 1)), t % ps) for t in range(covered)}
        got = {(int(page[row, i]), t) for i in range(slots) for t in range(int(count[row, i]))}
        assert got == want
        assert int(count[row].sum()) == covered  # no cell twice


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9, reason="Hopper")
@pytest.mark.parametrize("megabytes", [32, 128, 4])
@pytest.mark.parametrize("stack_kind", ["talker", "code predictor"])
def test_a_stack_with_the_prefetch_computes_the_same_bits(megabytes, stack_kind):
    """The prefetch is a hint: three 0.6B-shaped layers at 64 decode rows give the same hidden
    states and cache writes, bit for bit, with it as without, eagerly and replayed from a graph
    captured with PDL, trigger first (as the decode step launches them at batch 64). As the talker
    runs them: contexts of 1-500 tokens (the budgets: 128, 512 and 16 tokens a row; the Triton
    attention); as the code predictor does: one 16-token page a row, contexts of 1-16 (the CUDA
    attention's short calls)."""
    from test_slab_gemm import _stack

    from cadence.kernels.launch.pdl import pdl_settings

    stack = _stack()
    talker = stack_kind == "talker"
    positions, splits, longest = (512, None, 500) if talker else (16, 1, 16)
    triton_ops = load_ops("triton")
    plain = FusedStack(stack, triton_ops, positions, attention_splits=splits)
    ahead = FusedStack(stack, triton_ops, positions, attention_splits=splits, kv_prefetch=KvPrefetchPlan(megabytes))
    rows, ps = 64, 16
    per_row = positions // ps
    g = torch.Generator(device="cuda").manual_seed(7)
    cache_shape = (3, rows * per_row + 1, ps, 8, 128)
    k0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    v0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(rows, 1024, device="cuda", generator=g).to(torch.bfloat16)
    table = torch.randperm(rows * per_row, device="cuda", generator=g).view(rows, per_row)
    lens = torch.randint(1, longest + 1, (rows,), device="cuda", generator=g)
    slots = table.gather(1, ((lens - 1) // ps)[:, None])[:, 0] * ps + (lens - 1) % ps
    index = [lens - 1, table, lens, slots]

    def run(fused, graph: bool):
        k, v = k0.clone(), v0.clone()
        if not graph:
            return fused(x, *index, k, v, decode=True), k, v
        fused(x, *index, k.clone(), v.clone(), decode=True)  # compiles every instance before the capture
        captured = torch.cuda.CUDAGraph()
        with pdl_settings(True, True), torch.cuda.graph(captured):
            out = fused(x, *index, k, v, decode=True)
        captured.replay()
        torch.cuda.synchronize()
        return out, k, v

    for graph in (False, True):
        for want, got in zip(run(plain, graph), run(ahead, graph), strict=True):
            assert torch.equal(want, got)
