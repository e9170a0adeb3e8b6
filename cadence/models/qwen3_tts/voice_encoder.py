"""Voice cloning (Base checkpoints): reference audio -> the VoiceClonePrompt a request speaks with.

`VoiceEncoder` runs the checkpoint's speaker encoder (the x-vector) and speech-tokenizer encoder
(the reference as codec frames). Small next to the talker, it runs where reference audio arrives:
the API process of a Base server, on the CPU by default, so the engine only ever sees prompts.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch

from ...checkpoints import resolve_checkpoint
from ...weights import load_weights, safetensors_files
from .config import Qwen3TTSConfig
from .speaker_encoder import SpeakerEncoderModel
from .speech_encoder import SpeechTokenizerEncoder
from .voice_prompt import VoiceClonePrompt

log = logging.getLogger(__name__)


class VoiceEncoder:
    """Reference audio -> VoiceClonePrompt, with the checkpoint's codec encoder and speaker encoder.

    Small next to the talker, it runs where reference audio arrives (the API process, on the CPU
    by default), so the engine only ever sees prompts.
    """

    def __init__(self, config: Qwen3TTSConfig, codec_encoder: SpeechTokenizerEncoder, speaker: SpeakerEncoderModel):
        self.config = config
        self.codec_encoder = codec_encoder
        self.speaker = speaker

    @property
    def sample_rate(self) -> int:
        return self.config.speech_tokenizer.input_sample_rate

    @property
    def device(self) -> torch.device:
        return next(self.speaker.parameters()).device

    @property
    def width(self) -> int:
        """The x-vectors' size (VoiceClonePrompt.width)."""
        return self.config.talker.hidden_size

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike, device: str | torch.device = "cpu") -> VoiceEncoder:
        path = resolve_checkpoint(model, ("*.json", "*.txt", "*.safetensors", "speech_tokenizer/*"))
        config = Qwen3TTSConfig.from_dir(path)
        _check_can_clone(config)
        with torch.device("meta"):
            codec_encoder = SpeechTokenizerEncoder(config.speech_tokenizer)
            speaker = SpeakerEncoderModel(config.speaker_encoder)
        load_weights(
            codec_encoder, safetensors_files(path / "speech_tokenizer"), device, torch.float32,
            skip_prefixes=("decoder.",),
        )  # fmt: skip
        load_weights(speaker, safetensors_files(path), device, torch.float32, skip_prefixes=("talker.",))
        log.info("loaded the voice encoders of %s on %s", path, device)
        return cls(config, codec_encoder, speaker)

    @classmethod
    def random(cls, config: Qwen3TTSConfig, seed: int = 0, device: str | torch.device = "cpu") -> VoiceEncoder:
        """Random weights (--dummy-weights): prompts of the right shapes, meaning nothing."""
        from .checkpoint import randomize

        _check_can_clone(config)
        gen = torch.Generator().manual_seed(seed)
        codec_encoder = SpeechTokenizerEncoder(config.speech_tokenizer)
        speaker = SpeakerEncoderModel(config.speaker_encoder)
        for m in (codec_encoder, speaker):
            randomize(m, gen)
            m.to(device).eval().requires_grad_(False)
        return cls(config, codec_encoder, speaker)

    @torch.no_grad()
    def encode(self, wav: np.ndarray | torch.Tensor, ref_text: str | None = None) -> VoiceClonePrompt:
        """Mono float samples at `sample_rate` -> the voice's prompt data (what a saved voice stores)."""
        wav = torch.as_tensor(np.asarray(wav, dtype=np.float32))
        codes = self.codec_encoder.encode(wav).cpu().numpy()
        x_vector = self.speaker.embed(wav).float().cpu().numpy()
        return VoiceClonePrompt(x_vector, codes, ref_text.strip() if ref_text and ref_text.strip() else None)

    def load_voice(self, path: str | Path) -> VoiceClonePrompt:
        """A voice VoiceClonePrompt.save wrote (a saved voice)."""
        return VoiceClonePrompt.load(path)


def _check_can_clone(config: Qwen3TTSConfig) -> None:
    if not config.can_clone:
        raise ValueError(
            f"a {config.tts_model_type} checkpoint cannot clone voices: that needs a base checkpoint "
            "(Qwen3-TTS-12Hz-0.6B-Base or -1.7B-Base) with its speaker encoder and codec encoder"
        )
