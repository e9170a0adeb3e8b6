"""The in-process engine: the model's validation and tokenisation in front, the core stepping in a
thread behind.

    engine = Engine(model)                    # a ModelRuntime (cadence.Engine.from_pretrained loads one)
    async for chunk in engine.synthesize(SynthesisRequest("Hello!", voice="ryan")):
        play(chunk.pcm)                       # int16 mono, as soon as the first frames exist

The core never waits on callers: requests and cancellations go through an inbox that the loop
drains between steps, and chunks leave through per-request sinks. It knows models only through
the partition contract (partition.py): a request that is not an EngineRequest yet is the model's
to prepare.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from ..kernels.config import KernelConfig
from ..kernels.tile_table import install_table
from .config import AUTO_DEADLINE, AUTO_MAX_STREAMS, AUTO_TOKENS_PER_STREAM, EngineConfig
from .core import EngineCore
from .partition import CodecPartition, ModelRuntime, TalkerPartition
from .request import AudioChunk, EngineRequest, EngineStats, FinishReason, QueueFullError, RunawayCause, Timings

log = logging.getLogger(__name__)

CPU_KV_BUDGET_BYTES = 1 << 30  # what kv_cache_fraction is a fraction of on CPU


@dataclass(frozen=True)
class TextAppend:
    """More text for a running request (Engine.append_text), through the engine's inbox."""

    request_id: str
    ids: list[int]
    done: bool
    text_tokens: int


@dataclass
class Utterance:
    """A whole synthesised utterance."""

    request_id: str
    pcm: np.ndarray  # int16
    sample_rate: int
    frames: int
    finish_reason: FinishReason
    error: str | None
    timings: Timings | None
    codes: np.ndarray | None = None  # [frames, codes a frame] when EngineConfig.return_codes
    runaway_cause: RunawayCause | None = None  # with finish_reason RUNAWAY: the guard's check that stopped it

    @property
    def seconds(self) -> float:
        return self.pcm.size / self.sample_rate


