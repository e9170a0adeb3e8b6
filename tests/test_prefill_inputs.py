"""A prefill's inputs, made with few device ops, against the per-field writes and the formulas they
replaced, bit for bit: SlotState.assign_batch (every admission of a prefill in one copy and a few
indexed writes) and Qwen3TTS.prefill_embeddings_batch."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cadence.engine.request import EngineRequest
from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request
from cadence.models.qwen3_tts.partitions import Qwen3TTSTalker, SlotState
from cadence.models.qwen3_tts.prompt import Prompt

SLOTS = [2, 0]  # of 4; slots 1, 3 and the dummy slot 4 stay as they are


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return Qwen3TTS.from_pretrained(tiny_checkpoint, "cpu", "fp32")


def requests(model: Qwen3TTS, first: int) -> list[EngineRequest]:
    """Two requests that differ in every field: sampling parameters, EOS, trailing text (streaming
    layout: one per text token; whole: none), prompt length."""
    asks = [
        SynthesisRequest("A streamed sentence, with a few words.", layout="streaming", temperature=0.7, top_k=20,
                         top_p=0.8, repetition_penalty=1.3, subtalker_temperature=0.6, subtalker_top_k=9,
                         subtalker_top_p=0.95, seed=2**40 + first, ignore_eos=True, request_id=f"a{first}"),
        SynthesisRequest("Short.", layout="whole", greedy=True, seed=first, request_id=f"b{first}"),
    ]  # fmt: skip
    return [prepare_request(model, a, 4096) for a in asks]


def embeddings_before(model: Qwen3TTS, prompts: list[Prompt]) -> torch.Tensor:
    """Qwen3TTS.prefill_embeddings_batch as it was: flags as ids, a `where` per track."""
    rows = [
        (t if t is not None else 0, c if c is not None else 0, t is not None, c is not None)
        for p in prompts
        for t, c in zip(p.text_track, p.codec_track, strict=True)
    ]
    ids = torch.tensor(rows, dtype=torch.long)
    text = model.talker.embed_text(ids[:, 0])
    codec = model.talker.embed_codec(ids[:, 1])
    zero = torch.zeros((), dtype=text.dtype)
    text = torch.where(ids[:, 2:3].bool(), text, zero)
    out = text + torch.where(ids[:, 3:4].bool(), codec, zero)
    offset = 0
    for prompt in prompts:
        if prompt.speaker_row is not None:
            row = offset + prompt.speaker_row
            out[row] = text[row] + torch.tensor(prompt.speaker_embedding, dtype=torch.float32).to(text.dtype)
        if prompt.ref_row is not None and prompt.ref_codes:
            ref_rows = slice(offset + prompt.ref_row, offset + prompt.ref_row + len(prompt.ref_codes))
            out[ref_rows] = text[ref_rows] + model.talker.embed_frame(torch.tensor(prompt.ref_codes))
        offset += len(prompt)
    return out


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_prefill_embeddings_equal_the_where_formula_bit_for_bit(tiny_checkpoint, dtype):
    """Prompts of both layouts, and a made-up one with a cloned voice's rows (an x-vector and
    reference frames, on rows whose codec track is absent) and a row without text, in one batch."""
    model = Qwen3TTS.from_pretrained(tiny_checkpoint, "cpu", dtype)
    prompts = [r.prompt for r in requests(model, 1)] + [model.prompt("Another voice.", "vivian")]
    g = torch.Generator().manual_seed(0)
    p = prompts[0]
    rows = [i for i, c in enumerate(p.codec_track) if c is None]  # the cloned voice's rows go there
    assert rows[1] + 2 <= len(p)
    cloned = dataclasses.replace(
        p,
        text_track=(*p.text_track[:-1], None),
        speaker_row=rows[0],
        speaker_embedding=tuple(torch.randn(model.config.talker.hidden_size, generator=g).tolist()),
        ref_row=rows[1],
        ref_codes=tuple(map(tuple, torch.randint(0, 2048, (2, 16), generator=g).tolist())),
    )
    bits = torch.int16 if dtype == "bf16" else torch.int32  # compared as bits: -0.0 is not 0.0
    for batch in ([prompts[1]], [*prompts, cloned]):
        mine, theirs = model.prefill_embeddings_batch(batch), embeddings_before(model, batch)
        assert mine.dtype == theirs.dtype and torch.equal(mine.view(bits), theirs.view(bits))


def assign_one(st: SlotState, slot: int, request: EngineRequest, pages: list[int], prompt_len: int) -> None:
    """SlotState.assign as it was before assign_batch: one admission, one write per field."""
    p, trailing = request.params, request.prompt.trailing_text
    st.hidden[slot].zero_()
    st.step[slot].fill_(0)
    st.position[slot].fill_(prompt_len)
    st.trailing[slot, : len(trailing)] = torch.tensor(trailing, dtype=torch.long)
    st.trailing_len[slot].fill_(len(trailing))
    st.seen[slot].fill_(False)
    st.seed[slot].fill_(p.seed if p.seed is not None else 0)
    st.ignore_eos[slot].fill_(request.ignore_eos)
    st.rep_penalty[slot].fill_(p.repetition_penalty)
    for rows, (do_sample, temperature, top_k, top_p) in (
        (st.code0, (p.do_sample, p.temperature, p.top_k, p.top_p)),
        (st.codes, (p.subtalker_dosample, p.subtalker_temperature, p.subtalker_top_k, p.subtalker_top_p)),
    ):
        rows.do_sample[slot].fill_(do_sample)
        rows.temperature[slot].fill_(temperature)
        rows.top_k[slot].fill_(top_k)
        rows.top_p[slot].fill_(top_p)
    st.block_table[slot, : len(pages)] = torch.tensor(pages, dtype=torch.long)


def fields(st: SlotState) -> dict[str, torch.Tensor]:
    names = ("hidden", "step", "position", "trailing", "trailing_len", "seen", "seed", "ignore_eos", "rep_penalty")
    out = {n: getattr(st, n) for n in (*names, "block_table")}
    for rows in ("code0", "codes"):
        for f in ("do_sample", "temperature", "top_k", "top_p"):
            out[f"{rows}.{f}"] = getattr(getattr(st, rows), f)
    return out


def assign_both(old: SlotState, new: SlotState, reqs: list[EngineRequest], pages: list[list[int]]) -> None:
    lens = [len(r.prompt) for r in reqs]
    for slot, r, p, n in zip(SLOTS, reqs, pages, lens, strict=True):
        assign_one(old, slot, r, p, n)
    new.assign_batch(SLOTS, reqs, pages, lens)


def test_assign_batch_writes_what_the_per_slot_assign_wrote(model):
    talker = Qwen3TTSTalker(model, 4, 2**22, 16, 64, 256)
    old, new = talker.state, Qwen3TTSTalker(model, 4, 2**22, 16, 64, 256).state
    first = requests(model, 1)
    assert first[0].prompt.trailing_text and not first[1].prompt.trailing_text
    assign_both(old, new, first, [[5, 9, 1], [7]])
    for name, theirs in fields(old).items():  # from fresh state: every entry of every slot the same
        assert torch.equal(fields(new)[name], theirs), name
    assert new.block_table[talker.dummy_slot].eq(talker.kv.scratch_page).all()

    # The slots change hands (the requests the other way round): what walks left there must not leak.
    for st in (old, new):
        for t in fields(st).values():
            t[SLOTS] = True if t.dtype == torch.bool else 3
    second, pages = requests(model, 2)[::-1], [[8], [2, 3, 4, 6]]
    assign_both(old, new, second, pages)
    # Trailing text and block tables are compared where walks read them; `hidden` is the prefill's.
    read = {"trailing": [len(r.prompt.trailing_text) for r in second], "block_table": [len(p) for p in pages]}
    others = [s for s in range(talker.dummy_slot + 1) if s not in SLOTS]
    for name, theirs in fields(old).items():
        mine = fields(new)[name]
        assert torch.equal(mine[others], theirs[others]), name
        if name == "hidden":
            assert mine[SLOTS].eq(3).all()
            continue
        for slot, used in zip(SLOTS, read.get(name, [None, None]), strict=True):
            assert torch.equal(mine[slot].reshape(-1)[:used], theirs[slot].reshape(-1)[:used]), (name, slot)
