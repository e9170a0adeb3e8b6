"""The fused decode walk (fast_step.py) against the eager walk, whose parity with the official
implementation is established in test_parity.py / test_engine.py.

On the CPU the fused walk runs with the PyTorch definitions of its fused ops ("torch" backend), so
CI checks its logic (state gathering by slot, the dummy padding slot, the code predictor's paged
cache, the fused layer order); on a GPU ("gpu" marker) the Triton kernels under CUDA graphs.
"""

from __future__ import annotations

import pytest
import torch
from engine_cases import codes_of, config, force_code0, request, run

from cadence.engine.engine import build_core
from cadence.engine.request import FinishReason
from cadence.kernels.config import KernelConfig
from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.prompt import Prompt
from cadence.models.qwen3_tts.reference import greedy_misses

FRAMES = 64


def backends():
    yield "torch"
    if torch.cuda.is_available():
        yield pytest.param("triton", marks=pytest.mark.gpu)


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    if torch.cuda.is_available():  # fp32 without TF32 so greedy codes can be compared exactly
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return Qwen3TTS.from_pretrained(tiny_checkpoint, "cuda", "fp32")
    return Qwen3TTS.from_pretrained(tiny_checkpoint, "cpu", "fp32")


def both_walks(model, backend, reqs, arrivals=None, **cfg):
    out = {}
    for b in ("sdpa", backend):
        core = build_core(model, config(attention_backend=b, **cfg))
        out[b] = run(core, arrivals or {0: reqs})
    return out["sdpa"], out[backend]


def near_ties_on_greedy_path(model, req, codes: torch.Tensor, tol: float = 1e-4) -> int:
    """Check that `codes` are the eager oracle's greedy choices at every step, teacher-forcing the
    oracle on them; a different choice is accepted only where the oracle's own margin (top1 - top2)
    is below `tol` (a near-tie that rounding may flip). Returns the number of such ties."""
    misses = greedy_misses(model, req.prompt, req.params, codes)
    for m in misses:
        assert m.gap < tol, f"frame {m.frame} codebook {m.codebook}: fused chose {m.chosen}, margin {m.gap:.3g}"
    return len(misses)


@pytest.mark.parametrize("backend", list(backends()))
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_fused_greedy_codes_equal_eager(model, backend, batch):
    reqs = [request(model, i, FRAMES - 3 * i) for i in range(batch)]
    eager, fused = both_walks(model, backend, reqs)
    for r in reqs:
        mine = codes_of(fused[r.request_id])
        assert mine.shape[0] == r.params.max_new_tokens
        if not torch.equal(mine, codes_of(eager[r.request_id])):
            ties = near_ties_on_greedy_path(model, r, mine)
            print(f"{r.request_id}: fused and eager part at a near-tie ({ties} tie(s) on the fused path)")


@pytest.mark.parametrize("backend", list(backends()))
def test_fused_sampling_equals_eager_and_late_joiners(model, backend):
    reqs = [request(model, i, 20 + i, greedy=False, seed=100 + i) for i in range(5)]
    eager, fused = both_walks(model, backend, reqs, {0: reqs[:2], 3: reqs[2:4], 7: reqs[4:]})
    for r in reqs:
        assert torch.equal(codes_of(fused[r.request_id]), codes_of(eager[r.request_id])), r.request_id


