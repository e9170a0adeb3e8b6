"""The CUDA sampler (kernels/sampling/cuda/sampler.cu, cuda_sampler.py) against its definition,
sampling/reference.py's sample_tokens: its source run on the CPU through tests/cuda_emulation (every CUDA thread a
fiber), the premise of its 16-bit top-k keys on every bf16 value, and on a GPU the kernel itself
(the `gpu` marker; test_sampling_kernels.py runs its shared cases on both GPU samplers too)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch
from cuda_driver import blob, emulate, needs_gxx

from cadence.kernels.sampling import CodeHistory, EosRule, RowParams, TokenOutputs, TokenSampling, reference
from cadence.kernels.sampling.cuda_sampler import SOURCE, SamplerPlan, threads_for

gpu = pytest.mark.gpu


@pytest.mark.parametrize("temperature", [0.05, 0.3, 0.7, 0.9, 1.0, 1.3, 2.0, 10.0])
def test_bf16_values_keep_their_order_under_temperature(temperature):
    """The 16-bit keys' premise: x / T in fp32 (IEEE, as PyTorch and the kernel divide) is strictly
    increasing over every finite bf16 value but -0 (equal to +0 as a float, below it as a key, in
    both samplers) for every temperature a request may ask (0, 10], so the k-th largest x is the
    k-th largest x / T with the same ties: top-k over x's 16 bits keeps what top-k over y keeps."""
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    x = bits.view(torch.bfloat16).float()
    x = x[~torch.isnan(x) & ~((x == 0) & torch.signbit(x))].sort().values
    assert x.numel() == 65536 - 2 * 127 - 1  # the NaNs and -0 out, +-inf in
    y = x / torch.tensor(temperature, dtype=torch.float32)
    # Where x / T overflows (|x| > 3.4e38 * T: both samplers' keys then differ from y's ties) is out
    # of any logit's reach.
    y = y[torch.isfinite(y) | torch.isinf(x)]
    assert y.numel() > 64000 and (y[1:] > y[:-1]).all()


def test_plan_keys_and_shared_memory():
    """16-bit keys exactly where the logits are bf16 values (no penalty), and shared memory for a
    pass's bins each and the warps' partial results."""
    plan = SamplerPlan(2048, True, True, False, False, False, 512)
    assert plan.key_bits == 16 and dict(plan.defines)["KEY_BITS"] == 16
    assert SamplerPlan(3072, True, True, True, True, True, 512).key_bits == 32  # the penalty's products
    assert SamplerPlan(2048, False, False, False, False, False, 0).key_bits == 32  # fp32 logits
    assert plan.smem >= 2 * 256 * 4 + 8 + 8 * 16
    assert (threads_for(2048), threads_for(3072)) == (256, 512)  # the walk's two calls


