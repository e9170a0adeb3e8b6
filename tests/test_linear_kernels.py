"""The weight-streaming GEMMs (Triton) against their PyTorch definitions (linear/reference.py), on fresh
random inputs: tiles by shape and row count, strided rows, split-K, up to 64 rows, SwiGLU in the
epilogue, and the o and down projections with the norm after them (split-K partials added by the
norm kernel). Where they run: kernel_checks.py.
"""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEV, INTERPRET, NEEDS_TRITON, tol

pytestmark = NEEDS_TRITON


@pytest.fixture(scope="module")
def streaming():
    """The Triton ops with the streaming GEMM for fp32 rows too (the interpreter runs fp32 only; on a
    GPU fp32 GEMMs otherwise go to cuBLAS)."""
    from cadence.kernels.gpu_ops import TritonOps

    return TritonOps(streaming_fp32=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16] if not INTERPRET else [torch.float32])
@pytest.mark.parametrize(
    "m,n,k", [(1, 3072, 1024), (5, 1024, 3072), (16, 2048, 1000), (17, 1024, 2048), (24, 1024, 3072), (32, 2048, 1000)]
)
def test_streaming_gemm(streaming, dtype, m, n, k):
    """The weight-streaming GEMM with the tiles `linear` picks for the shape and row count (17-32
    rows: 32-row tiles, split-K for the long narrow ones)."""
    g = torch.Generator(device=DEV).manual_seed(5)
    x = torch.randn(m, k, device=DEV, generator=g).to(dtype)
    w = (torch.randn(n, k, device=DEV, generator=g) / k**0.5).to(dtype)
    ref = torch.nn.functional.linear(x.float(), w.float())
    out = streaming.linear(x, w).float()
    assert out.shape == (m, n)
    assert (out - ref).abs().max() <= (1e-4 if dtype == torch.float32 else 2e-2) * ref.abs().max()


@pytest.mark.parametrize("dtype", [torch.bfloat16] if not INTERPRET else [torch.float32])
@pytest.mark.parametrize("m", [1, 8, 24])
def test_streaming_gemm_reads_strided_rows(streaming, dtype, m):
    """Rows that are every other row of a larger tensor (the code predictor's first head reads
    the stack's output at position 1 of each stream, `h[1::2]`): each row is its own, not the
    next row of the buffer: a kernel that assumed contiguous rows would give every stream but the
    first of a 2-32-stream batch codebook 1 from another row's state."""
    g = torch.Generator(device=DEV).manual_seed(9)
    x = torch.randn(2 * m, 1024, device=DEV, generator=g).to(dtype)[1::2]
    w = (torch.randn(2048, 1024, device=DEV, generator=g) / 32).to(dtype)
    ref = torch.nn.functional.linear(x.float(), w.float())
    assert (streaming.linear(x, w).float() - ref).abs().max() <= tol(dtype) * ref.abs().max()


def test_linear_routes_by_shape_and_rows(ops):
    """Which GEMMs go to the weight-streaming kernel: every shape
    up to 16 rows; at 17-32 rows only the narrow weights (o_proj, down, the 2048-wide heads); at
    33-64 every shape but the 6144-wide gate/up, in 64-row tiles; at 65-128 the same in 128-row
    tiles; above 128, none."""
    from cadence.kernels.linear.triton_streaming_gemm import gemm_tiles

    for n, k in [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (3072, 1024), (2048, 1024)]:
        assert gemm_tiles(n, k, 1) is not None and gemm_tiles(n, k, 16) is not None
        if n < 6144:  # the 6144-wide gate/up: cuBLAS at 33-64 rows
            assert gemm_tiles(n, k, 33).block_m == 64 and gemm_tiles(n, k, 64).block_m == 64
            assert gemm_tiles(n, k, 65).block_m == 128 and gemm_tiles(n, k, 128).block_m == 128
        assert gemm_tiles(n, k, 129) is None
    assert all(gemm_tiles(6144, 1024, m) is None for m in (33, 64, 65, 128))
    from cadence.kernels.linear.triton_streaming_gemm import swiglu_gemm_tiles

    assert (
        swiglu_gemm_tiles(6144, 1024, 16) is not None and swiglu_gemm_tiles(6144, 1024, 48) is None
    )  # GEMM, then silu
    routed = {(n, k) for n, k in [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (3072, 1024), (2048, 1024)]
              if gemm_tiles(n, k, 32) is not None}  # fmt: skip
    assert routed == {(1024, 2048), (1024, 3072), (2048, 1024)}
    assert all(gemm_tiles(n, k, 32).block_m == 32 for n, k in routed)
    # 33-64 rows: the unsplit tiles in 4 stages
    assert [gemm_tiles(n, 1024, 64).stages for n in (4096, 3072, 2048)] == [4, 4, 4]


