"""The sampler kernels (TritonOps.sample_tokens: logits processing, top-k / top-p, Gumbel-max,
and the token's embedding row for the next step; the Triton kernel, and on a Hopper GPU the CUDA
one) against their PyTorch definition (sampling/reference.py), and the outputs' checks that all share.
Where the kernel tests run: kernel_checks.py; the CUDA kernel's own tests: test_cuda_sampler.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from kernel_checks import DEV, INTERPRET, NEEDS_TRITON

from cadence.kernels.ops import triton_available
from cadence.kernels.sampling import CodeHistory, EosRule, RowParams, TokenOutputs, TokenSampling, reference

NEEDS_BF16 = pytest.mark.skipif(INTERPRET, reason="bf16 logits: on a GPU (the interpreter runs fp32)")


@pytest.fixture(params=["triton", "cuda"])
def samplers(request, ops):
    """(a sampler kernel, the definition): triton_sampler's kernel, and cuda_sampler's where it runs
    (TritonOps.sample_tokens picks the CUDA one there and the Triton one elsewhere)."""
    ref = ops[1]
    if request.param == "triton":
        from cadence.kernels.sampling import triton_sampler

        return SimpleNamespace(sample_tokens=triton_sampler.sample_tokens), ref
    from cadence.kernels.sampling.cuda_sampler import cuda_sample_tokens, sampler_supported

    if DEV != "cuda" or not sampler_supported(torch.device(DEV)):
        pytest.skip("the CUDA sampler needs a Hopper GPU and NVRTC")
    return SimpleNamespace(sample_tokens=cuda_sample_tokens), ref


def _sampled_rows(n: int, top_k: int) -> RowParams:
    return RowParams(torch.ones(n, dtype=torch.bool, device=DEV), torch.full((n,), 0.9, device=DEV),
                     torch.full((n,), top_k, device=DEV), torch.ones(n, device=DEV))  # fmt: skip


def _assert_same_tokens(samplers, logits: torch.Tensor, params: RowParams, frames: int, codebook: int) -> None:
    """The kernel picks the definition's tokens for every row over `frames` frames of noise."""
    tri, ref = samplers
    seed = torch.arange(logits.shape[0], device=DEV) * 31 + 5
    for frame in range(frames):
        fr = torch.full((logits.shape[0],), frame, device=DEV)
        spec = TokenSampling(params, seed, fr, codebook)
        mine = tri.sample_tokens(logits, spec)
        theirs = ref.sample_tokens(logits, spec)
        assert torch.equal(mine, theirs), (frame, mine, theirs)


@NEEDS_TRITON
def test_sampling_matches_definition(samplers):
    tri, ref = samplers
    g = torch.Generator(device=DEV).manual_seed(4)
    n, v = 8, 300
    logits = torch.randn(n, v, device=DEV, generator=g) * 3
    params = RowParams(
        do_sample=torch.tensor([0, 1, 1, 1, 1, 1, 1, 0], dtype=torch.bool, device=DEV),
        temperature=torch.tensor([1.0, 0.9, 0.5, 1.3, 0.9, 2.0, 0.7, 1.0], device=DEV),
        top_k=torch.tensor([50, 50, 0, 5, 1, 300, 20, 0], device=DEV),
        top_p=torch.tensor([1.0, 1.0, 0.9, 1.0, 1.0, 0.5, 0.8, 1.0], device=DEV),
    )
    seen = torch.rand(n, v, device=DEV, generator=g) < 0.1
    pen = torch.full((n,), 1.05, device=DEV)
    ban = torch.tensor([1, 0, 1, 0, 1, 0, 1, 0], dtype=torch.bool, device=DEV)
    seed = torch.arange(n, device=DEV) * 7919 + 11
    for frame in range(6):
        fr = torch.full((n,), frame, device=DEV)
        for kw in ({}, dict(history=CodeHistory(seen, pen), eos=EosRule(ban, eos_id=250, suppress_start=200))):
            a = tri.sample_tokens(logits, TokenSampling(params, seed, fr, 3, **kw))
            b = ref.sample_tokens(logits, TokenSampling(params, seed, fr, 3, **kw))
            assert torch.equal(a, b), (frame, kw.keys(), a, b)


