"""The attention kernels (Triton) against their PyTorch definitions (attention/reference.py), on fresh random
inputs: the QK-norm/RoPE/cache write, the paged decode attention with its launch choices, and the
two as one decode kernel. Where they run: kernel_checks.py.
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEV, DTYPES, NEEDS_TRITON, decode_rows, tol

pytestmark = NEEDS_TRITON


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_rope_store(ops, dtype):
    tri, ref = ops
    from cadence.models.qwen3_tts.layers import rope_cos_sin

    g = torch.Generator(device=DEV).manual_seed(1)
    n, hq, hkv, d, pages, ps = 6, 4, 2, 32, 10, 4
    qkv = torch.randn(n, (hq + 2 * hkv) * d, device=DEV, generator=g).to(dtype)
    qn = (1 + 0.1 * torch.randn(d, device=DEV, generator=g)).to(dtype)
    kn = (1 + 0.1 * torch.randn(d, device=DEV, generator=g)).to(dtype)
    cos, sin = rope_cos_sin(torch.arange(64, device=DEV), d, 1e6, dtype)
    pos = torch.tensor([0, 3, 17, 40, 63, 5], device=DEV)
    slots = torch.randperm(pages * ps, device=DEV, generator=g)[:n]
    caches = [torch.full((pages, ps, hkv, d), float("nan"), device=DEV, dtype=dtype) for _ in range(4)]
    qa = tri.qk_norm_rope_store(qkv, qn, kn, 1e-6, cos, sin, pos, caches[0], caches[1], slots, hq, hkv)
    qb = ref.qk_norm_rope_store(qkv, qn, kn, 1e-6, cos, sin, pos, caches[2], caches[3], slots, hq, hkv)
    t = tol(dtype)
    assert (qa.float() - qb.float()).abs().max() <= t * 4
    for a, b in ((caches[0], caches[2]), (caches[1], caches[3])):
        written = a.view(-1, hkv, d)[slots]
        assert not written.isnan().any()
        assert (written.float() - b.view(-1, hkv, d)[slots].float()).abs().max() <= t * 4


# (query heads, kv heads, head dim, page size, contexts): small pages, then the talker's shape
# (GQA 16/8 x 128, 16-token pages) with contexts over several 64-token blocks and splits left empty.
ATTENTION_SHAPES = [(4, 2, 32, 4, [1, 4, 5, 17, 32]), (16, 8, 128, 16, [1, 16, 70, 130, 200])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("splits", [1, 4, 16])
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=["small", "talker"])
def test_paged_attention(ops, dtype, splits, shape):
    tri, ref = ops
    hq, hkv, d, ps, contexts = shape
    g = torch.Generator(device=DEV).manual_seed(2)
    n, p = len(contexts), -(-max(contexts) // ps)
    pages = 3 * p
    kc = torch.randn(pages, ps, hkv, d, device=DEV, generator=g).to(dtype)
    vc = torch.randn(pages, ps, hkv, d, device=DEV, generator=g).to(dtype)
    bt = torch.stack([torch.randperm(pages, device=DEV, generator=g)[:p] for _ in range(n)])
    ctx = torch.tensor(contexts, device=DEV)
    q = torch.randn(n, hq, d, device=DEV, generator=g).to(dtype)
    a = tri.paged_attention(q, kc, vc, bt, ctx, d**-0.5, splits=splits)
    b = ref.paged_attention(q, kc, vc, bt, ctx, d**-0.5)
    assert (a.float() - b.float()).abs().max() <= tol(dtype)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_paged_attention_index_dtypes(ops, index_dtype):
    """The engine passes int64 context lengths and block tables; the kernel narrows the lengths to
    int32 itself (64-bit loop bounds slow its block loop): int32 and int64 indices give the same bits."""
    tri, _ = ops
    hq, hkv, d, ps, contexts = ATTENTION_SHAPES[1]
    g = torch.Generator(device=DEV).manual_seed(4)
    n, p = len(contexts), -(-max(contexts) // ps)
    kc = torch.randn(2 * p, ps, hkv, d, device=DEV, generator=g)
    vc = torch.randn(2 * p, ps, hkv, d, device=DEV, generator=g)
    bt = torch.stack([torch.randperm(2 * p, device=DEV, generator=g)[:p] for _ in range(n)])
    ctx = torch.tensor(contexts, device=DEV)
    q = torch.randn(n, hq, d, device=DEV, generator=g)
    want = tri.paged_attention(q, kc, vc, bt.int(), ctx.int(), d**-0.5, splits=4)
    got = tri.paged_attention(q, kc, vc, bt.to(index_dtype), ctx.to(index_dtype), d**-0.5, splits=4)
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("splits", [1, 4, 16])
@pytest.mark.parametrize("shape", ATTENTION_SHAPES, ids=["small", "talker"])
@pytest.mark.parametrize("stages", [0, 2])
def test_qk_norm_rope_attention(ops, dtype, splits, shape, stages):
    """The decode kernel (QK-norm, RoPE, cache write and attention in one) against the two ops it
    replaces, its block loop plain or software-pipelined."""
    from cadence.kernels.attention.triton_paged_attention import AttentionTiles

    tri, ref = ops
    qkv, args, caches, rest = decode_rows(shape, dtype, seed=4)
    mine = [c.clone() for c in caches]
    a = tri.qk_norm_rope_attention(qkv, *args, *mine, *rest, splits, tiles=AttentionTiles(64, stages=stages))
    b = ref.qk_norm_rope_attention(qkv, *args, *caches, *rest, splits)
    assert not a.isnan().any()
    assert (a.float() - b.float()).abs().max() <= 4 * tol(dtype)
    for x, y in zip(mine, caches, strict=True):
        assert not x.isnan().any()  # every new token's key and value written
        assert (x.float() - y.float()).abs().max() <= 4 * tol(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_rope_attention_above_the_fused_rows(ops, dtype):
    """Above the tile table's fused_max_rows rows the decode attention is qk_norm_rope_store then
    paged_attention (the fused kernel is slower at 256 rows): bit for bit those two kernels, and
    within rounding of the definition."""
    tri, ref = ops
    hq, hkv, d, ps, contexts = ATTENTION_SHAPES[0]
    rows = tri.fused_attention_max_rows + 3
    shape = (hq, hkv, d, ps, [contexts[i % len(contexts)] for i in range(rows)])
    qkv, args, caches, rest = decode_rows(shape, dtype, seed=5)
    slots, bt, ctx, scale = rest[:4]
    mine, two, defined = ([c.clone() for c in caches] for _ in range(3))
    a = tri.qk_norm_rope_attention(qkv, *args, *mine, *rest)
    q = tri.qk_norm_rope_store(qkv, *args, *two, slots, hq, hkv)
    b = tri.paged_attention(q, *two, bt, ctx, scale)
    c = ref.qk_norm_rope_attention(qkv, *args, *defined, *rest)
    assert torch.equal(a, b)
    assert (a.float() - c.float()).abs().max() <= 4 * tol(dtype)
    for x, y in zip(mine, two, strict=True):
        assert not x.isnan().any()
        assert torch.equal(x, y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("block_tokens,warps", [(32, 4), (64, 4), (64, 8), (128, 8)])
@pytest.mark.parametrize("stages", [0, 2, 3])
def test_paged_attention_tiles(ops, dtype, splits, block_tokens, warps, stages):
    """Every launch choice the sweep (benchmarks/paged_attention.py) may pick computes the same
    attention: blocks of 32-128 tokens over 16-token pages, a block running past a split's end
    (masked) included, the block loop plain or software-pipelined."""
    from cadence.kernels.attention.triton_paged_attention import AttentionTiles

    tri, ref = ops
    hq, hkv, d, ps, contexts = ATTENTION_SHAPES[1]
    g = torch.Generator(device=DEV).manual_seed(3)
    n, p = len(contexts), -(-max(contexts) // ps)
    kc = torch.randn(2 * p, ps, hkv, d, device=DEV, generator=g).to(dtype)
    vc = torch.randn(2 * p, ps, hkv, d, device=DEV, generator=g).to(dtype)
    bt = torch.stack([torch.randperm(2 * p, device=DEV, generator=g)[:p] for _ in range(n)])
    ctx = torch.tensor(contexts, device=DEV)
    q = torch.randn(n, hq, d, device=DEV, generator=g).to(dtype)
    tiles = AttentionTiles(block_tokens=block_tokens, warps=warps, stages=stages)
    a = tri.paged_attention(q, kc, vc, bt, ctx, d**-0.5, splits=splits, tiles=tiles)
    b = ref.paged_attention(q, kc, vc, bt, ctx, d**-0.5)
    assert (a.float() - b.float()).abs().max() <= tol(dtype)


def test_attention_tiles_prefetch_only_where_kernels_wait_first(ops):
    """The first block's L2 prefetch before the PDL wait goes to graphs whose kernels wait first (up
    to 32 rows); under trigger first (64 rows) it makes the decode step slower. The
    code predictor's short contexts keep 32-token blocks; the talker's long ones 64-token blocks, in a
    plain loop below 8 rows (split 4-16 ways) and pipelined from 8 rows up."""
    tri, _ = ops
    assert [tri.attention_tiles(rows, 17).prefetch for rows in (1, 16, 32, 33, 64)] == [True] * 3 + [False] * 2
    assert [tri.attention_tiles(rows).prefetch for rows in (1, 8, 64, 256)] == [True, True, False, False]
    assert {tri.attention_tiles(rows, 17).block_tokens for rows in (1, 64)} == {32}
    assert [tri.attention_tiles(rows).block_tokens for rows in (1, 7, 8, 64, 65, 256)] == [64] * 6
    assert [tri.attention_tiles(rows).stages for rows in (1, 7, 8, 64, 65, 256)] == [0, 0, 2, 2, 2, 2]


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="programmatic dependent launch needs a GPU of compute capability >= 9",
)
@pytest.mark.parametrize("trigger_first", [False, True])
@pytest.mark.parametrize("rows,splits,block_tokens", [(1, 16, 64), (64, 1, 128), (64, 1, 32), (3, 1, 32)])
def test_decode_attention_prefetch_and_stages_give_the_same_bits(ops, trigger_first, rows, splits, block_tokens):
    """The decode attention launched early behind the GEMM that makes its qkv, in a CUDA graph: with
    the first block pulled into L2 before the wait, and with the block loop pipelined, the same
    bits as the plain loop launched plainly (a prefetch is a hint; the pipelined loop adds the
    same blocks in the same order)."""
    from cadence.kernels.attention.triton_paged_attention import AttentionTiles

    tri, _ = ops
    # the talker's heads in bf16; at 3 rows a tiny model's (32-wide heads, 4-token pages) in fp32,
    # whose rows are one 128-byte line or less
    hq, hkv, d, ps, dtype = (4, 2, 32, 4, torch.float32) if rows == 3 else (16, 8, 128, 16, torch.bfloat16)
    contexts = [17 if block_tokens == 32 else 300 + 7 * i for i in range(rows)]
    qkv, args, caches, rest = decode_rows((hq, hkv, d, ps, contexts), dtype, seed=12)
    g = torch.Generator(device=DEV).manual_seed(13)
    x = torch.randn(rows, 1024, device=DEV, generator=g).to(dtype)
    w = (torch.randn(qkv.shape[1], 1024, device=DEV, generator=g) / 32).to(dtype)

    def captured(tiles):
        mine = [c.clone() for c in caches]

        def chain():
            return tri.qk_norm_rope_attention(tri.linear(x, w), *args, *mine, *rest, splits, tiles=tiles)

        chain()  # compile outside the capture
        mine[0].copy_(caches[0]), mine[1].copy_(caches[1])
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = chain()
        graph.replay()
        torch.cuda.synchronize()
        return out, mine

    with tri.pdl_settings(False, trigger_first):
        plain = captured(AttentionTiles(block_tokens))
    with tri.pdl_settings(True, trigger_first):
        variants = [captured(AttentionTiles(block_tokens, prefetch=True)),
                    captured(AttentionTiles(block_tokens, stages=2, prefetch=True))]  # fmt: skip
    assert not plain[0].isnan().any()
    for out, mine in variants:
        assert torch.equal(out, plain[0])
        assert all(torch.equal(a, b) for a, b in zip(mine, plain[1], strict=True))