def test_the_code_predictors_first_pass_asks_for_two_new_tokens_a_stream(model, monkeypatch):
    """The code predictor's first pass (positions 0 and 1 of each stream as consecutive rows) goes to
    the decode attention as two new tokens a sequence (the CUDA decode attention takes it at 64
    streams), its 14 decode steps and the talker's rows as one; with the torch ops the definition
    is the same either way, so the walk's codes are checked by the tests above."""
    from cadence.kernels.ops import TorchOps

    seen: list[tuple[int, int]] = []
    define = TorchOps.qk_norm_rope_attention

    def record(self, qkv, *args, new_tokens: int = 1, **kwargs):
        seen.append((qkv.shape[0], new_tokens))
        return define(self, qkv, *args, new_tokens=new_tokens, **kwargs)

    monkeypatch.setattr(TorchOps, "qk_norm_rope_attention", record)
    core = build_core(model, config(attention_backend="torch"))
    run(core, {0: [request(model, i, 2) for i in range(3)]})
    layers = len(model.talker.code_predictor.model.layers)
    first = [rows for rows, n in seen if n == 2]
    assert first and len(first) % layers == 0 and all(rows % 2 == 0 for rows in first)
    assert {n for _, n in seen} == {1, 2}


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="programmatic dependent launch needs a GPU of compute capability >= 9",
)
def test_programmatic_dependent_launch_changes_no_code(tiny_checkpoint, monkeypatch):
    """The fused walk under CUDA graphs with its kernels launched early (KernelConfig.pdl_max_rows:
    every graph, each kernel waiting for the one before; the decode graphs letting the next kernel
    in after that wait, the prefill graphs of more than 32 rows before it): greedy and sampled codes,
    late joiners included, are the same bits as with plain launches. In bf16, so the weight-streaming
    GEMM (and its L2 prefetch) runs. The settings reach the captures and are restored after each."""
    from cadence.kernels.gpu_ops import TritonOps
    from cadence.kernels.launch.pdl import pdl_launch

    model = Qwen3TTS.from_pretrained(tiny_checkpoint, "cuda", "bf16")
    reqs = [request(model, i, 24 + i, greedy=i % 2 == 0, seed=300 + i) for i in range(6)]
    arrivals = {0: reqs[:3], 2: reqs[3:5], 5: reqs[5:]}
    plain = run(build_core(model, config(attention_backend="triton", kernels=KernelConfig(pdl_max_rows=0))), arrivals)
    before = pdl_launch(torch.zeros(1, device="cuda"))["USE_PDL"]  # the process's, for eager launches
    seen: list[tuple[bool, bool]] = []
    settings = TritonOps.pdl_settings
    monkeypatch.setattr(
        TritonOps, "pdl_settings", lambda ops, on, first: seen.append((on, first)) or settings(ops, on, first)
    )
    early = run(
        build_core(model, config(attention_backend="triton", kernels=KernelConfig(pdl_max_rows=4096))), arrivals
    )
    assert seen and all(on for on, _ in seen)  # every capture with PDL
    orders = {first for _, first in seen}
    assert orders == {True, False}  # prefill buckets above 32 rows trigger first, decode ones below do not
    assert pdl_launch(torch.zeros(1, device="cuda"))["USE_PDL"] == before
    for r in reqs:
        assert torch.equal(codes_of(early[r.request_id]), codes_of(plain[r.request_id])), r.request_id


@pytest.mark.parametrize("backend", list(backends()))
def test_eos_is_emitted_by_the_fused_walk(model, backend):
    """Regression: a graph replay must read the EOS ban from device state, not a placeholder."""
    eos = model.config.talker.codec_eos_token_id
    forced = force_code0(model, eos)
    core = build_core(forced, config(attention_backend=backend))
    reqs = [request(forced, i, 50) for i in range(3)]
    out = run(core, {0: reqs[:1], 1: reqs[1:]})
    for r in reqs:
        assert out[r.request_id][-1].finish_reason == FinishReason.STOP
        assert codes_of(out[r.request_id]).shape[0] == 2  # EOS is banned for exactly two frames
    assert core.talker.kv.used_pages == 0


@pytest.mark.parametrize("backend", list(backends()))
def test_prefill_padded_to_a_token_bucket_equals_exact_rows(model, backend):
    """Prefill rows padded up to a token bucket (as the prefill graphs run them: padding rows on the
    dummy slot's scratch page) change nothing: prompts of several lengths in one prefill, a late
    joiner, sampled codes equal with and without padding (on a GPU: prefill graphs against an
    engine without graphs)."""
    reqs = [request(model, i, 24 - 2 * i, greedy=False, seed=40 + i) for i in range(4)]
    assert len({len(r.prompt) for r in reqs}) > 1
    arrivals = {0: reqs[:3], 2: reqs[3:]}
    exact = build_core(model, config(attention_backend=backend, enforce_eager=True))
    padded = build_core(model, config(attention_backend=backend))
    padded.talker.fast.pad_prefill = True  # no effect under graphs, where every prefill pads
    out_exact, out_padded = run(exact, arrivals), run(padded, arrivals)
    for r in reqs:
        assert torch.equal(codes_of(out_padded[r.request_id]), codes_of(out_exact[r.request_id])), r.request_id
    assert padded.talker.kv.used_pages == 0


