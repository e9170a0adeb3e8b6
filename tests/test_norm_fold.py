"""The RMSNorm folded into the GEMMs around it at 33-64 rows (kernels/triton_norm_fold.py, perf-notes
#110): the split GEMM that adds the residual and its rows' squares, the GEMM that normalises the
tiles it loads, and a decoder stack run that way, against the norm kernel between two GEMMs
(triton_ops.linear_rms_norm, then linear) and the PyTorch definitions. Triton on a GPU, or on the
CPU through the interpreter (TRITON_INTERPRET=1, fp32)."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEV, INTERPRET, NEEDS_TRITON, tol

pytestmark = NEEDS_TRITON
DTYPE = torch.float32 if INTERPRET else torch.bfloat16


def close_to_the_norm_kernel(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The folded path's sums of squares add by slab, then over the slabs, where the norm kernel adds
    them in one reduction: a normalised value may round the other way, and a GEMM over it moves by
    about that step times its weight."""
    scale = b.float().abs().max()
    step = (1e-5 if a.dtype == torch.float32 else 2 * torch.finfo(a.dtype).eps) * 4
    return bool(((a.float() - b.float()).abs() <= step * scale).all())


@pytest.mark.parametrize("m", [33, 64])
def test_the_two_folded_gemms_match_the_norm_between_them(ops, m, monkeypatch):
    """o (1024 x 2048, split K) with the residual added and the squares kept, then a GEMM that
    normalises its input rows: the next residual the same bits as the norm kernel's, the GEMM's
    output within a rounding step of the unfused GEMM's and within rounding of the definition; the
    tickets left at 0; a second call on other rows through the same workspaces right too."""
    from cadence.kernels import triton_norm_fold as fold
    from cadence.kernels.triton_linear import _split_k_workspace

    tri, ref = ops
    monkeypatch.setattr(fold, "DTYPES", (DTYPE,))
    monkeypatch.setattr(fold, "ENABLED", True)
    g = torch.Generator(device=DEV).manual_seed(m)
    n, k, n2 = 1024, 2048, 256
    x = torch.randn(m, k, device=DEV, generator=g).to(DTYPE)
    w = (torch.randn(n, k, device=DEV, generator=g) / k**0.5).to(DTYPE)
    res = torch.randn(m, n, device=DEV, generator=g).to(DTYPE)
    norm_w = (1 + 0.1 * torch.randn(n, device=DEV, generator=g)).to(DTYPE)
    w2 = (torch.randn(n2, n, device=DEV, generator=g) / n**0.5).to(DTYPE)
    tiles = fold.fold_tiles(m, n, k, DTYPE)
    assert tiles is not None and tiles.split_k == 4 and tiles.block_m == 64
    for call in range(2):
        rows = x if call == 0 else 2 * x.flip(0)
        pending = tri.linear_add_residual(rows, w, res)
        y = tri.normed_linear(pending, norm_w, w2, 1e-6)
        normed, total = tri.linear_rms_norm(rows, w, norm_w, 1e-6, res, force=True)
        assert torch.equal(pending.total, total)
        unfused = tri.linear(normed, w2, force=True)
        assert close_to_the_norm_kernel(y, unfused), call
        want_normed, want_total = ref.linear_rms_norm(rows.float(), w.float(), norm_w.float(), 1e-6, res.float())
        want = ref.linear(want_normed, w2.float())
        assert (pending.total.float() - want_total).abs().max() <= tol(DTYPE) * 4 * want_total.abs().max()
        assert (y.float() - want).abs().max() <= tol(DTYPE) * 8 * want.abs().max()
        _, counters = _split_k_workspace(x.device, n, tiles)
        assert int(counters.abs().sum()) == 0


def test_the_fold_applies_to_33_to_64_rows_of_the_06b_layers(monkeypatch):
    """Off unless switched on; on, the 0.6B layer's shapes at 33-64 rows (o and down split K, qkv
    and gate/up whole), not at 32 or 65 rows, not in fp32 (cuBLAS's exact products), and a direct
    call outside its tiles is a clear error."""
    from cadence.kernels import triton_norm_fold as fold

    shapes = ((4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072))
    monkeypatch.setattr(fold, "ENABLED", False)
    assert not fold.norm_fold_applies(64, *shapes, torch.bfloat16)
    monkeypatch.setattr(fold, "ENABLED", True)
    assert fold.norm_fold_applies(33, *shapes, torch.bfloat16) and fold.norm_fold_applies(64, *shapes, torch.bfloat16)
    assert not fold.norm_fold_applies(32, *shapes, torch.bfloat16)
    assert not fold.norm_fold_applies(65, *shapes, torch.bfloat16)
    assert not fold.norm_fold_applies(64, *shapes, torch.float32)
    x = torch.zeros(64, 2048, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="residual"):
        fold.linear_add_residual(x, torch.zeros(1024, 2048, dtype=torch.bfloat16), torch.zeros(64, 512))