@NEEDS_TRITON
@pytest.mark.parametrize("ways", [2, 3, 4, 5])
def test_top_k_keeps_ties_at_the_kth_value(samplers, ways, monkeypatch):
    """The top-k threshold's search (a bisection at 2 ways, the shipped 16 and others) on the
    vocabularies served (2048 and 3072 codes) with logits on a coarse grid, so that many values tie
    at the k-th: the same tokens as the definition (which keeps every tie, as Hugging Face does), k
    from 1 to one short of the vocabulary."""
    monkeypatch.setattr("cadence.kernels.sampling.triton_sampler.TOPK_WAYS", ways)
    g = torch.Generator(device=DEV).manual_seed(5)
    for v in (2048, 3072):
        logits = torch.randint(-40, 40, (6, v), device=DEV, generator=g).float() / 8  # 640 distinct values
        logits[5] = 0.0  # one row of nothing but ties
        params = _sampled_rows(6, 0)
        params.top_k.copy_(torch.tensor([1, 7, 50, 333, v - 1, 50], device=DEV))
        _assert_same_tokens(samplers, logits, params, frames=4, codebook=2)


@NEEDS_TRITON
def test_noise_of_exactly_one_is_clamped(samplers):
    """Seed 7164, frame 0, codebook 0: column 2222's 24 noise bits are all ones, and (2^24-1) + 0.5
    rounds to 2^24 in fp32, so u was 1.0 and its Gumbel noise +inf: that column won whatever its
    logit (and a banned one's -inf + inf was a NaN, which PyTorch's argmax picks: a control token
    reached the codec). Clamped below 1, a column 100 below the others loses in both samplers."""
    tri, ref = samplers
    logits = torch.randn(2, 3072, device=DEV, generator=torch.Generator(device=DEV).manual_seed(3))
    logits[:, 2222] = -100.0
    params = RowParams(torch.ones(2, dtype=torch.bool, device=DEV), torch.ones(2, device=DEV),
                       torch.tensor([0, 3072], device=DEV), torch.ones(2, device=DEV))  # fmt: skip
    seed, frame = torch.full((2,), 7164, device=DEV), torch.zeros(2, dtype=torch.long, device=DEV)
    mine = tri.sample_tokens(logits, TokenSampling(params, seed, frame, 0))
    theirs = ref.sample_tokens(logits, TokenSampling(params, seed, frame, 0))
    assert torch.equal(mine, theirs) and not (theirs == 2222).any()