def test_a_split_covers_whole_k_steps():
    """GemmTiles.k_per_split: a split program's share of K in whole steps (the kernel's K_PER_SPLIT;
    the last program's share may run past K and is masked)."""
    from cadence.kernels.linear.triton_streaming_gemm import GemmTiles

    assert GemmTiles(block_k=256, split_k=4).k_per_split(2048) == 512
    assert GemmTiles(block_k=256, split_k=4).k_per_split(3072) == 768
    assert GemmTiles(block_k=256, split_k=3).k_per_split(1000) == 512  # 4 steps over 3 programs
    assert GemmTiles(block_k=256).k_per_split(1024) == 1024


@pytest.mark.parametrize("dtype", [torch.bfloat16] if not INTERPRET else [torch.float32])
@pytest.mark.parametrize("split_k", [2, 3, 8])
@pytest.mark.parametrize("m,n,k", [(1, 1024, 2048), (5, 100, 3072), (16, 96, 1000)])
def test_streaming_gemm_split_k(ops, dtype, split_k, m, n, k):
    """Split over K: the partials are added in split order by the last program of each slab, so
    the result is the same bits on every call, and each slab's counter is back at 0 afterwards
    (a graph replays the same counters). K not a multiple of the split's step leaves some
    programs a short or empty range."""
    from cadence.kernels.linear.triton_streaming_gemm import GemmTiles, _split_k_workspace, streaming_gemm

    g = torch.Generator(device=DEV).manual_seed(6)
    x = torch.randn(m, k, device=DEV, generator=g).to(dtype)
    w = (torch.randn(n, k, device=DEV, generator=g) / k**0.5).to(dtype)
    ref = torch.nn.functional.linear(x.float(), w.float())
    tiles = GemmTiles(block_n=32, block_k=256, split_k=split_k)
    first = streaming_gemm(x, w, tiles)
    assert (first.float() - ref).abs().max() <= (1e-4 if dtype == torch.float32 else 2e-2) * ref.abs().max()
    _, counters = _split_k_workspace(x.device, n, tiles)
    assert int(counters.abs().sum()) == 0
    assert torch.equal(streaming_gemm(x, w, tiles), first)


@pytest.mark.parametrize("dtype", [torch.bfloat16] if not INTERPRET else [torch.float32])
@pytest.mark.parametrize("split_k,stages", [(1, 3), (4, 3), (1, 4)])
def test_streaming_gemm_up_to_64_rows(ops, dtype, split_k, stages):
    """The weight-streaming kernel with 64 activation rows per program (GemmTiles.block_m), the
    tiles benchmarks/skinny_linear.py sweeps for batches 17-64; more rows than the tiles hold is
    a clear error, not a wrong result."""
    from cadence.kernels.linear.triton_streaming_gemm import GemmTiles, streaming_gemm

    g = torch.Generator(device=DEV).manual_seed(9)
    x = torch.randn(40, 1024, device=DEV, generator=g).to(dtype)
    w = (torch.randn(96, 1024, device=DEV, generator=g) / 32).to(dtype)
    ref = torch.nn.functional.linear(x.float(), w.float())
    out = streaming_gemm(x, w, GemmTiles(block_n=32, block_k=256, stages=stages, split_k=split_k, block_m=64)).float()
    assert (out - ref).abs().max() <= (1e-4 if dtype == torch.float32 else 2e-2) * ref.abs().max()
    with pytest.raises(ValueError, match="at most 16 rows"):
        streaming_gemm(x, w, GemmTiles())


