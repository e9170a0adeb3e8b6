"""The 12 Hz speech-tokenizer encoder (reference audio -> codes) against the official one.

On a random Base checkpoint: the codes of a fixed 24 kHz reference are identical (all 16 codebooks,
every frame), at lengths that are and are not whole frames; the official loader finds every encoder
tensor in the random checkpoint (it initialises nothing itself); and the encoder's transformer is
full-causal, as the official encode runs it, although the config lists a sliding window.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from clips import reference_audio
from safetensors.torch import load_file

from cadence.models.qwen3_tts import speech_encoder
from cadence.models.qwen3_tts.config import Qwen3TTSConfig
from cadence.models.qwen3_tts.speech_encoder import SpeechTokenizerEncoder
from cadence.weights import load_weights, safetensors_files

from official import Official


@pytest.fixture(scope="module")
def official(tiny_base_checkpoint) -> Official:
    return Official(tiny_base_checkpoint)


@pytest.fixture(scope="module")
def encoder(tiny_base_checkpoint) -> SpeechTokenizerEncoder:
    cfg = Qwen3TTSConfig.from_dir(tiny_base_checkpoint)
    enc = SpeechTokenizerEncoder(cfg.speech_tokenizer)
    files = safetensors_files(tiny_base_checkpoint / "speech_tokenizer")
    return load_weights(enc, files, "cpu", torch.float32, skip_prefixes=("decoder.",))


def test_random_checkpoint_holds_every_official_encoder_tensor(official, tiny_base_checkpoint):
    saved = load_file(str(tiny_base_checkpoint / "speech_tokenizer" / "model.safetensors"))
    theirs = {k: v for k, v in official.model.speech_tokenizer.model.state_dict().items() if k.startswith("encoder.")}
    assert set(theirs) == {k for k in saved if k.startswith("encoder.")}
    for key, value in theirs.items():
        assert torch.equal(value, saved[key]), key


@pytest.mark.parametrize("seconds", [2.5, 1.0 + 0.5 / 1920, 0.05])  # whole frames, a partial last frame, < 1 frame
def test_codes_equal_official(official, encoder, seconds):
    wav = reference_audio(seconds)
    mine = encoder.encode(torch.from_numpy(wav))
    theirs = official.encode(wav, 24000)
    frames = -(-wav.size // 1920)
    assert mine.shape == theirs.shape == (frames, 16)
    assert torch.equal(mine, theirs)
    distinct = [len(set(mine[:, q].tolist())) for q in range(16)]
    print(f"\nencoder parity {seconds:.3f} s: {frames} frames x 16 codebooks identical; distinct codes {distinct}")
    if frames > 8:
        assert min(distinct) > 1  # the random codebooks are exercised, not one code everywhere


def test_transformer_is_full_causal_not_windowed(encoder, monkeypatch):
    """The tiny config's window (8 steps at 25 Hz) is shorter than the audio: a windowed mask would
    change the codes, so equality with the official codes above shows the official ignores it."""
    wav = torch.from_numpy(reference_audio(2.5))
    full = encoder.encode(wav)
    sdpa = F.scaled_dot_product_attention

    def windowed(q, k, v, is_causal=False, **kw):
        d = torch.arange(q.shape[2])[:, None] - torch.arange(k.shape[2])[None, :]
        return sdpa(q, k, v, attn_mask=(d >= 0) & (d < 8))

    monkeypatch.setattr(speech_encoder.F, "scaled_dot_product_attention", windowed)
    assert not torch.equal(encoder.encode(wav), full)


def test_bad_input_is_refused(encoder):
    with pytest.raises(ValueError, match="non-empty 1-D"):
        encoder.encode(torch.zeros(0))
    with pytest.raises(ValueError, match="non-empty 1-D"):
        encoder.encode(torch.zeros(2, 100))