@pytest.mark.skipif(not triton_available(), reason="the Triton sampler needs Triton")
def test_search_passes_narrow_the_key_range_to_one_key():
    """Each pass leaves at most ceil(width / ways) of the 2^32 keys: a bisection needs 32 passes,
    5 ways 14, and one pass fewer would leave an interval of more than one key. More than 5 ways
    would not fit their counts in one int64."""
    from cadence.kernels.sampling.triton_sampler import topk_search_passes

    assert [topk_search_passes(w) for w in (2, 3, 4, 5)] == [32, 21, 16, 14]
    with pytest.raises(ValueError, match="2 to 5 ways"):
        topk_search_passes(6)
    for ways in (2, 3, 4, 5):
        width = 2**32
        for _ in range(topk_search_passes(ways) - 1):
            width = -(-width // ways)
        assert width > 1


@pytest.mark.skipif(not triton_available(), reason="the Triton sampler needs Triton")
def test_the_search_width_follows_the_block(monkeypatch):
    """The Triton sampler's top-k search width: TOPK_WAYS below 2^16 keys a block, a bisection from
    there (a packed 16-bit count would overflow), read when a kernel is launched, not when a module
    is imported."""
    from cadence.kernels.sampling import triton_sampler

    ways = triton_sampler.TOPK_WAYS
    assert triton_sampler.topk_search(2048) == (ways, triton_sampler.topk_search_passes(ways))
    assert triton_sampler.topk_search(2**15) == triton_sampler.topk_search(2048)
    assert triton_sampler.topk_search(2**16) == (2, 32)
    monkeypatch.setattr(triton_sampler, "TOPK_WAYS", 5)
    assert triton_sampler.topk_search(4096) == (5, 14)


@NEEDS_TRITON
@pytest.mark.parametrize("ways", [2, 5])
def test_top_k_at_the_ends_of_the_key_range(samplers, ways, monkeypatch):
    """Logits near the float range's ends and banned (-inf) ones: the search starts from the whole
    32-bit key range, so the extremes must still count."""
    monkeypatch.setattr("cadence.kernels.sampling.triton_sampler.TOPK_WAYS", ways)
    g = torch.Generator(device=DEV).manual_seed(9)
    logits = torch.randn(4, 2048, device=DEV, generator=g)
    logits[0, :60] = 3e38
    logits[1, :40] = -3e38
    logits[1, 40:] = -float("inf")  # fewer finite values than k
    logits[2, ::3] = 1e-38
    logits[3, 100:] = -float("inf")
    params = _sampled_rows(4, 50)
    params.temperature.fill_(1.0)  # 3e38 / 0.9 would overflow to inf in both
    _assert_same_tokens(samplers, logits, params, frames=3, codebook=1)


@NEEDS_TRITON
def test_tokens_and_their_embeddings_written_in_place(samplers):
    """`out` a column of a frame and `embed_out` the odd rows of a [n, 2, H] pair (the code
    predictor's first input): the tokens the sampler returns without them, and each token's row of
    the table, in both backends; nothing else written."""
    tri, ref = samplers
    g = torch.Generator(device=DEV).manual_seed(6)
    n, v, h = 5, 2048, 1024
    logits = torch.randn(n, v, device=DEV, generator=g) * 2
    table = torch.randn(v, h, device=DEV, generator=g)
    params = _sampled_rows(n, 50)
    params.do_sample[1] = False
    seed, fr = torch.arange(n, device=DEV) + 7, torch.full((n,), 3, device=DEV)
    spec = TokenSampling(params, seed, fr, 4)
    want = ref.sample_tokens(logits, spec)
    for ops_ in (tri, ref):
        frame = torch.full((n, 16), -1, dtype=torch.long, device=DEV)
        pair = torch.zeros(n, 2, h, device=DEV)
        got = ops_.sample_tokens(logits, spec, TokenOutputs(frame[:, 3], table, pair[:, 1]))
        assert got.data_ptr() == frame[:, 3].data_ptr()
        assert torch.equal(frame[:, 3], want) and (frame[:, :3] == -1).all() and (frame[:, 4:] == -1).all()
        assert torch.equal(pair[:, 1], table[want]) and not pair[:, 0].any()


def _slot_tables(slots: int, v: int, g: torch.Generator) -> dict:
    """Slot-indexed sampler inputs as a walk holds them (SlotState): parameters, seeds, frame
    counters, code0 histories, penalties and ignore_eos flags, a row per slot."""
    params = RowParams(
        do_sample=torch.rand(slots, device=DEV, generator=g) < 0.7,
        temperature=torch.rand(slots, device=DEV, generator=g) + 0.5,
        top_k=torch.randint(0, 80, (slots,), device=DEV, generator=g),
        top_p=torch.where(torch.rand(slots, device=DEV, generator=g) < 0.5, 1.0, 0.85),
    )
    return dict(
        params=params, seed=torch.randint(0, 2**40, (slots,), device=DEV, generator=g),
        frame=torch.randint(0, 4, (slots,), device=DEV, generator=g),
        seen=torch.rand(slots, v, device=DEV, generator=g) < 0.05,
        penalty=torch.rand(slots, device=DEV, generator=g) + 1,
        ban_eos=torch.rand(slots, device=DEV, generator=g) < 0.3,
    )  # fmt: skip


def test_rows_read_the_slot_tables_as_gathered_rows():
    """With `rows` (a walk's slots, the dummy slot repeated in padding rows) the definition samples
    each logits row with its slot's parameters, seed, frame counter, history and flags: the tokens
    of the same call on the gathered rows with EOS banned by hand below the rule's `min_frames`; and
    a history that records marks each token in its slot's history, touching no other slot. A history
    of another dtype than bool is refused."""
    g = torch.Generator(device=DEV).manual_seed(12)
    v, eos = 300, 250
    t = _slot_tables(9, v, g)
    rows = torch.tensor([6, 2, 8, 8, 0], device=DEV)  # 8: the dummy slot, twice
    logits = torch.randn(5, v, device=DEV, generator=g) * 3
    logits[:, eos] = 20.0  # EOS is the argmax wherever it is allowed
    seen_before = t["seen"].clone()
    got = reference.sample_tokens(logits, TokenSampling(
        t["params"], t["seed"], t["frame"], 0, rows=rows, history=CodeHistory(t["seen"], t["penalty"], record=True),
        eos=EosRule(t["ban_eos"], eos, suppress_start=200, min_frames=2),
    ))  # fmt: skip
    gathered = {k: (val.take(rows) if k == "params" else val[rows]) for k, val in t.items()}
    ban = gathered["ban_eos"] | (gathered["frame"] < 2)
    want = reference.sample_tokens(logits, TokenSampling(
        gathered["params"], gathered["seed"], gathered["frame"], 0,
        history=CodeHistory(seen_before[rows], gathered["penalty"]), eos=EosRule(ban, eos, suppress_start=200),
    ))  # fmt: skip
    assert torch.equal(got, want)
    assert ((got == eos) == ~ban).all()  # the ban (flag or frame counter) decides EOS here
    marked = seen_before.clone()
    marked[rows, got] = True
    assert torch.equal(t["seen"], marked) and not torch.equal(t["seen"], seen_before)
    history = CodeHistory(t["seen"].to(torch.uint8), t["penalty"], record=True)  # a history of another dtype
    with pytest.raises(ValueError, match="seen must be a contiguous bool tensor"):
        reference.sample_tokens(
            logits, TokenSampling(t["params"], t["seed"], t["frame"], 0, rows=rows, history=history)
        )


@NEEDS_TRITON
def test_rows_match_definition(samplers):
    """The kernel with `rows`, the EOS ban below `min_frames` and a recording history: the definition's
    tokens, embedding rows and histories over several frames (the histories carried from frame to
    frame, as a walk's code0 samplers carry them)."""
    tri, ref = samplers
    g = torch.Generator(device=DEV).manual_seed(13)
    v, h, eos = 3072, 64, 2150
    t = _slot_tables(7, v, g)
    rows = torch.tensor([3, 0, 6, 6], device=DEV)
    table = torch.randn(v, h, device=DEV, generator=g)
    seen = {"tri": t["seen"].clone(), "ref": t["seen"].clone()}
    for frame in range(4):
        logits = torch.randn(4, v, device=DEV, generator=g) * 3
        logits[:, eos] = 4.0
        t["frame"].fill_(frame)
        out = {}
        for name, ops_ in (("tri", tri), ("ref", ref)):
            emb = torch.zeros(4, h, device=DEV)
            spec = TokenSampling(
                t["params"], t["seed"], t["frame"], 0, rows=rows, history=CodeHistory(seen[name], t["penalty"], True),
                eos=EosRule(t["ban_eos"], eos, suppress_start=2048, min_frames=2),
            )  # fmt: skip
            tokens = ops_.sample_tokens(logits, spec, TokenOutputs(embed_table=table, embed_out=emb))
            out[name] = tokens, emb
        assert torch.equal(out["tri"][0], out["ref"][0]), (frame, out)
        assert torch.equal(out["tri"][1], out["ref"][1]) and torch.equal(seen["tri"], seen["ref"])
        codes = tri.sample_tokens(logits, TokenSampling(t["params"], t["seed"], t["frame"], 5, rows=rows))
        assert torch.equal(
            codes, ref.sample_tokens(logits, TokenSampling(t["params"], t["seed"], t["frame"], 5, rows=rows))
        )


def test_token_outputs_are_checked():
    """Wrong outputs fail before any kernel runs, with what was expected."""
    logits = torch.randn(3, 64)
    params = RowParams(torch.zeros(3, dtype=torch.bool), torch.ones(3), torch.zeros(3, dtype=torch.long), torch.ones(3))
    spec = TokenSampling(params, torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long), 1)
    table = torch.randn(64, 8)
    with pytest.raises(ValueError, match=r"tokens must be a \[3\] long tensor"):
        reference.sample_tokens(logits, spec, TokenOutputs(torch.zeros(3, dtype=torch.int32)))
    with pytest.raises(ValueError, match="go together"):
        reference.sample_tokens(logits, spec, TokenOutputs(embed_table=table))
    with pytest.raises(ValueError, match=r"embed_out must be \[3, 8\]"):
        reference.sample_tokens(logits, spec, TokenOutputs(None, table, torch.zeros(3, 8, dtype=torch.float64)))
    with pytest.raises(ValueError, match="unit inner stride"):
        reference.sample_tokens(logits, spec, TokenOutputs(None, table, torch.zeros(8, 3).t()))
    tokens = reference.sample_tokens(logits, spec)
    assert torch.equal(tokens, logits.argmax(-1))


