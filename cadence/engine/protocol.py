"""Messages between the API process and the engine-core process (msgpack over ZMQ, via msgspec).

API -> engine (PUSH/PULL): Submit, Cancel, AppendText, Shutdown.
Engine -> API (PUSH/PULL): Ready once after loading and warm-up (or Failed), then a StepOutput after
every engine step (its chunks and the core's stats; also a heartbeat while idle), and Rejected for a
request the core refused.

Requests travel as the engine's own EngineRequest dataclass (validated and tokenised in the API
process), its prompt and params the model's types: the engine process decodes them with
`input_decoder(runtime.prompt_type, runtime.params_type)`. Audio travels as raw int16 bytes. No
torch: the API process speaks it too.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec
import numpy as np

from .request import AudioChunk, EngineRequest, EngineStats, FinishReason, RunawayCause, Timings

R = TypeVar("R")

# -- API -> engine ---------------------------------------------------------------------------------


class Submit(msgspec.Struct, Generic[R], tag="submit"):
    request: R  # an EngineRequest


class Cancel(msgspec.Struct, tag="cancel"):
    request_id: str


class AppendText(msgspec.Struct, tag="append"):
    """More trailing text of a request submitted with its text still arriving (EngineCore.append_text)."""

    request_id: str
    ids: list[int]
    done: bool
    text_tokens: int


class Shutdown(msgspec.Struct, tag="shutdown"):
    """Cancel whatever is left and exit (the API has already drained what it wanted to)."""


EngineInput = Submit | Cancel | AppendText | Shutdown


# -- engine -> API ---------------------------------------------------------------------------------


class EngineInfo(msgspec.Struct):
    """What the engine process loaded and how much it can hold: for /v1/models, /metrics and logs."""

    model: str
    model_size: str  # as people say it: "0.6B", "tiny preset of the 0.6B architecture"
    device: str
    codec_device: str | None  # the Codec partition's own device (disaggregated), or None: `device`
    dtype: str
    random_weights: bool
    max_streams: int
    max_queue: int
    kv_pages_total: int
    page_size: int
    kv_bytes: int
    sample_rate: int
    warmup_seconds: float

    @property
    def kv_tokens(self) -> int:
        return self.kv_pages_total * self.page_size


class Ready(msgspec.Struct, tag="ready"):
    info: EngineInfo


class Failed(msgspec.Struct, tag="failed"):
    """The engine could not start (bad weights, out of memory): the API exits non-zero."""

    message: str


class Chunk(msgspec.Struct, array_like=True):
    """AudioChunk on the wire: pcm as int16 little-endian bytes."""

    request_id: str
    pcm: bytes
    frame_start: int
    frame_end: int
    is_final: bool
    finish_reason: FinishReason | None
    error: str | None
    timings: Timings | None
    prompt_tokens: int
    runaway_cause: RunawayCause | None = None

    @classmethod
    def from_audio(cls, c: AudioChunk) -> Chunk:
        pcm = np.ascontiguousarray(c.pcm, dtype="<i2").tobytes()
        return cls(
            c.request_id, pcm, c.frame_start, c.frame_end, c.is_final, c.finish_reason, c.error, c.timings,
            c.prompt_tokens, c.runaway_cause,
        )  # fmt: skip

    def to_audio(self) -> AudioChunk:
        pcm = np.frombuffer(self.pcm, dtype="<i2").astype(np.int16)
        return AudioChunk(
            self.request_id, pcm, self.frame_start, self.frame_end, self.is_final, self.finish_reason, self.error,
            self.timings, self.prompt_tokens, runaway_cause=self.runaway_cause,
        )  # fmt: skip


class StepOutput(msgspec.Struct, tag="step"):
    chunks: list[Chunk]
    stats: EngineStats
    stepped: bool  # False for an idle heartbeat (no step ran): keeps step-time metrics honest


class Rejected(msgspec.Struct, tag="rejected"):
    """The core refused a request: its queue is full (retry_after > 0), or the request can never fit
    the KV cache (retry_after == 0; `prompt_too_long`: not even its prompt)."""

    request_id: str
    message: str
    retry_after: float
    prompt_too_long: bool = False


EngineOutput = Ready | Failed | StepOutput | Rejected

encode = msgspec.msgpack.Encoder().encode
output_decoder = msgspec.msgpack.Decoder(EngineOutput)


def input_decoder(prompt_type: Any, params_type: Any) -> msgspec.msgpack.Decoder:
    """The engine process's decoder of EngineInput, requests typed with the model's prompt and
    sampling-parameter types (msgspec checks every field while decoding)."""
    request = EngineRequest[prompt_type, params_type]  # type: ignore[valid-type]
    return msgspec.msgpack.Decoder(Submit[request] | Cancel | AppendText | Shutdown)  # type: ignore[valid-type]