@pytest.mark.parametrize("dtype", [torch.bfloat16] if not INTERPRET else [torch.float32])
@pytest.mark.parametrize("m", [65, 128])
def test_128_row_tiles_compute_the_definition(ops, streaming, dtype, m):
    """65-128 rows (the code predictor's first pass at batch 64) in 128-row tiles: the
    plain and split-K products and the o / down projection with its norm (partials added by the
    norm) are the definition's."""
    from cadence.kernels.linear.triton_streaming_gemm import gemm_tiles

    tri, ref = ops
    g = torch.Generator(device=DEV).manual_seed(17)
    for n, k in [(4096, 1024), (2048, 1024), (1024, 2048)]:
        tiles = gemm_tiles(n, k, m)
        assert tiles.block_m == 128 and tiles.split_k == (4 if k >= 2048 else 1)
        x = torch.randn(m, k, device=DEV, generator=g).to(dtype)
        w = (torch.randn(n, k, device=DEV, generator=g) / k**0.5).to(dtype)
        expected = torch.nn.functional.linear(x.float(), w.float())
        out = streaming.linear(x, w).float()
        assert (out - expected).abs().max() <= tol(dtype) * 4 * expected.abs().max()
    norm_w = (1 + 0.1 * torch.randn(1024, device=DEV, generator=g)).to(dtype)
    res = torch.randn(m, 1024, device=DEV, generator=g).to(dtype)
    normed, total = streaming.linear_rms_norm(x, w, norm_w, 1e-6, res)
    exp_normed, exp_total = ref.linear_rms_norm(x.float(), w.float(), norm_w.float(), 1e-6, res.float())
    assert (total.float() - exp_total).abs().max() <= tol(dtype) * 4 * exp_total.abs().max()
    assert (normed.float() - exp_normed).abs().max() <= tol(dtype) * 8 * exp_normed.abs().max()


@pytest.mark.parametrize("dtype", [torch.bfloat16] if not INTERPRET else [torch.float32])
@pytest.mark.parametrize("m,inter", [(1, 3072), (5, 1500), (16, 3072), (48, 3072)])
def test_linear_swiglu(ops, dtype, m, inter):
    """The weight-streaming GEMM with SwiGLU in its epilogue (the MLP's gate/up projection, one
    kernel instead of two) against the GEMM then silu_mul with the tiles `linear` picks: the same
    bits on a GPU, where both run the same tensor-core dots and round at the same points (under
    the interpreter numpy's matmul may order the fp32 sums differently); against the PyTorch
    definition within rounding. `linear_swiglu` takes the fused kernel for bf16 rows with tiles.
    48 rows: the 64-row tiles, which `linear_swiglu` does not route there."""
    from cadence.kernels.linear.triton_streaming_gemm import (
        GemmTiles,
        gate_up_slabs,
        gemm_tiles,
        streaming_gemm,
        swiglu_gemm_tiles,
    )

    tri, ref = ops
    g = torch.Generator(device=DEV).manual_seed(12)
    x = torch.randn(m, 1024, device=DEV, generator=g).to(dtype)
    w = (torch.randn(2 * inter, 1024, device=DEV, generator=g) / 32).to(dtype)
    # 48 rows: gate/up goes to cuBLAS; the kernel's 64-row tiles are still what the sweep times
    tiles = gemm_tiles(2 * inter, 1024, m) or GemmTiles(block_n=64, block_k=256, block_m=64)
    unfused = tri.silu_mul(streaming_gemm(x, w, tiles))
    fused_tiles = swiglu_gemm_tiles(2 * inter, 1024, m) or gate_up_slabs(tiles)
    fused = streaming_gemm(x, w, fused_tiles, swiglu=True)
    assert fused.shape == (m, inter)
    if INTERPRET:
        assert (fused - unfused).abs().max() <= 1e-5 * unfused.abs().max()
    else:
        assert torch.equal(fused, unfused)
        if swiglu_gemm_tiles(2 * inter, 1024, m) is not None:  # else linear_swiglu is two kernels, maybe cuBLAS's
            assert torch.equal(tri.linear_swiglu(x, w), fused)
    expected = ref.linear_swiglu(x.float(), w.float())
    assert (fused.float() - expected).abs().max() <= tol(dtype) * 4 * expected.abs().max()
    routed = tri.linear_swiglu(x, w).float()  # whatever route it takes (48 rows: cuBLAS, then silu_mul)
    assert (routed - expected).abs().max() <= tol(dtype) * 4 * expected.abs().max()
    with pytest.raises(ValueError, match="split_k=1"):
        streaming_gemm(x, w, GemmTiles(split_k=2), swiglu=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16] if not INTERPRET else [torch.float32])
