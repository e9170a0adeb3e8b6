"""The talker's decode attention as a CUDA kernel (kernels/attention/cuda/decode_attention.cu: the cached
pages streamed by the copy engine, the first before the PDL wait) against its PyTorch definition
(the ops composite qk_norm_rope_attention): its source on the CPU through tests/cuda_emulation, and on a
Hopper GPU ("gpu" marker) alone and inside a captured graph behind a Triton kernel under PDL. The
plans (which calls it takes, their shared memory) are checked everywhere."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch
from cuda_driver import blob, emulate, needs_gxx
from kernel_checks import decode_rows

from cadence.kernels.attention.cuda_decode_attention import SOURCE, AttentionPlan, attention_plan
from cadence.kernels.ops import load_ops

TALKER = (16, 8, 128, 16)  # query heads, kv heads, head dim, page size
# bf16 outputs of values near 1: a few units in the last place of the definition's
TOLERANCE = 3e-2


def test_plans():
    """64 rows of the talker: 4 kv heads a CTA (128 CTAs, one an SM), shared memory within an SM's
    227 KB; fewer rows fewer heads a CTA; 64 streams of two new tokens as 64 rows; what the
    fragments cannot take gets no plan."""
    plan = attention_plan(64, 16, 8, 128, 16, torch.bfloat16)
    assert plan.heads_per_cta == 4 and plan.grid(64) == 128 and plan.threads == 160
    assert plan.smem <= 227 * 1024
    assert attention_plan(16, 16, 8, 128, 16, torch.bfloat16, min_rows=1).heads_per_cta == 1
    assert attention_plan(32, 16, 8, 128, 16, torch.bfloat16, min_rows=1).heads_per_cta == 2
    assert attention_plan(8, 16, 8, 128, 16, torch.bfloat16) is None  # below MIN_ROWS
    assert attention_plan(64, 16, 8, 128, 16, torch.float32) is None
    assert attention_plan(64, 16, 8, 64, 16, torch.bfloat16) is None
    assert attention_plan(64, 16, 8, 128, 32, torch.bfloat16) is None
    assert attention_plan(64, 32, 2, 128, 16, torch.bfloat16) is None  # 16 query heads a kv head
    pairs = attention_plan(64, 16, 8, 128, 16, torch.bfloat16, new_tokens=2)  # 64 streams of 2 rows: the first pass
    assert pairs.heads_per_cta == 4 and pairs.grid(128) == 128 and plan.smem < pairs.smem <= 227 * 1024
    assert attention_plan(64, 16, 8, 128, 16, torch.bfloat16, new_tokens=5) is None  # 10 queries a kv head


def _emulate(tmp_path: Path, plan: AttentionPlan, qkv, args, caches, rest) -> tuple[torch.Tensor, ...]:
    """The kernel of `plan` on the CPU emulation; its output and the two caches after it."""
    qn, kn, eps, cos, sin, pos = args
    slots, bt, ctx, scale = rest[:4]
    grid = plan.grid(qkv.shape[0])
    tensors = b"".join(blob(t) for t in (qkv, qn, kn, cos, sin, *caches, pos, slots, ctx, bt))
    scalars = struct.pack("<qqqdd", bt.stride(0), grid, plan.smem, scale, eps)
    out = emulate(tmp_path, "attention_driver", SOURCE, plan.defines, tensors + scalars)
    raw = torch.frombuffer(bytearray(out), dtype=torch.bfloat16)
    n_out = qkv.shape[0] * plan.heads * plan.head_dim
    k, v = raw[n_out:].chunk(2)
    return raw[:n_out].view(qkv.shape[0], -1), k.view_as(caches[0]), v.view_as(caches[1])


def _check(qkv, args, caches, rest, out: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """A kernel's output and the caches after it (k, v; `caches` as they were before it) within bf16
    rounding of the definition's, and no NaN in them."""
    want_caches = [c.clone() for c in caches]
    want = load_ops("torch").qk_norm_rope_attention(qkv, *args, *want_caches, *rest)
    assert not out.isnan().any()
    assert (out.float() - want.float()).abs().max() <= TOLERANCE
    for got, wanted in ((k, want_caches[0]), (v, want_caches[1])):
        assert not got.isnan().any()
        assert (got.float() - wanted.float()).abs().max() <= TOLERANCE


