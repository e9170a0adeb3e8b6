"""A cloned voice as a prompt takes it (Base checkpoints): plain arrays, no torch.

A cloned voice is two things computed once from the reference audio (voice_encoder.py):
- the x-vector (speaker encoder): the row of the prompt a preset speaker's id would take;
- the reference as codec frames (speech-tokenizer encoder): with its transcript, the in-context
  mode puts transcript and frames in the prompt and the model continues the reference.

The official wrapper calls these modes x-vector only (`x_vector_only_mode=True`) and ICL. A saved
voice is one safetensors file (`save`/`load`), read and written without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from .config import Qwen3TTSConfig

FILE_FORMAT = "cadence-voice-clone-prompt"  # the file's metadata "format"


@dataclass(frozen=True)
class VoiceClonePrompt:
    """A cloned voice: its x-vector, its reference audio as codes, and the reference's transcript.
    Arrays (or anything np.asarray takes, such as CPU tensors) are stored as float32 / int64 arrays."""

    x_vector: np.ndarray  # [talker hidden] float32
    ref_codes: np.ndarray  # [frames, 16] int64
    ref_text: str | None = None  # None: only the x-vector mode is possible

    def __post_init__(self):
        object.__setattr__(self, "x_vector", np.asarray(self.x_vector, dtype=np.float32))
        object.__setattr__(self, "ref_codes", np.asarray(self.ref_codes, dtype=np.int64))

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
        return cls(np.zeros(config.talker.hidden_size, np.float32), np.zeros((0, groups), np.int64))

    @property
    def seconds(self) -> float:
        return self.ref_codes.shape[0] * 0.08

    @property
    def width(self) -> int:
        """The x-vector's size: the talker's hidden size of the model it was made for."""
        return self.x_vector.size

    def save(self, path: str | Path) -> None:
        """One safetensors file; the transcript travels in its metadata."""
        meta = {"format": FILE_FORMAT}
        if self.ref_text is not None:
            meta["ref_text"] = self.ref_text
        arrays = {"x_vector": np.ascontiguousarray(self.x_vector), "ref_codes": np.ascontiguousarray(self.ref_codes)}
        save_file(arrays, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path) -> VoiceClonePrompt:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
        arrays = load_file(str(path))
        return cls(arrays["x_vector"], arrays["ref_codes"], meta.get("ref_text"))
