"""The norm after down made inside the next qkv GEMM's Triton tiles (triton_norm_linear, perf-notes
#144, CADENCE_NORM_IN_QKV): against the norm kernel then the GEMM, on the CPU through Triton's
interpreter (fp32; its programs run one after another, so one program makes every row by ticket)
and on the GPU (bf16, the programs racing for rows, a grid smaller than the rows, PDL graphs, the
decoder stack). Where they run: kernel_checks.py."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEV, DTYPES, NEEDS_TRITON, Switched, assert_pdl_graph_replays_eager, switched, tol

pytestmark = NEEDS_TRITON

needs_hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
    reason="needs a GPU of compute capability >= 9",
)


def norm_in_qkv(on: bool):
    """CADENCE_NORM_IN_QKV set to `on` for the block only."""
    from cadence.kernels import triton_norm_linear

    return switched(triton_norm_linear, "NORM_IN_QKV", on)


def _down_norm_qkv_case(m: int, dtype: torch.dtype, n: int = 4096, seed: int = 144):
    """down's input rows and weight, the residual, the norm's weight and the next GEMM's [n, 1024]."""
    g = torch.Generator(device=DEV).manual_seed(seed + m)
    act = torch.randn(m, 3072, generator=g, device=DEV).to(dtype)
    wdown = (torch.randn(1024, 3072, generator=g, device=DEV) / 3072**0.5).to(dtype)
    residual = torch.randn(m, 1024, generator=g, device=DEV).to(dtype)
    norm_w = (1 + 0.1 * torch.randn(1024, generator=g, device=DEV)).to(dtype)
    wqkv = (torch.randn(n, 1024, generator=g, device=DEV) / 32).to(dtype)
    return act, wdown, norm_w, 1e-6, residual, wqkv


def _fused_and_reference(m: int, dtype: torch.dtype, n: int = 4096):
    """(y, sum, h) of norm_linear and of the norm kernel then the GEMM on the same partials."""
    from cadence.kernels import triton_ops
    from cadence.kernels.triton_linear import skinny_linear, skinny_linear_partials, skinny_tiles
    from cadence.kernels.triton_norm_linear import norm_linear

    act, wdown, norm_w, eps, residual, wqkv = _down_norm_qkv_case(m, dtype, n)
    down_tiles, tiles = skinny_tiles(1024, 3072, 64), skinny_tiles(n, 1024, 64)
    parts = skinny_linear_partials(act, wdown, down_tiles)
    got = norm_linear(parts, residual, norm_w, eps, wqkv, tiles)
    h, total = torch.empty_like(residual), torch.empty_like(residual)
    triton_ops._launch_rms_norm(parts, down_tiles.split_k, norm_w, eps, residual, h, total)
    return got, (skinny_linear(h, wqkv, tiles), total, h), tiles


def _workspace(n: int, tiles) -> torch.Tensor:
    from cadence.kernels.triton_norm_linear import _sync_workspace

    return _sync_workspace(torch.device(DEV), n, 1024, tiles)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [5, 40, 64])
