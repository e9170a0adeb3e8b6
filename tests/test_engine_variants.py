"""The engine serving the rest of the family, against the reference loop (itself checked against the
official implementation in tests/test_parity*.py): 1.7B CustomVoice with instructions, Base in both
clone modes, VoiceDesign; the eager walk and the fused walk (PyTorch ops); streamed audio equal to
the offline decode, for in-context clones the decode of reference + generated frames with the
reference's share cut off, as the official generate_voice_clone returns it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from clips import reference_audio
from engine_cases import codes_of, config, oracle, run

from cadence.audio import to_int16
from cadence.engine.config import ChunkPolicy
from cadence.engine.engine import build_core
from cadence.engine.request import FinishReason
from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.frontend import SynthesisRequest, prepare_request
from cadence.models.qwen3_tts.voice_encoder import VoiceEncoder

TEXTS = ["Hello world, this is a test.", "Short.", "A somewhat longer sentence, with commas, and more words."]
BACKENDS = ["sdpa", "torch"]


def check_against_oracle(model, requests, arrivals, backend):
    """backend "torch-padded": the fused walk with its prefills padded to token buckets, as the
    prefill graphs run them (the embeddings computed from ids inside the padded prefill)."""
    padded = backend == "torch-padded"
    core = build_core(
        model, config(attention_backend="torch" if padded else backend, chunk_policy=ChunkPolicy(2, 2.0, 8))
    )
    if core.talker.fast is not None:
        core.talker.fast.pad_prefill = padded
    out = run(core, arrivals)
    for req in requests:
        chunks = out[req.request_id]
        assert chunks[-1].finish_reason == FinishReason.LENGTH, chunks[-1].error
        assert torch.equal(codes_of(chunks), oracle(model, req).codes), req.request_id
    return out


@pytest.fixture(scope="module")
def model_17b(tiny_17b_checkpoint) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(tiny_17b_checkpoint, "cpu", "fp32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_17b_instructions_through_the_engine(model_17b, backend):
    styles = ["Whisper, slowly and warmly.", None, "Excited, fast, high pitch."]
    voices = ["ryan", "vivian", "eric"]
    reqs = []
    for i, (text, voice, style) in enumerate(zip(TEXTS, voices, styles, strict=True)):
        fields = dict(voice=voice, instruct=style, greedy=True, max_new_tokens=10 + 3 * i, request_id=f"i{i}")
        reqs.append(prepare_request(model_17b, SynthesisRequest(text, **fields), 4096))
    # The instruction is in the prompt (and so changes the codes).
    assert len(reqs[0].prompt) > len(prepare_request(model_17b, SynthesisRequest(TEXTS[0], voice="ryan"), 4096).prompt)
    check_against_oracle(model_17b, reqs, {0: reqs[:2], 3: reqs[2:]}, backend)


@pytest.fixture(scope="module")
def base_model(tiny_base_checkpoint) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(tiny_base_checkpoint, "cpu", "fp32")


@pytest.fixture(scope="module")
def clones(tiny_base_checkpoint):
    encoder = VoiceEncoder.from_pretrained(tiny_base_checkpoint)
    return [encoder.encode(reference_audio(1.6, seed=3), "Reference one."), encoder.encode(reference_audio(0.9))]


@pytest.mark.parametrize("backend", [*BACKENDS, "torch-padded"])
def test_base_clones_through_the_engine(base_model, clones, backend):
    cases = [(clones[0], None), (clones[1], None), (clones[0], True)]  # in-context, x-vector (no text), x-vector
    reqs = [
        prepare_request(
            base_model,
            SynthesisRequest(text, clone=c, x_vector_only=x, greedy=True, max_new_tokens=9 + 2 * i, request_id=f"b{i}"),
            4096,
        )
        for i, (text, (c, x)) in enumerate(zip(TEXTS, cases, strict=True))
    ]
    assert reqs[0].prompt.ref_codes and not reqs[1].prompt.ref_codes and not reqs[2].prompt.ref_codes
    out = check_against_oracle(base_model, reqs, {0: reqs[:1], 2: reqs[1:]}, backend)
    for req in reqs:
        chunks = out[req.request_id]
        pcm = np.concatenate([c.pcm for c in chunks])
        ref = torch.tensor(req.prompt.ref_codes, dtype=torch.long).reshape(-1, 16)
        offline = base_model.codec.decode(torch.cat([ref, codes_of(chunks)]))[ref.shape[0] * 1920 :]
        assert pcm.shape == (1920 * req.params.max_new_tokens,)
        assert np.abs(pcm.astype(np.int32) - to_int16(offline).astype(np.int32)).max() <= 1  # float rounding only


@pytest.fixture(scope="module")
def design_model(tiny_voice_design_checkpoint) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(tiny_voice_design_checkpoint, "cpu", "fp32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_voice_design_through_the_engine(design_model, backend):
    descriptions = ["A deep, calm male voice.", None, "A bright young female voice, cheerful."]
    reqs = [
        prepare_request(
            design_model,
            SynthesisRequest(text, instruct=d, greedy=True, max_new_tokens=8 + 2 * i, request_id=f"d{i}"),
            4096,
        )
        for i, (text, d) in enumerate(zip(TEXTS, descriptions, strict=True))
    ]
    check_against_oracle(design_model, reqs, {0: reqs[:2], 1: reqs[2:]}, backend)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (Triton kernels under CUDA graphs)")
@pytest.mark.parametrize("variant", ["custom_voice_17b", "base", "voice_design"])
def test_variants_on_the_gpu_fast_path(variant, request, tiny_17b_checkpoint):
    """Every variant's prompt through the Triton walk under CUDA graphs, against the eager walk on the
    same GPU (fp32 without TF32; a difference is accepted only at a near-tie of the oracle)."""
    from test_fast_step import near_ties_on_greedy_path

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    checkpoint = {
        "custom_voice_17b": tiny_17b_checkpoint,
        "base": request.getfixturevalue("tiny_base_checkpoint"),
        "voice_design": request.getfixturevalue("tiny_voice_design_checkpoint"),
    }[variant]
    model = Qwen3TTS.from_pretrained(checkpoint, "cuda", "fp32")
    if variant == "base":
        encoder = VoiceEncoder.from_pretrained(checkpoint)
        clone = encoder.encode(reference_audio(1.6, seed=3), "Reference one.")
        fields = [dict(clone=clone), dict(clone=clone, x_vector_only=True), dict(clone=clone)]
    elif variant == "voice_design":
        fields = [dict(instruct="A deep, calm male voice."), dict(), dict(instruct="A bright young voice.")]
    else:
        fields = [dict(voice="ryan", instruct="Whisper, slowly."), dict(voice="vivian"), dict(voice="eric")]
    reqs = [
        prepare_request(model, SynthesisRequest(t, greedy=True, max_new_tokens=24 + i, request_id=f"g{i}", **f), 4096)
        for i, (t, f) in enumerate(zip(TEXTS, fields, strict=True))
    ]
    eager = run(build_core(model, config(attention_backend="sdpa", enforce_eager=True)), {0: reqs[:2], 2: reqs[2:]})
    fused = run(build_core(model, config(attention_backend="triton")), {0: reqs[:2], 2: reqs[2:]})
    for r in reqs:
        mine = codes_of(fused[r.request_id])
        assert mine.shape[0] == r.params.max_new_tokens
        if not torch.equal(mine, codes_of(eager[r.request_id])):
            near_ties_on_greedy_path(model, r, mine)
