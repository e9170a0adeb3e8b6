"""The contract between the engine and a model package.

A model package provides a ModelRuntime (a loaded model: it builds the partitions and prepares
requests) and declares two partitions, each a set of walks over a batch of requests:

- a Talker partition (`talker_prefill`, `talker_decode`): owns the KV cache and all per-request
  decode state in slot-indexed device tensors; one decode walk turns B requests into B frames;
- a Codec partition (`codec_chunk`): owns per-stream decoder state; one walk turns the next F
  frames of B streams into B chunks of audio.

The engine (scheduler, conductor) only sees these protocols, so another TTS model is added by
writing one model package and registering it (cadence/models/registry.py), without touching the
engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from .kv_cache import PagedKVCache
from .request import EngineRequest

if TYPE_CHECKING:
    from .config import EngineConfig


@dataclass
class Admission:
    """A request entering the Talker: its slot and the KV pages reserved for it."""

    slot: int
    request: EngineRequest
    pages: list[int]


@dataclass
class DecodeOutput:
    """One decode walk's frames. The host copies may still be in flight when decode() returns (the
    walk queues them behind its kernels and does not wait): read them only after wait()."""

    frames: torch.Tensor  # [B, num_code_groups] long, on the host
    eos: torch.Tensor  # [B] bool: the frame's code0 is EOS (the frame itself is not audio)
    # The same frames on the Talker's device (valid until the next walk): the core keeps them in a
    # ring there and hands them to the Codec device to device, before the host copy has landed.
    device_frames: torch.Tensor
    ready: torch.cuda.Event | None = None  # completes when the host copies have landed; None: they have

    def wait(self) -> None:
        if self.ready is not None:
            self.ready.synchronize()


@dataclass
class HostAudio:
    """A codec decode's audio on its way to the host, float32 [B, samples]: on a CUDA device the copy
    is queued behind the decode and `to_host` returns at once; read it only after wait()."""

    audio: torch.Tensor  # on the host (pinned when copied from a GPU)
    ready: torch.cuda.Event | None = None  # completes when the copy has landed; None: it has
    codes: torch.Tensor | None = None  # the decode's input frames, when asked for (same copy rules)

    def wait(self) -> np.ndarray:
        if self.ready is not None:
            self.ready.synchronize()
        return self.audio.numpy()


class TalkerPartition(Protocol):
    max_slots: int
    kv: PagedKVCache
    bytes_per_token: int  # of KV cache (the capacity log)
    # A stream's first frames that can never be EOS (the model bans it there): the core hands them to
    # the codec before their read-back, so the first audio does not wait for it.
    eos_free_frames: int

    def tokens_to_reserve(self, request: EngineRequest, max_frames: int) -> int:
        """KV tokens the request can reach: its prompt plus `max_frames` decode steps."""
        ...

    def fits(self, tokens: int) -> bool:
        """Whether a request of `tokens` KV tokens can ever be admitted."""
        ...

    def prefill(self, admissions: list[Admission]) -> None:
        """talker_prefill: run the prompts of newly admitted requests; they decode from the next walk."""
        ...

    def decode(self, slots: list[int]) -> DecodeOutput:
        """talker_decode: one frame for each slot, without waiting for the device (see DecodeOutput).
        A partition may queue only the part of the walk that makes the frames, keeping the rest
        (what only the next walk needs) for advance()."""
        ...

    def advance(self) -> None:
        """Queue the rest of the last decode walk, if any is kept back. The engine calls it once the
        frames' codec chunks are queued, so first audio does not wait for it; decode() and prefill()
        call it themselves if it was not."""
        ...

    def busy(self) -> bool:
        """Whether walks queued so far still run on the device (a CPU partition, whose walks run
        as they are called, never is): EngineConfig.step_on_idle queues the next step once not."""
        ...

    def append_text(self, slot: int, start: int, ids: list[int]) -> None:
        """More of a running request's trailing text (its text was still arriving): `ids` from
        position `start` on, read by the decode walks queued after this call. ValueError if the
        slot's text would outgrow what the partition holds."""
        ...

    def release(self, slot: int) -> None: ...


class CodecPartition(Protocol):
    samples_per_frame: int
    sample_rate: int
    device: torch.device  # where decode runs (and wants its frames): the Talker's, or one of its own
    bytes_per_stream: int  # of decoder state (the capacity log)

    def reset(self, slots: list[int], requests: list[EngineRequest] | None = None) -> None:
        """Decoder state for streams starting in these slots: cold, or primed with audio the request
        says the stream continues (a voice-cloning reference)."""
        ...

    def decode(self, slots: list[int], frames: torch.Tensor, finishing: bool = False) -> torch.Tensor:
        """codec_chunk: frames [B, F, groups] -> float audio [B, F * samples_per_frame]. `finishing`:
        these streams end with this chunk (their decoder state will not be used again)."""
        ...

    def to_host(self, audio: torch.Tensor, codes: torch.Tensor | None = None) -> HostAudio:
        """Start copying a decode's audio (and, if given, its input codes) to the host, without
        waiting; HostAudio.wait() then waits for that decode only (the codec may run on a CUDA
        stream or device of its own)."""
        ...


class ModelRuntime(Protocol):
    """A loaded model, engine side: what `build_core` and the engine process ask of it. A model
    package implements it (Qwen3-TTS: models/qwen3_tts/runtime.py) and registers a loader for it."""

    device: torch.device  # the Talker's
    dtype: torch.dtype  # the Talker's
    prompt_type: type  # EngineRequest's prompt and params as the model declares them: the engine
    params_type: type  # process decodes requests from the API process into these

    @property
    def sample_rate(self) -> int: ...

    @property
    def kv_bytes_per_token(self) -> int:
        """The Talker's KV cache bytes a token (every layer's keys and values): what sizes
        max_streams when EngineConfig leaves it to the engine."""
        ...

    def describe(self) -> str:
        """The model as people say it ("0.6B"), for logs and /v1/models."""
        ...

    def prepare(self, request: Any, max_input_tokens: int) -> EngineRequest:
        """Validate and tokenise the model's own request type. Raises InvalidRequestError."""
        ...

    def warmup_request(self, frames: int, max_input_tokens: int) -> EngineRequest:
        """A request of exactly `frames` frames through every walk (the engine process's warm-up)."""
        ...

    def move_codec(self, device: torch.device) -> None:
        """Put the codec on a device of its own (disaggregated), before build_codec."""
        ...

    def build_codec(
        self, config: EngineConfig, device: torch.device, use_graphs: bool, own_stream: bool
    ) -> CodecPartition:
        """The Codec partition on `device`, sized by `config` (max_streams, graph buckets, dtype)."""
        ...

    def build_talker(self, config: EngineConfig, kv_bytes: int, backend: str) -> TalkerPartition:
        """The Talker partition with a KV cache of `kv_bytes`; `backend` is config.attention_backend."""
        ...
