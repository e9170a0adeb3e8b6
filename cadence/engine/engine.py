"""The in-process engine: validation and tokenisation in front, the core stepping in a thread behind.

    engine = Engine.from_pretrained("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    async for chunk in engine.synthesize(SynthesisRequest("Hello!", voice="ryan")):
        play(chunk.pcm)                       # int16, 24 kHz mono, as soon as the first frames exist

The core never waits on callers: requests and cancellations go through an inbox that the loop
drains between steps, and chunks leave through per-request sinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..errors import InvalidRequestError
from ..kernels import triton_available
from ..models.qwen3_tts.model import Qwen3TTS, Qwen3TTSFrontend
from ..models.qwen3_tts.partitions import Qwen3TTSCodec, Qwen3TTSTalker
from ..models.qwen3_tts.prompt import TextTokens
from ..models.qwen3_tts.sampling import SamplingParams
from ..models.qwen3_tts.voice_prompt import VoiceClonePrompt
from .config import AUTO_DEADLINE, EngineConfig
from .core import EngineCore
from .request import AudioChunk, EngineRequest, EngineStats, FinishReason, QueueFullError, RunawayCause, Timings

log = logging.getLogger(__name__)

CPU_KV_BUDGET_BYTES = 1 << 30  # what kv_cache_fraction is a fraction of on CPU


@dataclass
class SynthesisRequest:
    """One utterance to synthesise. Sampling fields left None take the checkpoint's defaults
    (generation_config.json); their names are the official package's.

    `temperature` is the first codebook's (the talker's), `subtalker_*` the code predictor's
    (codebooks 1-15). `temperature=0` is greedy decoding for every codebook, as LLM servers take
    it, unless the request sets the code predictor's own sampling (`subtalker_dosample`,
    `subtalker_temperature`); `subtalker_temperature=0` or `subtalker_dosample=False` makes the
    code predictor alone greedy. `greedy=True` is greedy everywhere.
    """

    text: str | TextTokens  # or its tokens, when text arrives in pieces (IncrementalText)
    voice: str | None = None  # a preset (CustomVoice); None: the checkpoint's default preset
    language: str = "auto"
    instruct: str | None = None  # style (1.7B CustomVoice) or the voice's description (VoiceDesign)
    layout: str | None = None  # "whole" or "streaming"; None: the variant's official default
    clone: VoiceClonePrompt | None = None  # a cloned voice (Base)
    x_vector_only: bool | None = None  # Base: the x-vector alone; None: in-context when ref_text is known
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    subtalker_temperature: float | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    subtalker_dosample: bool | None = None
    max_new_tokens: int | None = None  # audio frames (80 ms each)
    seed: int | None = None
    greedy: bool = False
    ignore_eos: bool = False  # generate exactly max_new_tokens frames (benchmarking)
    request_id: str | None = None
    # More text follows (Engine.append_text); the streaming layout: the request starts with what
    # has arrived and waits whenever it has spoken all of it.
    text_open: bool = False


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
    codes: np.ndarray | None = None  # [frames, 16] when EngineConfig.return_codes
    runaway_cause: RunawayCause | None = None  # with finish_reason RUNAWAY: the guard's check that stopped it

    @property
    def seconds(self) -> float:
        return self.pcm.size / self.sample_rate


def prepare_request(model: Qwen3TTS | Qwen3TTSFrontend, req: SynthesisRequest, max_input_tokens: int) -> EngineRequest:
    """Validate and tokenise (before anything reaches the device). Raises InvalidRequestError."""
    prompt = model.prompt(
        req.text, req.voice, req.language, req.instruct, req.layout, req.clone, req.x_vector_only, req.text_open
    )
    too_long = "request_too_large"
    if prompt.num_text_tokens > max_input_tokens:
        raise InvalidRequestError(
            f"input is {prompt.num_text_tokens} tokens; the limit is {max_input_tokens}", "input", code=too_long
        )
    # The text fed while decoding (input, and a clone's transcript in the in-context mode) and the
    # instructions ahead of the prompt are bounded like the input.
    if len(prompt.trailing_text) > max_input_tokens + 1:
        raise InvalidRequestError(
            f"input and ref_text are {len(prompt.trailing_text) - 1} tokens together; the limit is "
            f"{max_input_tokens}: shorten the reference's transcript",
            "ref_text",
            code=too_long,
        )
    if req.instruct and (n := len(model.tokenizer.encode(req.instruct))) > max_input_tokens:
        raise InvalidRequestError(
            f"instructions are {n} tokens; the limit is {max_input_tokens}", "instructions", code=too_long
        )
    params = sampling_params(model.config.generation, req)
    # Unseeded requests still sample through the counter-based RNG, with a fresh random seed.
    seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(7), "little")
    request_id = req.request_id or uuid.uuid4().hex
    return EngineRequest(request_id, prompt, replace(params, seed=seed), req.ignore_eos, req.text_open)


def sampling_params(generation: SamplingParams, req: SynthesisRequest) -> SamplingParams:
    """The request's sampling over the checkpoint's defaults, a temperature of 0 meaning greedy
    (SynthesisRequest). Raises InvalidRequestError naming the field."""
    if req.subtalker_dosample and req.subtalker_temperature == 0:
        raise InvalidRequestError(
            "subtalker_temperature 0 is greedy decoding, which contradicts subtalker_dosample true",
            "subtalker_temperature",
        )
    params = SamplingParams.from_defaults(
        generation,
        temperature=None if req.temperature == 0 else req.temperature,
        top_k=req.top_k,
        top_p=req.top_p,
        repetition_penalty=req.repetition_penalty,
        subtalker_temperature=None if req.subtalker_temperature == 0 else req.subtalker_temperature,
        subtalker_top_k=req.subtalker_top_k,
        subtalker_top_p=req.subtalker_top_p,
        max_new_tokens=req.max_new_tokens,
    )
    if req.greedy:
        return params.greedy()
    if req.subtalker_dosample is not None:
        subtalker = req.subtalker_dosample
    elif req.subtalker_temperature is not None:
        subtalker = req.subtalker_temperature != 0 and params.subtalker_dosample
    else:
        subtalker = params.subtalker_dosample and req.temperature != 0
    return replace(params, do_sample=params.do_sample and req.temperature != 0, subtalker_dosample=subtalker)


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


def build_core(model: Qwen3TTS, config: EngineConfig, codec_device: str | torch.device | None = None) -> EngineCore:
    """The model's partitions, sized by `config`, under one engine core. `codec_device`: the Codec
    partition on a device of its own (disaggregated; frames cross device to device each step);
    None: with the Talker."""
    codec_on = torch.device(codec_device) if codec_device is not None else model.device
    if codec_on != model.device:
        model.codec.decoder.to(codec_on)  # the weights move once
    # auto: pipelined when the codec has a device of its own. On one H200 overlapping the two on
    # separate CUDA streams gained nothing (docs/perf-notes.md #6), so colocated engines keep the
    # simpler order unless asked.
    if config.pipeline_codec is None:
        config = replace(config, pipeline_codec=codec_on != model.device)
    if config.chunk_policy.deadline is None:  # auto (ChunkPolicy): on where codec calls are cheap graphs
        deadline = AUTO_DEADLINE if codec_on.type == "cuda" else 0.0
        config = replace(config, chunk_policy=replace(config.chunk_policy, deadline=deadline))
    # The codec first (its per-stream state and its graphs), then the KV cache: kv_cache_fraction is a
    # share of what the codec left, so the default never sizes the cache into memory its graphs need.
    use_graphs = codec_on.type == "cuda" and not config.enforce_eager
    own_stream = bool(config.pipeline_codec) and codec_on == model.device  # overlap on one GPU
    with _out_of_memory_explained(
        f"the codec (its state for max_streams={config.max_streams} and its CUDA graphs)",
        "lower max_streams (--max-streams), fewer graph_buckets (--graph-buckets), or enforce_eager (--enforce-eager)",
    ):
        codec = Qwen3TTSCodec(
            model, config.max_streams, use_graphs, graph_buckets=config.graph_buckets, own_stream=own_stream,
            dtype=getattr(torch, config.codec_dtype),  # a low-precision copy; model.codec stays the fp32 decode
            tf32=config.codec_tf32, windowed=config.codec_decode == "chunked",
        )  # fmt: skip
    kv_bytes = kv_cache_bytes(config, model.device)
    backend = config.attention_backend
    if backend == "auto":
        backend = "triton" if model.device.type == "cuda" and triton_available() else "sdpa"
    with _out_of_memory_explained(
        f"the talker (a {kv_bytes / 2**30:.1f} GB KV cache and its CUDA graphs)",
        "a smaller kv_cache_memory / kv_cache_fraction (--kv-cache-memory, --kv-cache-fraction), lower max_streams "
        "(--max-streams), or enforce_eager (--enforce-eager)",
    ):
        talker = Qwen3TTSTalker(
            model, config.max_streams, kv_bytes, config.page_size, config.max_input_tokens, config.max_seq_tokens,
            backend, config.enforce_eager, config.graph_buckets, config.prefill_token_budget, config.pdl_max_rows,
            config.slab_max_rows,
        )  # fmt: skip
    return EngineCore(talker, codec, config)


class Engine:
    def __init__(self, model: Qwen3TTS, config: EngineConfig | None = None):
        self.model = model
        self.config = config or EngineConfig()
        self.core = build_core(model, self.config)
        self._log_capacity(self.core.talker, self.core.codec)
        self._inbox: list[EngineRequest | str | TextAppend] = []  # requests to add, ids to cancel, text
        self._inbox_lock = threading.Lock()
        self._wake = threading.Event()
        self._sinks: dict[str, Callable[[AudioChunk], None]] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="cadence-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_pretrained(
        cls,
        model: str | os.PathLike,
        device: str | None = "auto",
        dtype: str | None = "auto",
        tokenizer_regex: str = "qwen2",
        config: EngineConfig | None = None,
    ) -> Engine:
        return cls(Qwen3TTS.from_pretrained(model, device, dtype, tokenizer_regex), config)

    def _log_capacity(self, talker: Qwen3TTSTalker, codec: Qwen3TTSCodec) -> None:
        kv = talker.kv
        tokens = kv.num_pages * kv.page_size
        # A request holds at most max_seq_tokens (prompt tokens + 80 ms frames), whatever the cache holds.
        longest = min(tokens, self.config.max_seq_tokens) * 0.08
        streams = self.config.max_streams
        each = min(tokens / streams, self.config.max_seq_tokens) * 0.08
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

    def submit(self, request: SynthesisRequest | EngineRequest, sink: Callable[[AudioChunk], None]) -> str:
        """Queue a request; `sink` receives its chunks on the engine thread. Raises
        InvalidRequestError (bad input) or QueueFullError (the server's 429) synchronously."""
        if isinstance(request, SynthesisRequest):
            request = prepare_request(self.model, request, self.config.max_input_tokens)
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

    async def synthesize(self, request: SynthesisRequest | EngineRequest) -> AsyncIterator[AudioChunk]:
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

    async def synthesize_all(self, request: SynthesisRequest | EngineRequest) -> Utterance:
        return _collect([c async for c in self.synthesize(request)], self.model.sample_rate)

    def synthesize_blocking(self, request: SynthesisRequest | EngineRequest, timeout: float | None = None) -> Utterance:
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
