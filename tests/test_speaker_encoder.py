"""The Base speaker encoder (mel front end + ECAPA-TDNN -> x-vector) against the official one.

The mel filterbank equals librosa's (which the official front end calls; cadence builds it with
torch); the log-mel equals the official `mel_spectrogram`; the x-vector of a fixed reference is
within 1e-4 of the official one, and the official loader finds every speaker-encoder tensor in the
random checkpoint.
"""

from __future__ import annotations

import pytest
import torch
from clips import reference_audio
from safetensors.torch import load_file

from cadence.models.qwen3_tts.config import Qwen3TTSConfig
from cadence.models.qwen3_tts.speaker_encoder import SpeakerEncoderModel, log_mel, mel_filterbank
from cadence.weights import load_weights, safetensors_files

from official import Official


@pytest.fixture(scope="module")
def official(tiny_base_checkpoint) -> Official:
    return Official(tiny_base_checkpoint)


@pytest.fixture(scope="module")
def speaker(tiny_base_checkpoint) -> SpeakerEncoderModel:
    cfg = Qwen3TTSConfig.from_dir(tiny_base_checkpoint)
    model = SpeakerEncoderModel(cfg.speaker_encoder)
    files = safetensors_files(tiny_base_checkpoint)
    return load_weights(model, files, "cpu", torch.float32, skip_prefixes=("talker.",))


def test_mel_filterbank_equals_librosa():
    librosa = pytest.importorskip("librosa")
    theirs = torch.from_numpy(librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000))
    mine = mel_filterbank(24000, 1024, 128, 0.0, 12000.0)
    assert mine.dtype == theirs.dtype == torch.float32
    assert float((mine - theirs).abs().max()) <= 1e-9


def test_log_mel_equals_official(official):
    from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram

    wav = torch.from_numpy(reference_audio(1.3))[None]
    theirs = mel_spectrogram(wav, n_fft=1024, num_mels=128, sampling_rate=24000, hop_size=256, win_size=1024, fmin=0,
                             fmax=12000).transpose(1, 2)  # fmt: skip
    mine = log_mel(wav, 24000, 128)
    assert mine.shape == theirs.shape
    assert float((mine - theirs).abs().max()) <= 1e-5


def test_random_checkpoint_holds_every_official_speaker_encoder_tensor(official, tiny_base_checkpoint):
    saved = load_file(str(tiny_base_checkpoint / "model.safetensors"))
    theirs = {k: v for k, v in official.model.state_dict().items() if k.startswith("speaker_encoder.")}
    assert set(theirs) == {k for k in saved if k.startswith("speaker_encoder.")}
    for key, value in theirs.items():
        assert torch.equal(value, saved[key].float()), key


@pytest.mark.parametrize("seconds", [2.5, 0.7])
def test_x_vector_matches_official(official, speaker, seconds):
    wav = reference_audio(seconds, seed=1)
    mine = speaker.embed(torch.from_numpy(wav))
    theirs = official.x_vector(wav)
    err = float((mine - theirs).abs().max())
    print(f"\nx-vector parity {seconds} s: max abs err {err:.2e} (norm {float(theirs.norm()):.2f}, dim {mine.numel()})")
    assert mine.shape == theirs.shape == (speaker.cfg.enc_dim,)
    assert err <= 1e-4


def test_too_short_audio_is_refused(speaker):
    with pytest.raises(ValueError, match="too short"):
        speaker.embed(torch.zeros(800))