@pytest.mark.parametrize("backend", list(backends()))
def test_a_walks_second_half_waits_for_advance_and_runs_before_slot_state_changes(model, backend):
    """decode() queues only the frames; the talker layers over them (which only the next frame needs)
    run on advance(), or first thing in the next decode() or prefill(), before a slot is reassigned.
    A request joining in a slot freed meanwhile, with the last walk's second half still pending,
    gets the same codes as when every walk is advanced at once (sampled, so state leaks would show)."""
    from cadence.engine.partition import Admission

    def codes(advance_each_walk: bool) -> tuple[dict[str, torch.Tensor], bool]:
        core = build_core(model, config(attention_backend=backend, max_streams=2))
        talker = core.talker
        reqs = [request(model, i, 16, greedy=False, seed=70 + i) for i in range(3)]

        def admit(req):
            pages = talker.kv.allocate(talker.kv.pages_for(talker.tokens_to_reserve(req, 16)))
            return Admission(core.free_slots.pop(), req, pages)

        first, second = admit(reqs[0]), admit(reqs[1])
        talker.prefill([first, second])
        got: dict[str, list[torch.Tensor]] = {r.request_id: [] for r in reqs}
        held_back = True  # decode() left the talker layers (the hidden state) alone, every walk
        live = [first, second]
        for k in range(8):
            hidden = talker.state.hidden[first.slot].clone()
            out = talker.decode([a.slot for a in live])
            out.wait()
            # the frame is out, the talker layers over it not yet run
            held_back &= torch.equal(talker.state.hidden[first.slot], hidden)
            for i, a in enumerate(live):
                got[a.request.request_id].append(out.frames[i].clone())
            if advance_each_walk:
                talker.advance()
            if k == 3:  # the second request leaves; a third takes its slot at once
                talker.kv.release(second.pages)
                talker.release(second.slot)
                core.free_slots.append(second.slot)
                third = admit(reqs[2])
                assert third.slot == second.slot
                talker.prefill([third])
                live = [first, third]
        return {r: torch.stack(f) for r, f in got.items()}, held_back

    stepwise, held_back = codes(advance_each_walk=True)  # nothing pending when each decode() starts
    lazy, _ = codes(advance_each_walk=False)
    assert held_back
    for rid in stepwise:
        assert torch.equal(lazy[rid], stepwise[rid]), rid


def test_prefill_inputs_layout(model):
    """The tracks of both prompts then padding (both tracks absent), the rows whose codec embedding
    comes from `extra`, row positions restarting per prompt, padding rows and prompt entries
    pointing at the dummy slot."""
    core = build_core(model, config(attention_backend="torch"))
    fast = core.talker.fast
    prompts = [Prompt((7, 8, None), (None, 5, 6), (), 2), Prompt((9, 10), (11, None), (), 2)]
    inputs = fast._prefill_inputs([5, 2], prompts, 8, [2])
    dummy = fast.dummy
    assert inputs[0].tolist() == [7, 8, 0, 9, 10, 0, 0, 0]
    assert inputs[1].tolist() == [0, 5, 6, 11, 0, 0, 0, 0]
    assert inputs[2].tolist() == [0, 0, 1, 0, 0, 1, 1, 1]
    assert inputs[3].tolist() == [1, 0, 0, 0, 1, 1, 1, 1]
    assert inputs[4].tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    assert inputs[5].tolist() == [0, 1, 2, 0, 1, 0, 0, 0]
    assert inputs[6].tolist() == [5, 5, 5, 2, 2, dummy, dummy, dummy]
    assert inputs[7].tolist() == [2, 4, 0, 0, 0, 0, 0, 0]
    assert inputs[8].tolist() == [5, 2, dummy, dummy, dummy, dummy, dummy, dummy]
    assert fast.prefill_buckets[-1] == core.config.prefill_token_budget