@pytest.mark.parametrize(
    "m,n,k,profile",
    [(1, 1024, 2048, None), (5, 1024, 3072, None), (24, 1024, 3072, None), (40, 1024, 2048, None), (3, 96, 1024, None),
     (4, 2048, 6144, "h100"), (4, 2048, 2048, "h100")],  # the 1.7B's down (split K) and o (cuBLAS) on the H100
)  # fmt: skip
def test_linear_rms_norm_adds_split_k_partials_in_the_norm(ops, streaming, dtype, m, n, k, profile, monkeypatch):
    """A layer's o or down projection and the residual-add + RMSNorm after it: where the GEMM splits
    K (o and down up to 64 rows; not the 96-wide shape, nor the 1.7B's o on the H100, which runs on
    cuBLAS), its programs leave their fp32 partials and the norm kernel adds them in split order, so
    the GEMM takes no ticket. Against the GEMM's last program adding them then the norm kernel
    (`linear` then `rms_norm`): the rows' sum the same bits, on every call; the normalised rows too
    under the interpreter, and within two bf16 steps on a GPU, where the partials' norm reduces over
    8 warps, not 4. Within rounding of the PyTorch definition. Without a residual: the two kernels.
    `profile`: the GPU family's tile table the launches take (None: the default table)."""
    from cadence.kernels.tile_table import current_table, load_profile, using_table

    with using_table(load_profile(profile) if profile else current_table()):
        check_linear_rms_norm(ops, streaming, dtype, m, n, k, monkeypatch)


def check_linear_rms_norm(ops, streaming, dtype, m: int, n: int, k: int, monkeypatch) -> None:
    from cadence.kernels.linear.triton_streaming_gemm import GemmTiles, _split_k_workspace
    from cadence.kernels.norm import triton_rms_norm

    tri, ref = ops
    g = torch.Generator(device=DEV).manual_seed(13)
    x = torch.randn(m, k, device=DEV, generator=g).to(dtype)
    w = (torch.randn(n, k, device=DEV, generator=g) / k**0.5).to(dtype)
    norm_w = (1 + 0.1 * torch.randn(n, device=DEV, generator=g)).to(dtype)
    res = torch.randn(m, n, device=DEV, generator=g).to(dtype)
    tiles = tri.gemm_tiles(n, k, m) or GemmTiles()  # cuBLAS's call: no split
    partial_launches = []
    launch = triton_rms_norm.streaming_gemm_partials
    monkeypatch.setattr(triton_rms_norm, "streaming_gemm_partials", lambda *a: partial_launches.append(a) or launch(*a))
    normed, total = streaming.linear_rms_norm(x, w, norm_w, 1e-6, res)
    assert len(partial_launches) == (tiles.split_k > 1)
    two_normed, two_total = tri.rms_norm(streaming.linear(x, w), norm_w, 1e-6, res)
    assert torch.equal(total, two_total)
    assert same_up_to_the_reduction(normed, two_normed)
    if tiles.split_k > 1:
        _, counters = _split_k_workspace(x.device, n, tiles)
        assert int(counters.abs().sum()) == 0  # the ticket path still leaves its counters at 0
    again = streaming.linear_rms_norm(x, w, norm_w, 1e-6, res)
    assert torch.equal(again[0], normed) and torch.equal(again[1], total)
    # Other rows through the same workspace: the norm reads this call's partials, not the last one's.
    other = streaming.linear_rms_norm(2 * x.flip(0), w, norm_w, 1e-6, res)
    expected = tri.rms_norm(streaming.linear(2 * x.flip(0), w), norm_w, 1e-6, res)
    assert same_up_to_the_reduction(other[0], expected[0]) and torch.equal(other[1], expected[1])
    exp_normed, exp_total = ref.linear_rms_norm(x.float(), w.float(), norm_w.float(), 1e-6, res.float())
    assert (total.float() - exp_total).abs().max() <= tol(dtype) * 4 * exp_total.abs().max()
    assert (normed.float() - exp_normed).abs().max() <= tol(dtype) * 8 * exp_normed.abs().max()
    no_res, no_res_total = streaming.linear_rms_norm(x, w, norm_w, 1e-6, None)
    assert torch.equal(no_res, tri.rms_norm(streaming.linear(x, w), norm_w, 1e-6)[0])
    assert no_res_total.shape == (m, n)


def same_up_to_the_reduction(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same bits under the interpreter (one program order); on a GPU, where the norm's sum of
    squares may add in another order, within two rounding steps of the activation dtype (the
    normalised value's, then the weight product's)."""
    if INTERPRET:
        return torch.equal(a, b)
    step = 2 * torch.finfo(a.dtype).eps * b.float().abs().clamp_min(torch.finfo(a.dtype).tiny)
    return bool(((a.float() - b.float()).abs() <= step).all())


def test_split_k_partials_need_a_split(ops):
    """The partials-only launch is for split-K tiles; without a split it is a clear error."""
    from cadence.kernels.linear.triton_streaming_gemm import GemmTiles, streaming_gemm_partials

    x = torch.zeros(1, 256, device=DEV)
    with pytest.raises(ValueError, match="split_k >= 2"):
        streaming_gemm_partials(x, torch.zeros(32, 256, device=DEV), GemmTiles(split_k=1))
