"""Base (voice cloning) and VoiceDesign against the official qwen-tts 0.1.1, on random checkpoints.

Greedy, fp32, the comparison of tests/parity.py: the same prompt (ids, and prefill embeddings within
1e-5), talker and code-predictor logits within 1e-4 at every step teacher-forced on the official
codes, identical free-run codes up to the first near-tie. Base in both clone modes (in-context with
the reference transcript, x-vector only) and both text layouts, as lockstep batches of two voices
with references of different lengths; the clone prompt (codes, x-vector) from the official
`create_voice_clone_prompt`; the in-context waveform as the official `generate_voice_clone` cuts
it. VoiceDesign with and without a description, in both layouts.
"""

from __future__ import annotations

import pytest
import torch
from clips import reference_audio

from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.voice_encoder import VoiceEncoder

from official import Official
from parity import compare

FRAMES = 16
TEXTS = ["Hello there, how are you today?", "A longer sentence, so that the two rows of the batch differ in length."]
REF_TEXTS = ["The quick brown fox jumps over the lazy dog.", "Short reference."]


@pytest.fixture(scope="module")
def official_base(tiny_base_checkpoint) -> Official:
    return Official(tiny_base_checkpoint)


@pytest.fixture(scope="module")
def base(tiny_base_checkpoint) -> Qwen3TTS:
    # The official processor applies the Mistral regex to local 4.57.3 directories (tests/test_parity.py).
    return Qwen3TTS.from_pretrained(tiny_base_checkpoint, "cpu", "fp32", tokenizer_regex="mistral")


@pytest.fixture(scope="module")
def voice_encoder(tiny_base_checkpoint) -> VoiceEncoder:
    return VoiceEncoder.from_pretrained(tiny_base_checkpoint)


@pytest.fixture(scope="module")
def references():
    return [reference_audio(2.5, seed=0), reference_audio(1.2, seed=1)]


def test_clone_prompt_matches_official(official_base, voice_encoder, references):
    for wav, text in zip(references, REF_TEXTS, strict=True):
        mine = voice_encoder.encode(wav, text)
        theirs = official_base.clone_prompt(wav, 24000, text, x_vector_only=False)
        assert torch.equal(torch.from_numpy(mine.ref_codes), theirs.ref_code)
        err = float((torch.from_numpy(mine.x_vector) - theirs.ref_spk_embedding.float()).abs().max())
        frames = mine.ref_codes.shape[0]
        print(f"\nclone prompt {wav.size / 24000:.1f} s: {frames} frames equal, x-vector err {err:.2e}")
        assert err <= 1e-4
        assert mine.ref_text == theirs.ref_text == text


@pytest.mark.parametrize("x_vector_only", [False, True], ids=["in_context", "x_vector_only"])
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "whole"])
def test_base_codes_and_logits_match_official(official_base, base, voice_encoder, references, x_vector_only, streaming):
    clones = [voice_encoder.encode(wav, text) for wav, text in zip(references, REF_TEXTS, strict=True)]
    items = [official_base.clone_prompt(w, 24000, t, x_vector_only) for w, t in zip(references, REF_TEXTS, strict=True)]
    languages = ["english", "auto"]
    layout = "streaming" if streaming else "whole"
    prompts = [
        base.prompt(text, None, lang, layout=layout, clone=clone, x_vector_only=x_vector_only)
        for text, lang, clone in zip(TEXTS, languages, clones, strict=True)
    ]
    assert all(p.speaker_row is not None for p in prompts)
    assert all((p.ref_row is None) == x_vector_only for p in prompts)
    report = compare(base, official_base, prompts, TEXTS, None, languages, FRAMES, streaming, clones=items)
    mode = "x-vector" if x_vector_only else "in-context"
    print(f"\nparity base {mode} {layout} batch=2: {report.line()}")
    assert report.frames == FRAMES * len(TEXTS)


def test_base_in_context_waveform_matches_official(official_base, base, voice_encoder, references):
    """generate_voice_clone decodes reference + generated codes and cuts the reference's share off."""
    wav, text = references[1], REF_TEXTS[1]
    item = official_base.clone_prompt(wav, 24000, text, x_vector_only=False)
    theirs, sr = official_base.wrapper.generate_voice_clone(
        TEXTS[0], "english", voice_clone_prompt=[item], do_sample=False, subtalker_dosample=False,
        max_new_tokens=FRAMES + 1, repetition_penalty=1.05,
    )  # fmt: skip
    theirs = torch.from_numpy(theirs[0]).float()
    codes = official_base.generate(TEXTS[0:1], None, ["english"], FRAMES, True, clones=[item]).codes[0]
    ref = torch.from_numpy(voice_encoder.encode(wav, text).ref_codes)
    full = base.codec.decode(torch.cat([ref, codes]))
    # The official cut, int(ref / total * samples), can land one sample short of ref * 1920.
    cut = int(ref.shape[0] / (ref.shape[0] + codes.shape[0]) * full.numel())
    assert cut in (ref.shape[0] * 1920, ref.shape[0] * 1920 - 1)
    assert theirs.shape == full[cut:].shape
    err = float((full[cut:] - theirs).abs().max())
    print(f"\nbase in-context waveform: {codes.shape[0]} frames after {ref.shape[0]} of reference, max err {err:.2e}")
    assert err <= 1e-4


@pytest.fixture(scope="module")
def official_design(tiny_voice_design_checkpoint) -> Official:
    return Official(tiny_voice_design_checkpoint)


@pytest.fixture(scope="module")
def design(tiny_voice_design_checkpoint) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(tiny_voice_design_checkpoint, "cpu", "fp32", tokenizer_regex="mistral")


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streaming"])
def test_voice_design_codes_and_logits_match_official(official_design, design, streaming):
    assert isinstance(design.talker.code_predictor.small_to_mtp_projection, torch.nn.Linear)  # 1.7B
    instructs = ["A deep, calm male voice with a slight rasp, speaking slowly.", None]
    languages = ["english", "chinese"]
    layout = "streaming" if streaming else "whole"
    cases = zip(TEXTS, languages, instructs, strict=True)
    prompts = [design.prompt(text, None, lang, instruct, layout) for text, lang, instruct in cases]
    # No speaker row: the codec prefix is think, think_bos, language, think_eos, pad.
    assert prompts[1].codec_track[3:8] == (2154, 2156, 2055, 2157, 2148)
    report = compare(design, official_design, prompts, TEXTS, None, languages, FRAMES, streaming, instructs)
    print(f"\nparity voice_design {layout} batch=2: {report.line()}")
    assert report.frames == FRAMES * len(TEXTS)


def test_voice_design_waveform_matches_official(official_design, design):
    theirs, _ = official_design.wrapper.generate_voice_design(
        TEXTS[0], "A bright young female voice.", "english", do_sample=False, subtalker_dosample=False,
        max_new_tokens=FRAMES + 1, repetition_penalty=1.05,
    )  # fmt: skip
    codes = official_design.generate(TEXTS[0:1], None, ["english"], FRAMES, False, ["A bright young female voice."])
    mine = design.codec.decode(codes.codes[0])
    theirs = torch.from_numpy(theirs[0]).float()
    assert mine.shape == theirs.shape
    err = float((mine - theirs).abs().max())
    print(f"\nvoice_design waveform: {codes.codes[0].shape[0]} frames, max err {err:.2e}")
    assert err <= 1e-4