@NEEDS_TRITON
@pytest.mark.parametrize("ways", [2, 5])
@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=NEEDS_BF16)])
def test_top_k_separates_neighbouring_floats(samplers, ways, dtype, monkeypatch):
    """Logits one float apart (consecutive keys; in bf16 consecutive bf16 values, which the CUDA
    kernel's 16-bit keys must still tell apart), so a search that stopped short of a single key
    would keep the k-th value's neighbours: over 64 rows of near-equal logits the noise picks among
    the kept set, and a larger set shows in the tokens."""
    monkeypatch.setattr("cadence.kernels.sampling.triton_sampler.TOPK_WAYS", ways)
    g = torch.Generator(device=DEV).manual_seed(10)
    n, v = 64, 2048
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    half = torch.tensor(0.5, dtype=dtype).view(bits)
    adjacent = (torch.arange(v, dtype=bits) + half).view(dtype).to(DEV)
    logits = torch.stack([adjacent[torch.randperm(v, generator=g, device=DEV)] for _ in range(n)])
    params = _sampled_rows(n, 0)
    params.temperature.fill_(1.0)
    params.top_k.copy_(torch.tensor([1, 5, 50, 333], device=DEV).repeat(n // 4))
    _assert_same_tokens(samplers, logits, params, frames=4, codebook=1)


@NEEDS_TRITON
def test_top_k_over_a_vocabulary_of_65536_slots(ops):
    """A vocabulary of 2^16 codes (the search's counts no longer fit 16 bits, so it bisects): 5536
    codes near +1 and 60000 just below -1, top-k 5636. The search's threshold -2^30 counts all
    65536 keys, which must not wrap to 0 (the k-th value would then fall below every key and the
    low cluster, kept whole, would win the noise about half the time)."""
    g = torch.Generator(device=DEV).manual_seed(11)
    logits = torch.cat([1 + 0.01 * torch.rand(5536, device=DEV, generator=g),
                        -1 - 0.01 * torch.rand(60000, device=DEV, generator=g)])[None]  # fmt: skip
    params = _sampled_rows(1, 5636)
    _assert_same_tokens(ops, logits, params, frames=8, codebook=1)  # the Triton kernel: the CUDA one stops at 4096