def test_the_norm_inside_the_gemm_is_the_norm_kernel_then_the_gemm(m, dtype):
    """The sum (the next residual) the same bits as the norm kernel's; the normed rows within a
    rounding step of its (the sum of squares adds over 4 warps, not 8); the GEMM's rows the plain
    GEMM's bits on those normed rows; and the counters and flags zeroed for the next call, which
    gives the same bits."""
    (y, total, h), (_, want_total, want_h), tiles = _fused_and_reference(m, dtype)
    from cadence.kernels.triton_linear import skinny_linear

    assert torch.equal(total, want_total)
    assert (h.float() - want_h.float()).abs().max() <= tol(dtype) * want_h.float().abs().max()
    assert torch.equal(y, skinny_linear(h, _down_norm_qkv_case(m, dtype)[5], tiles))
    assert not _workspace(4096, tiles).any()
    again, _, _ = _fused_and_reference(m, dtype)
    assert all(torch.equal(a, b) for a, b in zip(again, (y, total, h), strict=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_grid_smaller_than_the_rows_makes_every_row(dtype):
    """A 64-wide next weight is two programs for 40 rows: the rows of programs that do not exist
    are made by ticket, or the poll would never end."""
    (y, total, h), (want_y, want_total, want_h), tiles = _fused_and_reference(40, dtype, n=64)
    assert torch.equal(total, want_total)
    assert (h.float() - want_h.float()).abs().max() <= tol(dtype) * want_h.float().abs().max()
    assert (y.float() - want_y.float()).abs().max() <= tol(dtype) * want_y.float().abs().max()
    assert not _workspace(64, tiles).any()


def test_norm_linear_refuses_split_tiles_and_too_many_rows():
    from cadence.kernels.triton_linear import SkinnyTiles
    from cadence.kernels.triton_norm_linear import norm_linear

    parts = torch.zeros(4, 64, 1024, device=DEV)
    residual, norm_w, w = torch.zeros(8, 1024, device=DEV), torch.ones(1024, device=DEV), torch.zeros(64, 1024)
    with pytest.raises(ValueError, match="unsplit tiles"):
        norm_linear(parts, residual, norm_w, 1e-6, w.to(DEV), SkinnyTiles(split_k=4, block_m=64))
    with pytest.raises(ValueError, match="unsplit tiles"):
        norm_linear(parts, torch.zeros(80, 1024, device=DEV), norm_w, 1e-6, w.to(DEV), SkinnyTiles(block_m=64))


def test_the_switch_off_runs_the_norm_kernel_then_the_gemm():
    """linear_rms_norm_linear without CADENCE_NORM_IN_QKV (and, in fp32, with it: the tiles are for
    bf16 and fp16) is linear_rms_norm then linear: the same bits."""
    from cadence.kernels import triton_ops

    case = _down_norm_qkv_case(40, torch.float32)
    h, want_total = triton_ops.linear_rms_norm(*case[:5])
    want = triton_ops.linear(h, case[5])
    for on in (False, True):
        with norm_in_qkv(on):
            assert triton_ops._norm_in_gemm_tiles(case[0], case[1], case[4], case[5]) is None
            y, total = triton_ops.linear_rms_norm_linear(*case)
        assert torch.equal(y, want) and torch.equal(total, want_total)


@pytest.mark.parametrize("m,takes", [(16, False), (40, True), (64, True)])
def test_the_op_takes_the_fused_kernel_at_33_to_64_rows_of_half_precision(m, takes, monkeypatch):
    """fp16 (which the interpreter's dots also run): linear_rms_norm_linear with the switch on takes
    the fused kernel where the next GEMM has unsplit 64-row tiles (33-64 rows), with the partials of
    down's split-K tiles; the sum the same bits as with the switch off, the qkv rows within a rounding
    step; at 16 rows the two kernels as before."""
    from cadence.kernels import triton_norm_linear, triton_ops

    case = _down_norm_qkv_case(m, torch.float16)
    want_y, want_total = triton_ops.linear_rms_norm_linear(*case)
    calls = []
    real = triton_norm_linear.norm_linear
    monkeypatch.setattr(triton_norm_linear, "norm_linear", lambda *a: calls.append(a[0].shape) or real(*a))
    with norm_in_qkv(True):
        y, total = triton_ops.linear_rms_norm_linear(*case)
    assert calls == ([torch.Size([4, 64, 1024])] if takes else [])
    assert torch.equal(total, want_total)
    assert (y.float() - want_y.float()).abs().max() <= 1e-2 * want_y.float().abs().max()


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("m", [33, 48, 64])
def test_the_op_with_the_switch_on_matches_it_off(m, monkeypatch):
    """linear_rms_norm_linear at the 0.6B's shapes in bf16: the fused kernel takes the call (33-64
    rows), the sum the same bits as the switch off, the qkv rows within a bf16 step."""
    from cadence.kernels import triton_norm_linear, triton_ops

    case = _down_norm_qkv_case(m, torch.bfloat16)
    want_y, want_total = triton_ops.linear_rms_norm_linear(*case)
    calls = []
    real = triton_norm_linear.norm_linear
    monkeypatch.setattr(triton_norm_linear, "norm_linear", lambda *a: calls.append(a[-2]) or real(*a))
    with norm_in_qkv(True):
        y, total = triton_ops.linear_rms_norm_linear(*case)
    assert [(t.block_m, t.split_k) for t in calls] == [(64, 1)]
    assert torch.equal(total, want_total)
    assert (y.float() - want_y.float()).abs().max() <= 2e-2 * want_y.float().abs().max()


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("trigger_first", [False, True])
def test_three_chained_calls_in_a_pdl_graph_replay_the_eager_bits(trigger_first):
    """Three layers' down, norm and qkv chained in a CUDA graph with PDL, replayed five times: every
    replay gives the eager launches' bits, so each call leaves the workspace zeroed for the next (the
    three share it: one shape) and no program reads a row before it is published."""
    from cadence.kernels import triton_norm_linear
    from cadence.kernels.triton_ops import linear_rms_norm_linear

    act, wdown, norm_w, eps, residual, wqkv = _down_norm_qkv_case(64, torch.bfloat16)

    def chain():
        res, x = residual, act
        for _ in range(3):
            y, res = linear_rms_norm_linear(x, wdown, norm_w, eps, res, wqkv)
            x = y[:, :3072] * 2  # the next layer's "MLP" rows (elementwise: no cuBLAS in the graph)
        return y, res

    assert_pdl_graph_replays_eager(Switched(chain, triton_norm_linear, "NORM_IN_QKV", True), trigger_first)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("prefetch", [False, True])
def test_stack_at_64_rows_with_the_norm_inside_qkv_matches_the_norm_kernels(prefetch, monkeypatch):
    """Three full-size layers decoding 64 streams (test_gemm64's case): with the norm after down
    inside the next qkv, within bf16 rounding of the stack without it, eagerly and from a graph
    captured with PDL; with a KV prefetch (the code predictor's default) issued by the fused kernel."""
    from test_gemm64 import _decode_case
    from test_slab_gemv import _check_against_layer_kernels, _stack

    from cadence.kernels import triton_norm_linear, triton_ops
    from cadence.kernels.kv_prefetch import KvPrefetchPlan
    from cadence.models.qwen3_tts.fused_stack import FusedStack

    calls = []
    real = triton_norm_linear.norm_linear
    monkeypatch.setattr(triton_norm_linear, "norm_linear", lambda *a: calls.append(a[-1]) or real(*a))
    plan = KvPrefetchPlan(megabytes=16) if prefetch else None
    fused = FusedStack(_stack(), triton_ops, 64, kv_prefetch=plan)
    x, index, k0, v0 = _decode_case(144)
    off, on = (Switched(fused, triton_norm_linear, "NORM_IN_QKV", value) for value in (False, True))
    _check_against_layer_kernels(off, on, x, index, k0, v0, decode=True)
    assert len(calls) >= 2 and all((p is not None) == prefetch for p in calls)  # layers 1 and 2, each run