def _tables(slots: int, v: int, g: torch.Generator, device: str = "cpu") -> dict:
    """Slot-indexed tables as SlotState holds them (dtypes included): greedy and sampled rows,
    top-k off, 1, small, large and one short of the vocabulary, top-p on and off."""

    def pattern(values: list, dtype=None) -> torch.Tensor:  # the 8 cases, repeated over the slots
        return torch.tensor(values, dtype=dtype).repeat(-(-slots // 8))[:slots]

    tables = dict(
        params=RowParams(
            do_sample=pattern([1, 1, 1, 1, 1, 0, 1, 1], torch.bool),
            temperature=pattern([0.9, 0.5, 1.3, 0.9, 2.0, 1.0, 0.7, 0.9]),
            top_k=pattern([50, 1, 7, 0, v - 1, 50, 3, 200]),
            top_p=pattern([1.0, 1.0, 1.0, 0.8, 1.0, 1.0, 0.6, 1.0]),
        ),
        seed=torch.randint(0, 2**40, (slots,), generator=g),
        frame=torch.randint(0, 4, (slots,), generator=g),
        seen=torch.rand(slots, v, generator=g) < 0.1,
        penalty=torch.rand(slots, generator=g) + 1,
        ban_eos=torch.rand(slots, generator=g) < 0.5,
    )
    p = tables["params"]
    tables["params"] = RowParams(*(x.to(device) for x in (p.do_sample, p.temperature, p.top_k, p.top_p)))
    return {k: (x.to(device) if isinstance(x, torch.Tensor) else x) for k, x in tables.items()}


def _emulate(tmp_path: Path, plan: SamplerPlan, logits, t: dict, rows, table, **kw):
    """The kernel of `plan` on the CPU emulation: (tokens [n], the history after, the embedding rows)."""
    n = logits.shape[0]
    words = plan.embed_words
    p = t["params"]
    seen = t["seen"] if plan.seen else None
    tensors = (logits, rows, seen, t["penalty"] if plan.seen else None, t["ban_eos"] if plan.ban else None,
               p.do_sample, p.temperature, p.top_k, p.top_p, t["seed"], t["frame"], table)  # fmt: skip
    key = (kw.get("codebook", 0) * 0x1E3779B9) & 0xFFFFFFFF
    args = b"".join(blob(tensor) for tensor in tensors)
    args += struct.pack("<7q", n, kw.get("eos_id", -1), kw.get("suppress_start", -1), kw.get("eos_min_frames", 0),
                        key, 16, words)  # fmt: skip
    raw = emulate(tmp_path, "sampler_driver", SOURCE, plan.defines, args)
    out = torch.frombuffer(bytearray(raw[: n * 16 * 8]), dtype=torch.long).view(n, 16)
    assert (out[:, 1:] == -1).all()  # one column of the frame written
    rest = raw[n * 16 * 8 :]
    seen_bytes = seen.numel() if seen is not None else 0
    seen_after = torch.frombuffer(bytearray(rest[:seen_bytes]), dtype=torch.bool).view_as(seen) if seen_bytes else None
    emb = torch.frombuffer(bytearray(rest[seen_bytes:]), dtype=torch.int32).view(n, words)
    return out[:, 0], seen_after, emb


def _reference(logits, t: dict, rows, table, plan: SamplerPlan, **kw):
    seen = t["seen"].clone() if plan.seen else None
    emb = torch.zeros(logits.shape[0], table.shape[1], dtype=table.dtype)
    history = CodeHistory(seen, t["penalty"], record=plan.mark_seen) if plan.seen else None
    eos = EosRule(t["ban_eos"], kw["eos_id"], kw["suppress_start"], kw["eos_min_frames"]) if plan.ban else None
    spec = TokenSampling(t["params"], t["seed"], t["frame"], kw.get("codebook", 0), rows, history, eos)
    tokens = reference.sample_tokens(logits, spec, TokenOutputs(None, table, emb))
    return tokens, seen, emb


@needs_gxx
@pytest.mark.parametrize(
    "case", ["bf16-16bit-keys", "adjacent-bf16", "fp32-penalty-ban-history", "walk-shape", "code0-shape"]
)
def test_kernel_logic_on_the_cpu(tmp_path, case):
    """The kernel's source on the CPU emulation against the definition: tokens, the code history it
    marks and the embedding rows it copies. 300 codes over 64 threads (5 columns a thread, the last
    partly past the vocabulary), rows read through a slot list with one slot twice, greedy and
    sampled rows, top-k at 1, 7, 50, v - 1 and off, top-p below 1; bf16 logits on a coarse grid (many
    ties at the k-th value) with 16-bit keys; fp32 logits with the penalty, the control-token mask
    and EOS banned below a frame count (32-bit keys); consecutive bf16 values with top-k 1 to 5, so
    that keys one bit too coarse would keep a neighbour and the noise would pick it in some rows;
    and the walk's two shapes: a code-predictor step's 2048 bf16 logits over 256 threads, and
    code0's 3072 with the penalty, mask and history over 512."""
    g = torch.Generator().manual_seed(21)
    walk, code0 = case == "walk-shape", case == "code0-shape"
    v, slots, threads = (2048, 8, 256) if walk else (3072, 8, 512) if code0 else (300, 8, 64)
    rows = torch.tensor([2, 0] if walk or code0 else [6, 2, 7, 7, 0, 3])
    t = _tables(slots, v, g)
    n = rows.numel()
    kw = {}
    if case not in ("fp32-penalty-ban-history", "code0-shape"):
        logits = (torch.randint(-40, 40, (n, v), generator=g).float() / 8).to(torch.bfloat16)
        if walk:
            logits = (torch.randn(n, v, generator=g) * 2).to(torch.bfloat16)
        if case == "adjacent-bf16":  # 300 consecutive bf16 values from 0.5 up, in another order a row
            rows, n = torch.arange(slots), slots
            adjacent = torch.arange(v, dtype=torch.int16) + torch.tensor(0.5).to(torch.bfloat16).view(torch.int16)
            logits = torch.stack([adjacent[torch.randperm(v, generator=g)] for _ in range(n)]).view(torch.bfloat16)
            t["params"] = RowParams(torch.ones(slots, dtype=torch.bool), torch.ones(slots),
                                    torch.tensor([1, 2, 1, 5, 1, 2, 1, 3]), torch.ones(slots))  # fmt: skip
        table = torch.randn(v, 16, generator=g).to(torch.bfloat16)  # 8 words: 16-byte copies
        plan = SamplerPlan(v, True, True, False, False, False, 8, threads=threads)
        assert plan.key_bits == 16
    else:
        logits = torch.randn(n, v, generator=g) * 3
        logits[:, 250] = 3.0
        table = torch.randn(v, 6, generator=g)  # 6 words: 4-byte copies
        if code0:
            logits, table = logits.to(torch.bfloat16), torch.randn(v, 64, generator=g).to(torch.bfloat16)
        plan = SamplerPlan(v, code0, True, True, True, True, 32 if code0 else 6, threads=threads)
        kw = dict(eos_id=2150 if code0 else 250, suppress_start=2048 if code0 else 200, eos_min_frames=2, codebook=0)
    tokens, seen, emb = _emulate(tmp_path, plan, logits, t, rows, table, **kw)
    want, want_seen, want_emb = _reference(logits, t, rows, table, plan, **kw)
    assert torch.equal(tokens, want), (tokens, want)
    assert torch.equal(emb, want_emb.view(torch.int32).view(n, -1))
    if plan.mark_seen:
        assert torch.equal(seen, want_seen) and not torch.equal(seen, t["seen"])


# -- on the GPU ---------------------------------------------------------------------------------------


def _cuda():
    from cadence.kernels.sampling.cuda_sampler import cuda_sample_tokens, sampler_supported

    if not torch.cuda.is_available() or not sampler_supported(torch.device("cuda")):
        pytest.skip("needs a Hopper GPU with NVRTC")
    return cuda_sample_tokens


@gpu
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_walk_shaped_calls_match_definition(rows):
    """The calls a walk makes, on bf16 logits: code0's (3072 codes, the penalty over a history, the
    control-token mask, EOS banned below 2 frames, the token marked in the history, its embedding
    row) and a code-predictor step's (2048 codes, 16-bit keys, its embedding row), at the
    generation config's top-k 50 and temperature 0.9, over 6 frames: the definition's tokens,
    histories and rows."""
    sample = _cuda()
    g = torch.Generator(device="cuda").manual_seed(rows)
    dev = "cuda"
    slots = rows + 1
    t = _tables(slots, 3072, torch.Generator().manual_seed(1), dev)
    t["params"].top_k.fill_(50)
    t["params"].top_p.fill_(1.0)
    t["params"].temperature.fill_(0.9)
    slot_list = torch.randperm(slots, device=dev, generator=g)[:rows]
    for vocab, first in ((3072, True), (2048, False)):
        table = torch.randn(vocab, 1024, device=dev, generator=g).to(torch.bfloat16)
        seen = {"cuda": t["seen"].clone(), "ref": t["seen"].clone()}
        for frame in range(6):
            t["frame"].fill_(frame)
            logits = (torch.randn(rows, vocab, device=dev, generator=g) * 2).to(torch.bfloat16)
            got = {}
            for name, fn in (("cuda", sample), ("ref", reference.sample_tokens)):
                emb = torch.zeros(rows, 2, 1024, device=dev, dtype=torch.bfloat16)
                code0 = dict(history=CodeHistory(seen[name], t["penalty"], record=True),
                             eos=EosRule(t["ban_eos"], 2150, suppress_start=2048, min_frames=2))  # fmt: skip
                extra = code0 if first else {}
                spec = TokenSampling(t["params"], t["seed"], t["frame"], 0 if first else 3, rows=slot_list, **extra)
                tokens = fn(logits, spec, TokenOutputs(None, table, emb[:, 1]))
                got[name] = tokens, emb
            assert torch.equal(got["cuda"][0], got["ref"][0]), (vocab, frame)
            assert torch.equal(got["cuda"][1], got["ref"][1]) and torch.equal(seen["cuda"], seen["ref"])
