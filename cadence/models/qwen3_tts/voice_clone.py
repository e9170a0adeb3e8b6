"""Voice cloning (Base checkpoints): reference audio -> the data a prompt needs to speak in that voice.

A cloned voice is two things computed once from the reference audio (24 kHz):
- the x-vector (speaker encoder): the row of the prompt a preset speaker's id would take;
- the reference as codec frames (speech-tokenizer encoder): with its transcript, the in-context
  mode puts transcript and frames in the prompt and the model continues the reference.

`VoiceClonePrompt` holds them (and the transcript); `VoiceEncoder` computes it. The official
wrapper calls these modes x-vector only (`x_vector_only_mode=True`) and ICL.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ...checkpoints import resolve_checkpoint
from ...weights import load_weights, safetensors_files
from .config import Qwen3TTSConfig
from .speaker_encoder import SpeakerEncoderModel
from .speech_encoder import SpeechTokenizerEncoder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VoiceClonePrompt:
    """A cloned voice: its x-vector, its reference audio as codes, and the reference's transcript."""

    x_vector: torch.Tensor  # [talker hidden] float32
    ref_codes: torch.Tensor  # [frames, 16] long
    ref_text: str | None = None  # None: only the x-vector mode is possible

    def in_context(self, x_vector_only: bool | None) -> bool:
        """Whether a request uses the in-context mode. None picks it when the transcript is known;
        asking for it without one is an error (the model would continue audio it cannot align)."""
        if x_vector_only is None:
            return bool(self.ref_text)
        if not x_vector_only and not self.ref_text:
            raise ValueError("the in-context clone mode needs the reference audio's transcript (ref_text)")
        return not x_vector_only

    @classmethod
    def stand_in(cls, config: Qwen3TTSConfig) -> VoiceClonePrompt:
        """A zero x-vector and no reference: a voice for warm-ups, not for listening."""
        groups = config.talker.num_code_groups
        return cls(torch.zeros(config.talker.hidden_size), torch.zeros(0, groups, dtype=torch.long))

    @property
    def seconds(self) -> float:
        return self.ref_codes.shape[0] * 0.08

    def save(self, path: str | Path) -> None:
        """One safetensors file; the transcript travels in its metadata."""
        meta = {"format": "cadence-voice-clone-prompt"}
        if self.ref_text is not None:
            meta["ref_text"] = self.ref_text
        tensors = {"x_vector": self.x_vector.float().contiguous(), "ref_codes": self.ref_codes.long().contiguous()}
        save_file(tensors, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path) -> VoiceClonePrompt:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(str(path))
        return cls(tensors["x_vector"], tensors["ref_codes"], meta.get("ref_text"))


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
        codes = self.codec_encoder.encode(wav)
        x_vector = self.speaker.embed(wav)
        return VoiceClonePrompt(x_vector, codes, ref_text.strip() if ref_text and ref_text.strip() else None)


def _check_can_clone(config: Qwen3TTSConfig) -> None:
    if not config.can_clone:
        raise ValueError(
            f"a {config.tts_model_type} checkpoint cannot clone voices: that needs a base checkpoint "
            "(Qwen3-TTS-12Hz-0.6B-Base or -1.7B-Base) with its speaker encoder and codec encoder"
        )