def auto_max_streams(kv_bytes: int, bytes_per_token: int) -> int:
    """The streams a KV cache of `kv_bytes` holds at AUTO_TOKENS_PER_STREAM tokens each (1 to
    AUTO_MAX_STREAMS)."""
    return max(1, min(AUTO_MAX_STREAMS, kv_bytes // (bytes_per_token * AUTO_TOKENS_PER_STREAM)))


def kv_cache_bytes(config: EngineConfig, device: torch.device) -> int:
    if config.kv_cache_memory is not None:
        return int(config.kv_cache_memory * (1 << 30))
    if device.type == "cuda":
        torch.cuda.empty_cache()  # blocks the allocator holds cached but no tensor uses count as free too
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * config.kv_cache_fraction)
    return int(CPU_KV_BUDGET_BYTES * config.kv_cache_fraction)


@contextlib.contextmanager
def _out_of_memory_explained(what: str, remedies: str) -> Iterator[None]:
    """An out-of-memory error while building says what was being built and which settings shrink
    it (still an OutOfMemoryError, for whoever catches that)."""
    try:
        yield
    except torch.OutOfMemoryError as e:
        raise torch.OutOfMemoryError(f"out of device memory building {what}; {remedies}. ({e})") from e


def install_kernel_table(kernels: KernelConfig, device: torch.device) -> None:
    """The tile table `kernels` names for `device`'s GPU, installed for the process's kernels, with
    one log line that says which and why (a GPU without a table of its own gets the fallback's)."""
    table, choice = kernels.table_for(torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    install_table(table)
    log.log(logging.WARNING if choice.unmeasured else logging.INFO, "kernels: %s", choice.why)


def build_core(model: ModelRuntime, config: EngineConfig, codec_device: str | torch.device | None = None) -> EngineCore:
    """The model's partitions, sized by `config`, under one engine core. `codec_device`: the Codec
    partition on a device of its own (disaggregated; frames cross device to device each step);
    None: with the Talker."""
    install_kernel_table(config.kernels, model.device)  # before any kernel is launched or captured
    codec_on = torch.device(codec_device) if codec_device is not None else model.device
    if codec_on != model.device:
        model.move_codec(codec_on)  # the weights move once
    # auto: pipelined when the codec has a device of its own. On one GPU overlapping the two on
    # separate CUDA streams gains nothing measurable, so colocated engines keep the simpler order
    # unless asked.
    if config.pipeline_codec is None:
        config = replace(config, pipeline_codec=codec_on != model.device)
    if config.chunk_policy.deadline is None:  # auto (ChunkPolicy): on where codec calls are cheap graphs
        deadline = AUTO_DEADLINE if codec_on.type == "cuda" else 0.0
        config = replace(config, chunk_policy=replace(config.chunk_policy, deadline=deadline))
    if config.max_streams is None:  # sized by the KV cache the memory free now would give
        streams = auto_max_streams(kv_cache_bytes(config, model.device), model.kv_bytes_per_token)
        log.info("max_streams %d: what the KV cache holds at %d tokens a stream", streams, AUTO_TOKENS_PER_STREAM)
        config = replace(config, max_streams=streams)
    # The codec first (its per-stream state and its graphs), then the KV cache: kv_cache_fraction is a
    # share of what the codec left, so the default never sizes the cache into memory its graphs need.
    use_graphs = codec_on.type == "cuda" and not config.enforce_eager
    own_stream = bool(config.pipeline_codec) and codec_on == model.device  # overlap on one GPU
    with _out_of_memory_explained(
        f"the codec (its state for max_streams={config.max_streams} and its CUDA graphs)",
        "lower max_streams (--max-streams), fewer graph_buckets (--graph-buckets), or enforce_eager (--enforce-eager)",
    ):
        codec = model.build_codec(config, codec_on, use_graphs, own_stream)
    kv_bytes = kv_cache_bytes(config, model.device)
    with _out_of_memory_explained(
        f"the talker (a {kv_bytes / 2**30:.1f} GB KV cache and its CUDA graphs)",
        "a smaller kv_cache_memory / kv_cache_fraction (--kv-cache-memory, --kv-cache-fraction), lower max_streams "
        "(--max-streams), or enforce_eager (--enforce-eager)",
    ):
        talker = model.build_talker(config, kv_bytes, config.attention_backend)
    return EngineCore(talker, codec, config)


class Engine:
    """Synthesis in this process: `model` a ModelRuntime (cadence.Engine.from_pretrained loads one by
    name), the core stepping in a thread of its own."""

    def __init__(self, model: ModelRuntime, config: EngineConfig | None = None):
        self.model = model
        self.core = build_core(model, config or EngineConfig())
        self.config = self.core.config  # max_streams and the other automatic settings resolved
        self._log_capacity(self.core.talker, self.core.codec)
        self._inbox: list[EngineRequest | str | TextAppend] = []  # requests to add, ids to cancel, text
        self._inbox_lock = threading.Lock()
        self._wake = threading.Event()
        self._sinks: dict[str, Callable[[AudioChunk], None]] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="cadence-engine", daemon=True)
        self._thread.start()

    def _log_capacity(self, talker: TalkerPartition, codec: CodecPartition) -> None:
        kv = talker.kv
        tokens = kv.num_pages * kv.page_size
        # A request holds at most max_seq_tokens (prompt tokens + frames), whatever the cache holds.
        frame_seconds = codec.samples_per_frame / codec.sample_rate
        longest = min(tokens, self.config.max_seq_tokens) * frame_seconds
        streams = self.config.max_streams
        each = min(tokens / streams, self.config.max_seq_tokens) * frame_seconds
        capacity = f"1 stream of up to {longest:.0f} s of audio" if streams == 1 else (
            f"{streams} streams of up to {each:.0f} s of audio each at once, one of up to {longest:.0f} s alone"
        )  # fmt: skip
        log.info(
            "KV cache %.2f GB: %d pages x %d tokens = %d tokens (%d bytes/token); capacity %s; codec state %.1f "
            "MB/stream",
            kv.nbytes / 2**30, kv.num_pages, kv.page_size, tokens, talker.bytes_per_token, capacity,
            codec.bytes_per_stream / 2**20,
        )  # fmt: skip

    # -- requests ---------------------------------------------------------------------------------

    def submit(self, request: Any, sink: Callable[[AudioChunk], None]) -> str:
        """Queue a request (an EngineRequest, or the model's own request type, which the model
        prepares); `sink` receives its chunks on the engine thread. Raises InvalidRequestError (bad
        input) or QueueFullError (the server's 429) synchronously."""
        if not isinstance(request, EngineRequest):
            request = self.model.prepare(request, self.config.max_input_tokens)
        with self._inbox_lock:
            queued = len(self.core.waiting) + sum(isinstance(i, EngineRequest) for i in self._inbox)
            if queued >= self.config.max_queue + len(self.core.free_slots):  # a free slot admits it
                raise QueueFullError(f"queue full ({queued} waiting)", retry_after=self.core._retry_after())
            self._sinks[request.request_id] = sink
            self._inbox.append(request)
        self._wake.set()
        return request.request_id

    def cancel(self, request_id: str) -> None:
        """Stop a request; its KV pages and codec state are freed within one step."""
        with self._inbox_lock:
            self._inbox.append(request_id)
        self._wake.set()

    def append_text(self, request_id: str, ids: list[int], done: bool, text_tokens: int) -> None:
        """More text of a request submitted with its text still arriving (EngineCore.append_text)."""
        with self._inbox_lock:
            self._inbox.append(TextAppend(request_id, ids, done, text_tokens))
        self._wake.set()

    async def synthesize(self, request: Any) -> AsyncIterator[AudioChunk]:
        """Stream a request's audio. Closing the iterator early cancels the request."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[AudioChunk] = asyncio.Queue()
        rid = self.submit(request, lambda c: loop.call_soon_threadsafe(chunks.put_nowait, c))
        finished = False
        try:
            while not finished:
                chunk = await chunks.get()
                finished = chunk.is_final
                yield chunk
        finally:
            if not finished:
                self.cancel(rid)

    async def synthesize_all(self, request: Any) -> Utterance:
        return _collect([c async for c in self.synthesize(request)], self.model.sample_rate)

    def synthesize_blocking(self, request: Any, timeout: float | None = None) -> Utterance:
        """The whole utterance, for synchronous callers (CLI, tests)."""
        chunks: queue.Queue[AudioChunk] = queue.Queue()
        self.submit(request, chunks.put)
        got = [chunks.get(timeout=timeout)]
        while not got[-1].is_final:
            got.append(chunks.get(timeout=timeout))
        return _collect(got, self.model.sample_rate)

    def stats(self) -> EngineStats:
        return self.core.stats

    def close(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=10)

    # -- the loop ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping:
            with self._inbox_lock:
                work, self._inbox = self._inbox, []
            for item in work:
                if isinstance(item, str):
                    self.core.cancel(item)
                    continue
                if isinstance(item, TextAppend):
                    try:
                        self.core.append_text(item.request_id, item.ids, item.done, item.text_tokens)
                    except ValueError as e:  # text for a request whose text had ended: a caller's bug
                        log.warning("text for request %s refused: %s", item.request_id, e)
                    continue
                try:
                    self.core.add_request(item)
                except (QueueFullError, ValueError) as e:  # e.g. larger than the whole KV cache
                    log.warning("request %s refused: %s", item.request_id, e)
                    self._deliver(
                        AudioChunk(item.request_id, np.zeros(0, np.int16), 0, 0, True, FinishReason.ERROR, str(e))
                    )
            if not self.core.has_work():
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            if not self.core.ready():
                time.sleep(0)  # the device still runs the last step; let the callers' threads run meanwhile
                continue
            try:
                chunks = self.core.step()
            except Exception:
                log.exception("engine step failed")
                continue
            for chunk in chunks:
                self._deliver(chunk)

    def _deliver(self, chunk: AudioChunk) -> None:
        sink = self._sinks.pop(chunk.request_id, None) if chunk.is_final else self._sinks.get(chunk.request_id)
        if sink is None:
            return
        try:
            sink(chunk)
        except Exception:
            log.exception("delivering a chunk of %s failed; cancelling it", chunk.request_id)
            self.core.cancel(chunk.request_id)


def _collect(chunks: list[AudioChunk], sample_rate: int) -> Utterance:
    last = chunks[-1]
    pcm = np.concatenate([c.pcm for c in chunks])
    codes = [c.codes for c in chunks if c.codes is not None]
    return Utterance(
        last.request_id, pcm, sample_rate, last.frame_end, last.finish_reason, last.error, last.timings,
        np.concatenate(codes) if codes else None, last.runaway_cause,
    )  # fmt: skip