@needs_gxx
@pytest.mark.parametrize(
    "heads,contexts,per_cta,stages",
    [((16, 8), [1, 2, 16, 17, 33, 130], 4, 2),  # the talker's heads; pages reissued past 2 in flight
     ((16, 8), [5, 48, 49], 2, 3),  # two kv heads a CTA; a context ending a page exactly (48 + 1)
     ((16, 8), [1, 2, 16, 17, 40], 4, 1),  # one stage: each page after the first waits for it to empty
     ((8, 8), [20, 64], 1, 2),  # one query head a kv head (half of D's columns unused)
     ((16, 8), [1, 2, 17, 49, 100], 4, 4)],  # four stages: none, one, odd and even pages
)  # fmt: skip
def test_kernel_logic_on_the_cpu(tmp_path, heads, contexts, per_cta, stages):
    """The kernel's source run on the CPU (every CUDA thread a fiber; bulk copies, mbarriers and
    mma.sync emulated): contexts of one token (no cached page), partial and whole last pages and
    more pages than stages; the new tokens' cache cells NaN beforehand (a kernel that reads them, or
    a stale NaN value times a zero probability, shows NaN). Within bf16 rounding of the definition,
    the new keys and values written where the definition writes them."""
    hq, hkv = heads
    qkv, args, caches, rest = decode_rows((hq, hkv, 128, 16, contexts), torch.bfloat16, seed=7, device="cpu")
    plan = AttentionPlan(hq, hkv, 128, 16, per_cta, stages=stages)
    out, k, v = _emulate(tmp_path, plan, qkv, args, caches, rest)
    _check(qkv, args, caches, rest, out, k, v)


@needs_gxx
@pytest.mark.parametrize("per_cta,stages", [(4, 1), (2, 2)])
def test_two_new_tokens_a_sequence_on_the_cpu(tmp_path, per_cta, stages):
    """NEW = 2 (the code predictor's first pass): every two consecutive rows one
    sequence's two new tokens, the first attending over the cached pages and itself, the second over
    them and both new tokens; contexts of two tokens (the first pass: no cached page), three, a page
    boundary between the two new tokens (17) and after them (32, 33). Within bf16 rounding of the
    definition (which writes every new key before any row attends), both rows' keys and values
    written."""
    qkv, args, caches, rest = decode_rows((16, 8, 128, 16, [2, 3, 17, 32, 33]), torch.bfloat16, seed=11,
                                          device="cpu", new_tokens=2)  # fmt: skip
    plan = AttentionPlan(16, 8, 128, 16, per_cta, stages=stages, new_tokens=2)
    assert plan.grid(qkv.shape[0]) == 5 * 8 // per_cta
    out, k, v = _emulate(tmp_path, plan, qkv, args, caches, rest)
    _check(qkv, args, caches, rest, out, k, v)


gpu = pytest.mark.gpu


def _cuda():
    from cadence.kernels.attention.cuda_decode_attention import attention_supported, cuda_qk_norm_rope_attention

    if not torch.cuda.is_available() or not attention_supported(torch.device("cuda")):
        pytest.skip("needs a Hopper GPU with NVRTC")
    return cuda_qk_norm_rope_attention


def _talker_rows(rows: int, seed: int, longest: int = 540):
    contexts = torch.randint(1, longest, (rows,), generator=torch.Generator().manual_seed(seed)).tolist()
    contexts[:3] = [1, 16, 17][: len(contexts)]
    return decode_rows((*TALKER, contexts), torch.bfloat16, seed=seed, device="cuda")


