"""Triton kernels against their PyTorch definitions (TorchOps), on fresh random inputs: norms,
RoPE, programmatic dependent launch, the embedding, SnakeBeta and the code predictor's batch
invariance (the attention kernels: test_attention_kernels.py; the weight-streaming GEMMs:
test_linear_kernels.py; the sampler: test_sampling_kernels.py). Where they run: kernel_checks.py.
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEV, DTYPES, NEEDS_TRITON, tol

from cadence.kernels.sampling import RowParams, TokenSampling

pytestmark = NEEDS_TRITON


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(ops, dtype):
    tri, ref = ops
    g = torch.Generator(device=DEV).manual_seed(0)
    x = torch.randn(5, 1024, device=DEV, generator=g).to(dtype)
    res = torch.randn(5, 1024, device=DEV, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(1024, device=DEV, generator=g)).to(dtype)
    for r in (None, res):
        a, sa = tri.rms_norm(x, w, 1e-6, r)
        b, sb = ref.rms_norm(x, w, 1e-6, r)
        assert torch.equal(sa, sb)
        assert (a.float() - b.float()).abs().max() <= tol(dtype) * b.float().abs().max()


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_qk(ops, dtype):
    """The streaming codec's RoPE: q and k heads of a packed qkv, per-row fp32 cos/sin."""
    tri, ref = ops
    from cadence.models.qwen3_tts.layers import rope_cos_sin

    g = torch.Generator(device=DEV).manual_seed(8)
    n, hq, hkv, d = 6, 4, 2, 64
    qkv = torch.randn(n, (hq + 2 * hkv) * d, device=DEV, generator=g).to(dtype)
    cos, sin = rope_cos_sin(torch.tensor([0, 1, 5, 71, 300, 2000], device=DEV), d, 1e4, torch.float32)
    (qa, ka), (qb, kb) = tri.rope_qk(qkv, cos, sin, hq, hkv), ref.rope_qk(qkv, cos, sin, hq, hkv)
    assert qa.shape == (n, hq, d) and ka.shape == (n, hkv, d) and qa.dtype == dtype
    for a, b in ((qa, qb), (ka, kb)):
        assert (a.float() - b.float()).abs().max() <= tol(dtype) * (1 + b.float().abs().max())


