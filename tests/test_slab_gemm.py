"""The slab GEMM (kernels/linear/cuda/slab_gemm.cu: weights copied into shared memory before the PDL
wait, the norm before qkv and gate/up folded in) against its PyTorch definition, and a decoder stack
run with it against the same stack on the Triton layer kernels. The kernel needs a Hopper GPU
("gpu" marker); its plans (which GEMMs it takes, their shared memory) are checked everywhere.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest
import torch
from cuda_driver import blob, emulate, needs_gxx

from cadence.kernels.attention import reference as attention
from cadence.kernels.backends import load_ops
from cadence.kernels.linear import reference as linear
from cadence.kernels.linear.cuda_slab_gemm import MAX_ROWS, SMEM_LIMIT, LayerPlans, slab_plan
from cadence.kernels.norm import reference as norm

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
needs_hopper = pytest.mark.skipif(not HOPPER, reason="needs a GPU of compute capability >= 9")
EPS = 1e-6

SHAPES_06B = dict(qkv=(4096, 1024), o=(1024, 2048), gate_up=(6144, 1024), down=(1024, 3072))


def test_plans_cover_the_06b_layers_at_one_to_eight_rows():
    """Every GEMM of a 0.6B layer (talker and code predictor alike) has a plan at 1 to 8 rows:
    128 CTAs, each a slab that leaves room for the next kernel's CTA on its SM (gate/up's 96 KB slab
    with eight rows just fits, the warps' sums taking the slab's space after the dots)."""
    for rows in range(1, MAX_ROWS + 1):
        plans = LayerPlans.of(*SHAPES_06B.values(), rows)
        assert plans is not None
        for plan in (plans.qkv_first, plans.qkv, plans.o, plans.gate_up, plans.down):
            assert plan.grid == 128 and plan.smem <= SMEM_LIMIT and plan.m == rows
        assert plans.qkv.residual and not plans.qkv_first.residual and plans.gate_up.swiglu and plans.gate_up.norm
        assert (plans.qkv.rows_per_cta, plans.o.rows_per_cta, plans.gate_up.rows_per_cta) == (32, 8, 24)


def test_plans_refuse_what_the_kernel_cannot_hold():
    """More rows than MAX_ROWS, K not a multiple of 256, and slabs too big for two CTAs an SM (the
    1.7B's gate/up: 48 rows x 2 x 2048) get no plan, so those GEMMs stay on the layer kernels."""
    assert slab_plan(4096, 1024, MAX_ROWS + 1) is None
    assert slab_plan(4096, 1000, 1) is None
    assert slab_plan(6144, 2048, 1, swiglu=True, norm=True) is None
    assert LayerPlans.of((4096, 2048), (2048, 2048), (12288, 2048), (2048, 6144), 1) is None
    # a residual without the norm means nothing: the plan drops it
    assert not slab_plan(1024, 2048, 1, residual=True).residual


def test_slab_linear_names_what_its_plan_is_missing():
    """Arguments that do not fit the plan are refused before anything is launched."""
    from cadence.kernels.linear.cuda_slab_gemm import slab_linear

    x, w = torch.zeros(1, 1024, dtype=torch.bfloat16), torch.zeros(4096, 1024, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="norm_weight is needed"):
        slab_linear(x, w, slab_plan(4096, 1024, 1, norm=True))
    with pytest.raises(ValueError, match="residual is needed"):
        slab_linear(x, w, slab_plan(4096, 1024, 1, norm=True, residual=True), torch.ones(1024, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="do not fit"):
        slab_linear(torch.zeros(2, 1024, dtype=torch.bfloat16), w, slab_plan(4096, 1024, 1))


def _reference(x, w, swiglu, norm_w, res):
    """The GEMM's definition: the reference norm (rounded as the kernels round), then an fp32 product
    (SwiGLU as the reference defines it, from the fp32 projections rounded to bf16)."""
    inp, total = (x, None) if norm_w is None else norm.rms_norm(x, norm_w, EPS, res)
    if not swiglu:
        return torch.nn.functional.linear(inp.float(), w.float()), total
    gate_up = torch.nn.functional.linear(inp.float(), w.float()).to(x.dtype)
    return linear.silu_mul(gate_up).float(), total


@pytest.mark.parametrize("m", [1, 2, 4, 8])
@pytest.mark.parametrize(
    "n,k,kind", [(4096, 1024, "norm"), (4096, 1024, "norm+res"), (1024, 2048, ""), (3072, 1024, "swiglu+norm+res"),
                 (1024, 3072, ""), (1030, 1024, ""), (2048, 1024, "")],
)  # fmt: skip
@pytest.mark.gpu
@needs_hopper
def test_slab_linear_matches_the_definition(m, n, k, kind):
    """Each shape of a 0.6B layer (and 1030 outputs: a last CTA with fewer rows than the others)
    within bf16 rounding of the definition; the residual it returns is the exact bf16 sum."""
    from cadence.kernels.linear.cuda_slab_gemm import slab_linear

    swiglu, norm, residual = "swiglu" in kind, "norm" in kind, "res" in kind
    g = torch.Generator(device="cuda").manual_seed(n + k + m)
    dev, dt = "cuda", torch.bfloat16
    x = torch.randn(m, k, device=dev, generator=g).to(dt)
    w = (torch.randn((2 if swiglu else 1) * n, k, device=dev, generator=g) / k**0.5).to(dt)
    norm_w = (1 + 0.5 * torch.randn(k, device=dev, generator=g)).to(dt) if norm else None
    res = torch.randn(m, k, device=dev, generator=g).to(dt) if residual else None
    plan = slab_plan(n, k, m, swiglu, norm, residual)
    y, total = slab_linear(x, w, plan, norm_w, res, EPS)
    ref, ref_total = _reference(x, w, swiglu, norm_w, res)
    assert y.shape == (m, n) and torch.isfinite(y).all()
    assert (y.float() - ref).abs().max() <= 2e-2 * ref.abs().max()
    if norm:
        assert torch.equal(total, ref_total)
    else:
        assert total is None


def _stack(layers: int = 3):
    """A 0.6B-shaped decoder stack (talker / code predictor layers) of random bf16 weights, norms
    included, on the GPU."""
    from cadence.models.qwen3_tts.config import DecoderStackConfig
    from cadence.models.qwen3_tts.layers import Qwen3Stack

    cfg = DecoderStackConfig(hidden_size=1024, intermediate_size=3072, num_hidden_layers=layers,
                             num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=EPS,
                             rope_theta=1e6, vocab_size=2048, num_code_groups=16)  # fmt: skip
    torch.manual_seed(0)
    stack = Qwen3Stack(cfg)
    with torch.no_grad():
        for name, p in stack.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    return stack.to("cuda", torch.bfloat16)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("rows,decode", [(1, True), (2, True), (2, False), (4, True), (8, True), (8, False)])
def test_stack_with_slab_gemms_matches_the_layer_kernels(rows, decode):
    """Three full-size layers over a paged cache of 40 earlier tokens: the slab path (its GEMMs,
    the norms folded into qkv and gate/up, the final norm) gives the layer kernels' hidden states
    and cache writes within bf16 rounding, eagerly and replayed from a CUDA graph captured with
    programmatic dependent launch (the launch the decode graphs use). decode=False: the code
    predictor's first pass (rows of one stream, attention through the prefill kernels)."""
    from cadence.models.qwen3_tts.fused_stack import FusedStack

    stack = _stack()
    plain = FusedStack(stack, load_ops("triton"), 64)
    slab = FusedStack(stack, load_ops("triton"), 64, slab_max_rows=MAX_ROWS)
    assert slab.slab_max_rows == MAX_ROWS and slab._slab_plans(rows) is not None
    g = torch.Generator(device="cuda").manual_seed(rows)
    ps, ctx = 16, 40
    pages = 4 * rows
    cache_shape = (3, pages, ps, 8, 128)
    k0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    v0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(rows, 1024, device="cuda", generator=g).to(torch.bfloat16)
    if decode:  # each row its own stream at position ctx - 1
        table = torch.arange(pages, device="cuda").view(rows, 4)
        positions = torch.full((rows,), ctx - 1, device="cuda")
        lens = torch.full((rows,), ctx, device="cuda")
        slots = table[:, (ctx - 1) // ps] * ps + (ctx - 1) % ps
    else:  # one stream's new positions, each row attending its own prefix
        table = torch.arange(pages, device="cuda")[:4].expand(rows, 4).contiguous()
        positions = torch.arange(ctx - rows, ctx, device="cuda")
        lens = positions + 1
        slots = positions.clone()

    _check_against_layer_kernels(plain, slab, x, [positions, table, lens, slots], k0, v0, decode)


def _check_against_layer_kernels(plain, slab, x, index: list, k0, v0, decode: bool) -> None:
    """`slab`'s hidden states and cache writes within bf16 rounding of `plain`'s (the layer
    kernels), run eagerly and replayed from a CUDA graph captured with PDL, the two the same bits."""
    from cadence.kernels.launch.pdl import pdl_settings

    def run(fused, k, v):
        return fused(x, *index, k, v, decode=decode)

    k_ref, v_ref = k0.clone(), v0.clone()
    ref = run(plain, k_ref, v_ref).float()
    k_eager, v_eager = k0.clone(), v0.clone()
    eager = run(slab, k_eager, v_eager)
    k_graph, v_graph = k0.clone(), v0.clone()
    run(slab, k_graph.clone(), v_graph.clone())  # compiles every instance before the capture
    graph = torch.cuda.CUDAGraph()
    with pdl_settings(True, False), torch.cuda.graph(graph):
        out = run(slab, k_graph, v_graph)
    graph.replay()
    torch.cuda.synchronize()
    for got in (eager, out):
        assert (got.float() - ref).abs().max() <= 3e-2 * ref.abs().max()
    assert torch.equal(out, eager)  # the graph with PDL is the eager launches' bits
    for got, want in ((k_eager, k_ref), (v_eager, v_ref), (k_graph, k_ref), (v_graph, v_ref)):
        assert (got.float() - want.float()).abs().max() <= 3e-2 * want.float().abs().max()


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("rows,position", [(1, 9), (2, 0)])
def test_slab_attention_matches_the_definition(rows, position):
    """The o projection with the attention inside, on the GPU at the 0.6B code predictor's shapes
    (1024 outputs, 128 CTAs), for a decode row and for the first pass's two tokens: within bf16
    rounding of the reference definition, the cache's new keys and values the definition's (the keys
    within a bf16 step), the rest of the cache untouched."""
    from cadence.kernels.linear.cuda_slab_gemm import AttentionShape, DecodeAttention, slab_attention_linear, slab_plan

    g = torch.Generator(device="cuda").manual_seed(3)
    qkv, (q_norm, k_norm, cos, sin, k_cache, v_cache), index = _attention_case(g, "cuda", rows, position)
    w = (torch.randn(1024, 2048, device="cuda", generator=g) / 2048**0.5).to(torch.bfloat16)
    plan = slab_plan(1024, 2048, rows, attention=AttentionShape(16, 8, 128, 16))
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    ref = _attention_reference(qkv, w, q_norm, k_norm, cos, sin, k_ref, v_ref, index)
    args = DecodeAttention(q_norm, k_norm, cos, sin, *index.values(), k_cache, v_cache, 128**-0.5)
    y = slab_attention_linear(qkv, w, plan, args, EPS)
    torch.cuda.synchronize()
    assert (y.float() - ref).abs().max() <= 2e-2 * ref.abs().max()
    assert torch.equal(v_cache, v_ref)
    assert (k_cache.float() - k_ref.float()).abs().max() <= 1e-2 * k_ref.float().abs().max()
    assert torch.equal(k_cache[:, :position], k_ref[:, :position]) and torch.equal(k_cache[2], k_ref[2])
    with pytest.raises(ValueError, match="must be int64"):
        slab_attention_linear(qkv, w, plan, dataclasses.replace(args, positions=index["positions"].int()))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("decode", [True, False], ids=["decode-step", "first-pass"])
def test_stack_with_attention_inside_o_matches_the_layer_kernels(decode):
    """The code predictor's decode step (one row, a context of one 16-token page: the attention
    inside the o GEMMs) and two tokens of one stream at positions 0 and 1 (the slab GEMMs with the
    attention a kernel of its own): three full-size layers give the layer kernels' hidden states
    and cache writes within bf16 rounding, eagerly and under a PDL graph."""
    from cadence.kernels.linear import cuda_slab_gemm
    from cadence.models.qwen3_tts.fused_stack import FusedStack

    stack = _stack()
    plain = FusedStack(stack, load_ops("triton"), 16, attention_splits=1)
    inside = FusedStack(stack, load_ops("triton"), 16, attention_splits=1, slab_max_rows=2)
    rows = 1 if decode else 2
    assert inside._slab_plans(rows, cuda_slab_gemm.AttentionShape(16, 8, 128, 16)).o_attention is not None
    g = torch.Generator(device="cuda").manual_seed(5)
    cache_shape = (3, 3, 16, 8, 128)  # layers, pages (one a stream), page size, kv heads, head dim
    k0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    v0 = torch.randn(cache_shape, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(rows, 1024, device="cuda", generator=g).to(torch.bfloat16)
    at = [12] if decode else [0, 1]  # positions; then the page table, contexts and flat slots
    values = (at, [[1]] * rows, [p + 1 for p in at], [16 + p for p in at])
    index = [torch.tensor(v, device="cuda") for v in values]
    _check_against_layer_kernels(plain, inside, x, index, k0, v0, decode=decode)


def _emulate(tmp_path: Path, plan, tensors: list[torch.Tensor], n: int, tail: bytes = b"") -> torch.Tensor:
    """The kernel of `plan` built for the CPU emulation and run on x, w, res, norm_w (and with an
    attention its tensors and `tail`); its output file as int16 words."""
    from cadence.kernels.linear.cuda_slab_gemm import SOURCE

    args = b"".join(blob(t) for t in tensors[:4])
    args += struct.pack("<qqqqd", n, plan.rows_per_cta, plan.grid, plan.smem, EPS)
    args += b"".join(blob(t) for t in tensors[4:]) + tail
    out = emulate(tmp_path, "slab_driver", SOURCE, plan.defines, args)
    return torch.frombuffer(bytearray(out), dtype=torch.int16)


@needs_gxx
@pytest.mark.parametrize(
    "m,k,kind", [(1, 512, "norm"), (2, 512, "swiglu+norm+res"), (2, 1280, ""), (3, 512, "norm+res"),
                 (4, 512, "swiglu+norm+res"), (5, 512, ""), (8, 512, "swiglu+norm+res"), (8, 1280, "norm")]
)  # fmt: skip
def test_slab_kernel_logic_on_the_cpu(tmp_path, m, k, kind):
    """The kernel's source run on the CPU (tests/cuda_emulation: every CUDA thread a fiber, the bulk
    copies, mbarriers and mma.sync emulated) for small shapes: 40 outputs over four CTAs of 12 rows
    (the last with 4, so its tiles reach past the slab), one and two input rows, the folded norm
    with and without a residual, SwiGLU, K's 64-wide steps spread over the 8 warps (1280: some take
    3 steps, some 2), and three to eight input rows (from five on, the mma tile's upper eight A rows
    carry rows 4-7). Within bf16 rounding of the definition; the residual sum exact."""
    from cadence.kernels.linear.cuda_slab_gemm import SlabPlan

    swiglu, norm, residual = "swiglu" in kind, "norm" in kind, "res" in kind
    n, rows = 40, 12
    plan = SlabPlan(n, k, m, swiglu, norm, residual, rows_per_cta=rows)
    g = torch.Generator().manual_seed(m * k)
    dt = torch.bfloat16
    x = torch.randn(m, k, generator=g).to(dt)
    w = (torch.randn((2 if swiglu else 1) * n, k, generator=g) / k**0.5).to(dt)
    norm_w = (1 + 0.5 * torch.randn(k, generator=g)).to(dt)
    res = torch.randn(m, k, generator=g).to(dt)
    raw = _emulate(tmp_path, plan, [x, w, res, norm_w], n)
    y, total = raw[: m * n].view(dt).view(m, n), raw[m * n :].view(dt).view(m, k)
    ref, ref_total = _reference(x, w, swiglu, norm_w if norm else None, res if residual else None)
    assert torch.isfinite(y).all()
    assert (y.float() - ref).abs().max() <= 2e-2 * ref.abs().max()
    if residual:
        assert torch.equal(total, ref_total)


def _attention_case(g: torch.Generator, device="cpu", rows=1, position=9, heads=16, kv_heads=8, dim=128, page=16):
    """Code-predictor-shaped rows of one stream: qkv, norms, RoPE tables, a cache of 3 pages whose
    page 1 holds the stream's earlier tokens, and the rows' indices (int64) at `position` and on."""
    dt = torch.bfloat16
    pages = 3
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=g, device=device).to(dt)
    q_norm, k_norm = ((1 + 0.3 * torch.randn(dim, generator=g, device=device)).to(dt) for _ in range(2))
    angles = torch.arange(page, device=device)[:, None] * 0.1 * torch.arange(1, dim + 1, device=device)[None, :] / dim
    cos, sin = angles.cos().to(dt), angles.sin().to(dt)
    k_cache, v_cache = (torch.randn(pages, page, kv_heads, dim, generator=g, device=device).to(dt) for _ in range(2))
    at = [position + m for m in range(rows)]
    index = dict(positions=at, slots=[page + p for p in at], context_lens=[p + 1 for p in at], block_table=[[1]] * rows)
    index = {name: torch.tensor(value, device=device) for name, value in index.items()}
    return qkv, (q_norm, k_norm, cos, sin, k_cache, v_cache), index


def _attention_reference(qkv, w, q_norm, k_norm, cos, sin, k_cache, v_cache, index, heads=16, kv_heads=8):
    """The reference definition: QK-norm, RoPE and the cache write, paged attention, then o."""
    q = attention.qk_norm_rope_store(qkv, q_norm, k_norm, EPS, cos, sin, index["positions"], k_cache, v_cache,
                                     index["slots"], heads, kv_heads)  # fmt: skip
    out = attention.paged_attention(q, k_cache, v_cache, index["block_table"], index["context_lens"], 128**-0.5)
    return torch.nn.functional.linear(out.float(), w.float())


@needs_gxx
@pytest.mark.parametrize("rows,position", [(1, 9), (2, 0), (2, 5)])
def test_slab_attention_logic_on_the_cpu(tmp_path, rows, position):
    """The o projection with the code predictor's attention inside (ATTN) on the CPU emulation, 16
    query and 8 kv heads of 128, 40 outputs over four CTAs: a decode row at position 9 of page 1
    (its 9 earlier tokens copied from the cache before the wait); the first pass's two tokens at
    positions 0 and 1 (nothing from the cache, the second attending over the first); two tokens at
    5 and 6 (both). The output within bf16 rounding of the reference definition; the cache holds the
    definition's new keys and values (CTA 0 writes them; the keys equal here, the kernel's 1 / sqrt
    may differ from rsqrt in the last bit) and nothing else changed."""
    from cadence.kernels.linear.cuda_slab_gemm import AttentionShape, slab_plan

    g = torch.Generator().manual_seed(7 + rows + position)
    qkv, (q_norm, k_norm, cos, sin, k_cache, v_cache), index = _attention_case(g, rows=rows, position=position)
    n = 40
    w = (torch.randn(n, 2048, generator=g) / 2048**0.5).to(torch.bfloat16)
    plan = slab_plan(n, 2048, rows, attention=AttentionShape(16, 8, 128, 16))
    assert plan is not None and plan.grid == 40
    plan = dataclasses.replace(plan, rows_per_cta=12)
    values = [int(v) for t in index.values() for v in t.reshape(-1)]
    tail = struct.pack(f"<{len(values)}qd", *values, 128**-0.5)
    raw = _emulate(tmp_path, plan, [qkv, w, qkv, qkv, q_norm, k_norm, cos, sin, k_cache, v_cache], n, tail)
    y = raw[: rows * n].view(torch.bfloat16).view(rows, n)
    caches = raw[rows * n + rows * 2048 :].view(torch.bfloat16).view(2, *k_cache.shape)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    ref = _attention_reference(qkv, w, q_norm, k_norm, cos, sin, k_ref, v_ref, index)
    assert torch.isfinite(y).all()
    assert (y.float() - ref).abs().max() <= 2e-2 * ref.abs().max()
    assert torch.equal(caches[1], v_ref)
    assert (caches[0].float() - k_ref.float()).abs().max() <= 1e-2 * k_ref.float().abs().max()
    assert torch.equal(caches[0][:, :position], k_cache[:, :position]) and torch.equal(caches[0][2], k_cache[2])


def test_slab_path_is_off_where_the_kernel_cannot_run(tiny_model):
    """On the CPU (and for fp32 weights, or GPUs before Hopper) a stack asked for the slab GEMM runs
    the layer kernels; the engine's setting takes 0-8 rows and says which values it allows."""
    from cadence.engine.config import EngineConfig
    from cadence.kernels.config import KernelConfig
    from cadence.models.qwen3_tts.fused_stack import FusedStack

    stack = FusedStack(tiny_model.talker.model, load_ops("torch"), 64, slab_max_rows=2)
    assert stack.slab_max_rows == 0
    assert EngineConfig(kernels=KernelConfig(slab_max_rows=2)).kernels.slab_max_rows == 2
    assert KernelConfig(slab_max_rows=MAX_ROWS).slab_max_rows == MAX_ROWS
    with pytest.raises(ValueError, match="slab_max_rows must be 0 \\(off\\) or 1-8"):
        KernelConfig(slab_max_rows=MAX_ROWS + 1)