@gpu
@pytest.mark.parametrize("rows,min_rows", [(64, 64), (70, 64), (16, 1), (32, 1)])
def test_matches_definition_on_the_gpu(rows, min_rows):
    """64 and 70 rows (4 kv heads a CTA), 16 and 32 (1 and 2), contexts up to 540 tokens."""
    attend = _cuda()
    qkv, args, caches, rest = _talker_rows(rows, seed=rows)
    mine = [c.clone() for c in caches]
    plan = attention_plan(rows, *TALKER[:2], 128, 16, torch.bfloat16, min_rows=min_rows)
    got = attend(qkv, *args, *mine, *rest, plan=plan)
    _check(qkv, args, caches, rest, got, *mine)


@gpu
@pytest.mark.parametrize("trigger_first", [False, True])
def test_in_a_graph_behind_a_triton_kernel_under_pdl(trigger_first):
    """As the walk runs it: captured in a CUDA graph, launched under PDL behind the Triton kernel
    that writes its qkv rows (a copy through the Triton linear with an identity weight), the pages
    on their way before the wait; over the talker's contexts of up to 540 tokens (many pages a row).
    Replayed with new qkv rows: the definition's outputs each time."""
    attend = _cuda()
    from cadence.kernels.launch.pdl import pdl_settings

    triton_ops = load_ops("triton")
    rows = 64
    qkv, args, caches, rest = _talker_rows(rows, seed=3)
    plan = attention_plan(rows, *TALKER[:2], 128, 16, torch.bfloat16)
    eye = torch.eye(qkv.shape[1], device="cuda", dtype=torch.bfloat16)
    source = qkv.clone()
    base = [c.clone() for c in caches]
    with pdl_settings(True, trigger_first):
        attend(triton_ops.linear(source, eye), *args, *caches, *rest, plan=plan)  # compile
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = attend(triton_ops.linear(source, eye), *args, *caches, *rest, plan=plan)
    for replay in range(3):
        source.copy_(torch.randn(source.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(replay)))
        for c, b in zip(caches, base, strict=True):
            c.copy_(b)
        graph.replay()
        want_caches = [b.clone() for b in base]
        want = load_ops("torch").qk_norm_rope_attention(source, *args, *want_caches, *rest)
        torch.cuda.synchronize()
        assert (out.float() - want.float()).abs().max() <= TOLERANCE, replay


@gpu
def test_the_first_pass_on_the_gpu():
    """The code predictor's first pass at batch 64 (64 streams of two new tokens): the
    dispatcher takes the kernel, captured in a graph under
    trigger-first PDL behind the Triton kernel that writes its qkv rows; the definition's outputs and
    caches, for the first pass's contexts (2) and longer ones."""
    _cuda()
    from cadence.kernels.attention import cuda_decode_attention as cuda_attention
    from cadence.kernels.launch.pdl import pdl_settings

    triton_ops = load_ops("triton")

    contexts = [2] * 60 + [3, 16, 17, 32]
    qkv, args, caches, rest = decode_rows((*TALKER, contexts), torch.bfloat16, seed=5, device="cuda", new_tokens=2)
    plan = cuda_attention.decode_plan(qkv, caches[0], rest[1], *TALKER[:2], max_context=32, new_tokens=2)
    assert plan is not None and plan.new_tokens == 2 and plan.grid(qkv.shape[0]) == 128
    eye = torch.eye(qkv.shape[1], device="cuda", dtype=torch.bfloat16)
    mine = [c.clone() for c in caches]

    def attend() -> torch.Tensor:
        rows = triton_ops.linear(qkv, eye)
        return triton_ops.qk_norm_rope_attention(rows, *args, *mine, *rest, max_context=32, new_tokens=2)

    with pdl_settings(True, True):
        attend()  # compile
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = attend()
    for c, b in zip(mine, caches, strict=True):
        c.copy_(b)
    graph.replay()
    _check(qkv, args, caches, rest, out, *mine)