@pytest.mark.skipif(not INTERPRET, reason="the interpreter's run of the stack (the GPU one is below)")
def test_stack_with_the_norms_folded_on_the_cpu(monkeypatch):
    """One 0.6B-shaped fp32 layer at 33 decode rows through the interpreter: FusedStack takes the
    folded path when switched on, and its hidden states and cache writes are the layer path's within
    fp32 rounding (the GEMMs there are PyTorch's: fp32 does not take the Triton GEMM)."""
    from cadence.kernels import triton_norm_fold as fold
    from cadence.kernels import triton_ops
    from cadence.models.qwen3_tts.config import DecoderStackConfig
    from cadence.models.qwen3_tts.fused_stack import FusedStack
    from cadence.models.qwen3_tts.layers import Qwen3Stack

    cfg = DecoderStackConfig(hidden_size=1024, intermediate_size=3072, num_hidden_layers=1, num_attention_heads=16,
                             num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6, rope_theta=1e6,
                             vocab_size=2048, num_code_groups=16)  # fmt: skip
    torch.manual_seed(0)
    stack = FusedStack(Qwen3Stack(cfg).eval(), triton_ops, 32)
    rows, ps, ctx = 33, 16, 20
    g = torch.Generator().manual_seed(1)
    k0, v0 = (torch.randn(1, 2 * rows, ps, 8, 128, generator=g) for _ in range(2))
    x = torch.randn(rows, 1024, generator=g)
    table = torch.arange(2 * rows).view(rows, 2)
    index = [torch.full((rows,), ctx - 1), table, torch.full((rows,), ctx), table[:, 1] * ps + (ctx - 1) % ps]
    folded_calls = []
    original = FusedStack._folded_layers
    monkeypatch.setattr(FusedStack, "_folded_layers", lambda self, *a: folded_calls.append(1) or original(self, *a))
    with torch.no_grad():
        k_ref, v_ref = k0.clone(), v0.clone()
        ref = stack(x, *index, k_ref, v_ref, decode=True)
        assert not folded_calls
        monkeypatch.setattr(fold, "ENABLED", True)
        monkeypatch.setattr(fold, "DTYPES", (torch.float32,))
        k_got, v_got = k0.clone(), v0.clone()
        got = stack(x, *index, k_got, v_got, decode=True)
    assert folded_calls == [1]
    assert (got - ref).abs().max() <= 1e-4 * ref.abs().max()
    assert torch.allclose(k_got, k_ref, atol=1e-5) and torch.allclose(v_got, v_ref, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(INTERPRET or not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("trigger_first", [False, True])
def test_stack_with_the_norms_folded_matches_the_layer_kernels(trigger_first, monkeypatch):
    """Three full-size bf16 layers at 48 decode rows over 40 cached tokens: the folded stack's hidden
    states and cache writes within bf16 rounding of the layer kernels', eagerly and replayed from a
    CUDA graph captured with PDL in either launch order (the b64 graphs trigger first; the squares'
    workspace is shared by o and down), the graph the eager launches' bits."""
    from test_slab_gemv import _stack

    from cadence.kernels import triton_norm_fold as fold
    from cadence.kernels import triton_ops
    from cadence.models.qwen3_tts.fused_stack import FusedStack

    stack = FusedStack(_stack(), triton_ops, 64)
    rows, ps, ctx = 48, 16, 40
    g = torch.Generator(device="cuda").manual_seed(rows)
    pages = 4 * rows
    cache_shape = (3, pages, ps, 8, 128)
    k0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    v0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(rows, 1024, device="cuda", generator=g).to(torch.bfloat16)
    table = torch.arange(pages, device="cuda").view(rows, 4)
    index = [torch.full((rows,), ctx - 1, device="cuda"), table, torch.full((rows,), ctx, device="cuda"),
             table[:, (ctx - 1) // ps] * ps + (ctx - 1) % ps]  # fmt: skip

    def run(k, v):
        return stack(x, *index, k, v, decode=True)

    k_ref, v_ref = k0.clone(), v0.clone()
    ref = run(k_ref, v_ref).float()
    monkeypatch.setattr(fold, "ENABLED", True)
    shapes = (L := stack.layers[0]).wqkv.shape, L.wo.shape, L.wgu.shape, L.wdown.shape
    assert fold.norm_fold_applies(rows, *shapes, torch.bfloat16)
    k_eager, v_eager = k0.clone(), v0.clone()
    eager = run(k_eager, v_eager)
    k_graph, v_graph = k0.clone(), v0.clone()
    graph = torch.cuda.CUDAGraph()
    with triton_ops.pdl_settings(True, trigger_first):
        run(k_graph.clone(), v_graph.clone())  # compiles every instance before the capture
        with torch.cuda.graph(graph):
            out = run(k_graph, v_graph)
    graph.replay()
    torch.cuda.synchronize()
    assert (eager.float() - ref).abs().max() <= 3e-2 * ref.abs().max()
    assert torch.equal(out, eager)
    for got, want in ((k_eager, k_ref), (v_eager, v_ref), (k_graph, k_ref), (v_graph, v_ref)):
        assert (got.float() - want.float()).abs().max() <= 3e-2 * want.float().abs().max()