def test_only_graphs_above_32_rows_trigger_first(ops):
    """Trigger-first (each kernel lets the next in before it waits) makes the 64-row decode step
    faster on an H200 and batch 1's slower, so only the 33-64-row bucket does it."""
    tri, _ = ops
    assert [tri.trigger_first_for(rows) for rows in (1, 4, 16, 32, 33, 64)] == [False] * 4 + [True] * 2


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="programmatic dependent launch needs a GPU of compute capability >= 9",
)
@pytest.mark.parametrize("trigger_first", [False, True])
def test_programmatic_dependent_launch_gives_the_same_bits(ops, trigger_first):
    """A chain of dependent kernels (norm, split-K GEMM, SwiGLU, GEMM, sampling) captured in a CUDA
    graph with every kernel launched early: each waits for the one before, so the result is the
    same bits as plain launches, whether a kernel lets the next in before its wait or after."""
    tri, _ = ops
    g = torch.Generator(device=DEV).manual_seed(11)
    x = torch.randn(3, 1024, device=DEV, generator=g).to(torch.bfloat16)
    w_norm = (1 + 0.1 * torch.randn(1024, device=DEV, generator=g)).to(torch.bfloat16)
    w_up = (torch.randn(2 * 3072, 1024, device=DEV, generator=g) / 32).to(torch.bfloat16)
    w_down = (torch.randn(1024, 3072, device=DEV, generator=g) / 55).to(torch.bfloat16)
    params = RowParams(
        do_sample=torch.ones(3, dtype=torch.bool, device=DEV), temperature=torch.full((3,), 0.9, device=DEV),
        top_k=torch.full((3,), 50, device=DEV), top_p=torch.full((3,), 0.9, device=DEV),
    )  # fmt: skip
    seed, frame = torch.arange(3, device=DEV) + 5, torch.zeros(3, dtype=torch.long, device=DEV)

    def chain():
        h = x
        for _ in range(4):
            normed, h = tri.rms_norm(h, w_norm, 1e-6, h)
            h = tri.linear(tri.silu_mul(tri.linear(normed, w_up)), w_down)
        return h, tri.sample_tokens(h.float(), TokenSampling(params, seed, frame, 0))

    def captured():
        chain()  # compile, and make the split-K workspaces, outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = chain()
        graph.replay()
        torch.cuda.synchronize()
        return out

    with tri.pdl_settings(False, trigger_first):
        plain = captured()
    with tri.pdl_settings(True, trigger_first):
        assert tri.pdl_launch(x)["USE_PDL"] == (2 if trigger_first else 1)
        early = captured()
    assert torch.equal(early[0], plain[0]) and torch.equal(early[1], plain[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plus", [False, True])
def test_embed_frame(ops, dtype, plus):
    """A frame's 16 embeddings summed (the talker's 3072-row table, then 15 of 2048 rows, stacked)
    and the text track added: the one kernel against the lookups, the sum and the add."""
    tri, ref = ops
    g = torch.Generator(device=DEV).manual_seed(9)
    sizes, h, b = [3072] + [2048] * 15, 96, 5
    tables = [torch.randn(n, h, device=DEV, generator=g).to(dtype) for n in sizes]
    table = torch.cat(tables)
    offsets = torch.tensor([0] + sizes[:-1], device=DEV).cumsum(0)
    codes = torch.stack([torch.randint(0, n, (b,), device=DEV, generator=g) for n in sizes], dim=1)
    text = torch.randn(b, h, device=DEV, generator=g).to(dtype) if plus else None
    a = tri.embed_frame(codes, table, offsets, text)
    c = ref.embed_frame(codes, table, offsets, text)
    eager = torch.stack([t[codes[:, j]] for j, t in enumerate(tables)], dim=1).sum(1)
    assert torch.equal(c, eager + text if plus else eager)
    assert (a.float() - c.float()).abs().max() <= tol(dtype) * c.float().abs().max()


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul(ops, dtype):
    tri, ref = ops
    gu = torch.randn(3, 2 * 1500, device=DEV, generator=torch.Generator(device=DEV).manual_seed(3)).to(dtype)
    assert (tri.silu_mul(gu).float() - ref.silu_mul(gu).float()).abs().max() <= tol(dtype) * 4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [1, 1920, 5000])
def test_snake_beta(ops, dtype, length):
    """The codec's activation, including a non-contiguous input (a trimmed transposed-conv output)
    and arguments of tens of radians (large log-alpha), where a fast approximate sine drifts."""
    tri, ref = ops
    g = torch.Generator(device=DEV).manual_seed(length)
    channels = 24
    log_alpha = torch.randn(channels, device=DEV, generator=g) * 1.5
    log_beta = torch.randn(channels, device=DEV, generator=g)
    wide = (torch.randn(3, channels, length + 7, device=DEV, generator=g) * 4).to(dtype)
    x = wide[..., :length]  # non-contiguous rows
    mine, theirs = tri.snake_beta(x, log_alpha, log_beta), ref.snake_beta(x, log_alpha, log_beta)
    assert mine.dtype == x.dtype and mine.shape == x.shape
    scale = 1.0 + theirs.float().abs()
    assert float(((mine.float() - theirs.float()) / scale).abs().max()) <= tol(dtype)


def _tensor(layout: str, batch: int, channels: int, length: int, **kw) -> torch.Tensor:
    """An uninitialised logical [B, C, T] tensor stored channel-major or time-major."""
    if layout == "time-major":
        return torch.empty(batch, length, channels, device=DEV, **kw).transpose(1, 2)
    return torch.empty(batch, channels, length, device=DEV, **kw)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", ["bias", "bias+residual"])
@pytest.mark.parametrize("layout", ["channel-major", "time-major"])
def test_snake_beta_with_fused_adds(ops, dtype, fused, layout):
    """The streaming codec's form: conv bias (and a residual) added in the same pass, the sum kept
    for the residual stream, the activation written into a view of a larger window (a conv's
    history buffer), in the channel-major layout of the offline decode or the time-major one of
    the streaming decoder's conv stack."""
    tri, ref = ops
    g = torch.Generator(device=DEV).manual_seed(7)
    batch, channels, length, history = 2, 20, 3000, 54
    log_alpha = torch.randn(channels, device=DEV, generator=g)
    log_beta = torch.randn(channels, device=DEV, generator=g)
    bias = torch.randn(channels, device=DEV, generator=g).to(dtype)
    x = _tensor(layout, batch, channels, length + 5, dtype=dtype)[..., 5:]
    x.copy_(torch.randn(x.shape, device=DEV, generator=g) * 3)
    residual = None
    if fused == "bias+residual":
        residual = _tensor(layout, batch, channels, length, dtype=dtype)
        residual.copy_(torch.randn(residual.shape, device=DEV, generator=g) * 3)
    results = []
    for impl in (tri, ref):
        window = _tensor(layout, batch, channels, history + length).fill_(7.0)
        total = _tensor(layout, batch, channels, length, dtype=dtype)
        act = impl.snake_beta(x, log_alpha, log_beta, bias, residual, window[..., history:], total)
        assert act.data_ptr() == window[..., history:].data_ptr()
        assert torch.equal(window[..., :history], torch.full_like(window[..., :history], 7.0))  # left alone
        results.append((window, total))
    (w_tri, s_tri), (w_ref, s_ref) = results
    assert torch.equal(s_tri, s_ref)  # the same adds, rounded at the same points
    expected_sum = x + bias[None, :, None] + (residual if residual is not None else 0)
    assert (s_ref.float() - expected_sum.float()).abs().max() <= tol(dtype) * (1 + expected_sum.float().abs().max())
    scale = 1.0 + w_ref.abs()
    assert float(((w_tri - w_ref) / scale).abs().max()) <= tol(torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 GEMMs go through the Triton kernels on a GPU only")
def test_code_predictor_rows_do_not_depend_on_the_batch(tiny_checkpoint):
    """In bf16 each stream's codes are the same in a batch of 5 as alone: the code predictor's layer
    kernels are batch-invariant (its first head must not read strided rows as contiguous)."""
    from cadence.models.qwen3_tts import Qwen3TTS
    from cadence.models.qwen3_tts.partitions import Qwen3TTSTalker

    model = Qwen3TTS.from_pretrained(tiny_checkpoint, DEV, "bf16")
    talker = Qwen3TTSTalker(model, 8, 2**24, 16, 64, 256, "triton", True, None, 64, 0)
    g = torch.Generator().manual_seed(4)
    b = 5
    hidden = torch.randn(b, model.config.talker.hidden_size, generator=g).to(DEV, torch.bfloat16)
    code0 = torch.randint(0, 2048, (b,), generator=g).to(DEV)
    step, seed = torch.zeros(b, dtype=torch.long, device=DEV), torch.arange(b, device=DEV)
    batched = talker.fast._predict_codes(hidden, code0, step, seed, torch.arange(b, device=DEV)).clone()
    for i in range(b):
        alone = talker.fast._predict_codes(hidden[i : i + 1], code0[i : i + 1], step[:1], seed[i : i + 1], step[:1])
        assert torch.equal(alone[0], batched[i]), f"row {i}"
