"""A loaded Qwen3-TTS 12 Hz checkpoint (CustomVoice, Base or VoiceDesign): config, tokenizer, Talker
and Codec modules, and the prompt embeddings the walks start from. A Base checkpoint's voice
encoders load separately (voice_encoder.VoiceEncoder); what the engine runs is `runtime.Qwen3TTS`,
this model with its partitions."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...checkpoints import resolve_checkpoint
from ...engine.transfer import to_device
from ...weights import load_weights, safetensors_files
from .codec import SpeechTokenizer
from .config import Qwen3TTSConfig
from .frontend import CHECKPOINT_PATTERNS, Qwen3TTSFrontend
from .prompt import Prompt
from .talker import Qwen3TTSTalkerModel, Talker
from .tokenizer import PretokenizerRegex, TextTokenizer

log = logging.getLogger(__name__)


def pick_device(device: str | torch.device | None = "auto") -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """Talker dtype: the checkpoint's bf16 on GPUs; fp32 on CPUs, where bf16 matmuls are slow."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32}
    if dtype not in table:
        raise ValueError(f"unknown dtype '{dtype}'; allowed: auto, {', '.join(table)}")
    return table[dtype]


def prefill_tracks(prompts: list[Prompt], rows: int | None = None) -> np.ndarray:
    """[4, rows] int64 on the host: the prompts' text ids and codec ids (0 where a track is absent),
    then 1 where the text / codec track is absent; rows past the prompts (padding up to `rows`) have
    both tracks absent. Track-major, so each track's ids are contiguous for its lookup."""
    text = [t for p in prompts for t in p.text_track]
    codec = [c for p in prompts for c in p.codec_track]
    n = len(text)
    out = np.zeros((4, rows if rows is not None else n), dtype=np.int64)
    out[0, :n] = [0 if t is None else t for t in text]
    out[1, :n] = [0 if c is None else c for c in codec]
    out[2, :n] = [t is None for t in text]
    out[3, :n] = [c is None for c in codec]
    out[2:, n:] = 1
    return out


@dataclass
class Qwen3TTSModel:
    config: Qwen3TTSConfig
    tokenizer: TextTokenizer
    talker: Talker
    codec: SpeechTokenizer
    device: torch.device
    dtype: torch.dtype
    path: Path

    @classmethod
    def from_pretrained(
        cls,
        model: str | os.PathLike,
        device: str | torch.device | None = "auto",
        dtype: str | torch.dtype | None = "auto",
        tokenizer_regex: PretokenizerRegex = "qwen2",
    ) -> Qwen3TTSModel:
        path = resolve_checkpoint(model, CHECKPOINT_PATTERNS)
        config = Qwen3TTSConfig.from_dir(path)
        dev = pick_device(device)
        dt = pick_dtype(dtype, dev)
        tokenizer = TextTokenizer.from_dir(path, tokenizer_regex)
        with torch.device("meta"):
            root = Qwen3TTSTalkerModel(config)
            codec = SpeechTokenizer(config.speech_tokenizer.decoder)
        # Base files also hold the speaker encoder, which runs where reference audio is analysed
        # (voice_encoder.VoiceEncoder), not in the talker.
        load_weights(root, safetensors_files(path), dev, dt, skip_prefixes=("speaker_encoder.",))
        # The codec always runs in fp32 (the file is fp32; a bf16 SnakeBeta can produce NaN/silence).
        load_weights(
            codec, safetensors_files(path / "speech_tokenizer"), dev, torch.float32, skip_prefixes=("encoder.",)
        )
        log.info("loaded %s (%s, talker %s on %s)", path, config.size_label, dt, dev)
        return cls(config, tokenizer, root.talker, codec, dev, dt, path)

    # -- prompts ---------------------------------------------------------------------------------

    @property
    def frontend(self) -> Qwen3TTSFrontend:
        return Qwen3TTSFrontend(self.config, self.tokenizer)

    def prompt(self, *args, **kwargs) -> Prompt:
        """See Qwen3TTSFrontend.prompt."""
        return self.frontend.prompt(*args, **kwargs)

    def instruct_ignored(self, instruct: str | None) -> bool:
        return self.frontend.instruct_ignored(instruct)

    def end_of_text(self) -> list[int]:
        return self.frontend.end_of_text()

    @torch.no_grad()
    def prefill_embeddings(self, prompt: Prompt) -> torch.Tensor:
        """[len(prompt), hidden]: T(text id) + C(codec id) per row, absent tracks contributing nothing;
        a cloned voice's rows add its x-vector, or a reference frame's summed code embeddings."""
        return self.prefill_embeddings_batch([prompt])

    @torch.no_grad()
    def prefill_embeddings_batch(self, prompts: list[Prompt]) -> torch.Tensor:
        """The prefill embeddings of several prompts, concatenated [sum of lengths, hidden]. Every id
        crosses to the device in one copy and each embedding runs once over all rows: a prefill's
        host cost does not grow with the number of prompts in it. (The fused walk computes the same
        inside its prefill graphs: FastDecoder.prefill.)"""
        tracks = to_device(prefill_tracks(prompts), self.device)
        text, codec = self.embed_tracks(tracks)
        out = text + codec
        for row, value in self.codec_overrides(prompts):
            out[row : row + len(value)] = text[row : row + len(value)] + value
        return out

    def embed_tracks(self, tracks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The text and codec embeddings [T, hidden] of `tracks` (prefill_tracks, on the device). An
        absent track is +0.0: masked_fill is exactly a `where` (`x * has_track` would make -0.0 of
        negative x, NaN of inf)."""
        text = self.talker.embed_text(tracks[0]).masked_fill_(tracks[2, :, None].bool(), 0)
        return text, self.talker.embed_codec(tracks[1]).masked_fill_(tracks[3, :, None].bool(), 0)

    def codec_overrides(self, prompts: list[Prompt]) -> list[tuple[int, torch.Tensor]]:
        """Rows whose codec-track embedding is something else, as (first row in the concatenated
        prompts, [n, hidden] on the device): a cloned voice's x-vector, a reference's frames (their
        16 code embeddings summed). None for the CustomVoice models."""
        dev, out, offset = self.device, [], 0
        for prompt in prompts:
            if prompt.speaker_row is not None:
                x_vector = to_device(prompt.speaker_embedding, dev, torch.float32).to(self.dtype)
                out.append((offset + prompt.speaker_row, x_vector[None]))
            if prompt.ref_row is not None and prompt.ref_codes:
                out.append((offset + prompt.ref_row, self.talker.embed_frame(to_device(prompt.ref_codes, dev))))
            offset += len(prompt)
        return out

    @torch.no_grad()
    def trailing_embeddings(self, prompt: Prompt) -> torch.Tensor:
        """[len(trailing)+... , hidden]: text added to decode steps; row -1 is tts_pad (used after)."""
        ids = [*prompt.trailing_text, self.config.tts_pad_token_id]
        return self.talker.embed_text(to_device(ids, self.device))

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.config.samples_per_frame
