"""Engine configuration: capacity, scheduling, chunking, safety limits and the kernels' settings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..kernels.config import KernelConfig

AUTO_DEADLINE = 0.2  # seconds: ChunkPolicy.deadline on a GPU unless set
# max_streams left to the engine (EngineConfig.max_streams None): as many streams as the KV cache
# holds at AUTO_TOKENS_PER_STREAM tokens each (a prompt and ~40 s of audio; pages are taken as a
# stream grows, so longer streams still fit beside shorter ones), at most AUTO_MAX_STREAMS.
AUTO_TOKENS_PER_STREAM = 600
AUTO_MAX_STREAMS = 256


@dataclass(frozen=True)
class ChunkPolicy:
    """When a stream's frames go through the codec.

    The first chunk is decoded as soon as `first_chunk_frames` frames exist (time to first audio);
    each later chunk is `growth` times the previous one, up to `max_chunk_frames` (fewer, larger
    codec calls once the listener has audio buffered). A stream's final frames are flushed at once.

    `deadline` (seconds, 0: off) makes the growth wait only while it is safe: a stream whose audio
    ahead of real-time playback would fall below `deadline` before its next chunk is complete gets
    the frames it has now (snapped down to a frame count the codec runs as a graph). Under load,
    when a step takes about as long as a frame plays, this spends codec work on the streams about
    to run dry instead of letting them stall while their chunk fills: on an H200 at 128 streams,
    about 1 % of requests see a playback underrun against most of them without it, at equal
    throughput. None: `AUTO_DEADLINE` on a GPU, off on a CPU (build_core), where a 1-frame codec
    call costs nearly what an 8-frame one does and early chunks slow every step, and where a fixed
    chunk schedule keeps a seeded request's audio identical from run to run.
    """

    first_chunk_frames: int = 1
    growth: float = 2.0
    max_chunk_frames: int = 8
    deadline: float | None = None

    def __post_init__(self):
        if not (1 <= self.first_chunk_frames <= self.max_chunk_frames):
            raise ValueError("chunk policy needs 1 <= first_chunk_frames <= max_chunk_frames")
        if self.growth < 1.0:
            raise ValueError("chunk policy growth must be >= 1")
        if self.deadline is not None and self.deadline < 0:
            raise ValueError("chunk policy deadline must be >= 0 seconds")

    def chunk_size(self, chunks_done: int) -> int:
        if self.growth > 1.0:  # no power past the one that reaches max_chunk_frames: it would overflow a float
            reach = math.log(self.max_chunk_frames / self.first_chunk_frames, self.growth)
            chunks_done = min(chunks_done, math.ceil(reach) + 1)
        size = self.first_chunk_frames * self.growth**chunks_done
        return int(min(self.max_chunk_frames, max(1, round(size))))

    def ready(self, pending: int, target: int, ahead: float | None, step: float) -> int:
        """Frames to decode now (0: wait) for a stream with `pending` frames and a growth `target`.
        `ahead`: seconds of its audio not yet played (None before its first chunk); `step`: seconds
        an engine step takes."""
        if pending >= target:
            return target
        if not self.deadline or ahead is None or pending == 0:
            return 0
        # waiting for `target` takes that many more steps, during which playback drains `ahead`
        if ahead - (target - pending) * step >= self.deadline:
            return 0
        return 1 << (pending.bit_length() - 1)  # a power of two: the codec's graph frame buckets


@dataclass(frozen=True)
class RunawayGuard:
    """Stops generations that will never end on their own (0.3–0.5 % of official generations
    never emit EOS and produce minutes of room tone or babble).

    - frame budget: `min_frames + frames_per_token * text_tokens` (speech runs ~3 frames per
      text token, so the default allows ~4x that); never more than max_new_tokens.
    - loop: the last `loop_window` code0s repeat with a period of at most `loop_max_period`.
    - silence: `silence_seconds` of decoded audio below `silence_dbfs`.
    Any of them ends the request with finish_reason "runaway" and the check that fired as its
    runaway cause (request.RunawayCause). 0 turns a check off; `enabled=False` turns the guard off,
    so that a generation ends only at EOS or max_new_tokens, as in the official package (which has
    no such guard: on random weights it completes generations the guard stops). Requests with
    ignore_eos (fixed-length benchmarking) are exempt.
    """

    enabled: bool = True
    min_frames: int = 50
    frames_per_token: float = 12.0
    loop_window: int = 75
    loop_max_period: int = 8
    silence_seconds: float = 6.0
    silence_dbfs: float = -60.0

    def __post_init__(self):
        counts = ("min_frames", "frames_per_token", "loop_window", "loop_max_period", "silence_seconds")
        for name in counts:
            if getattr(self, name) < 0:
                raise ValueError(f"runaway guard {name} must be >= 0 (0: that check off), got {getattr(self, name)}")

    def frame_budget(self, text_tokens: int) -> int:
        if not self.enabled or self.frames_per_token <= 0:
            return 1 << 30
        return int(self.min_frames + self.frames_per_token * text_tokens)


# The Codec partition's precisions (EngineConfig.codec_dtype), named as torch names its dtypes.
CODEC_DTYPES = ("float32", "bfloat16", "float16")
# How the streaming codec decodes utterances longer than 300 frames (EngineConfig.codec_decode).
CODEC_DECODES = ("exact", "chunked")


@dataclass(frozen=True)
class EngineConfig:
    # Decode slots: requests generating at once. None: as many as the KV cache holds at
    # AUTO_TOKENS_PER_STREAM tokens a stream, at most AUTO_MAX_STREAMS (engine.auto_max_streams).
    max_streams: int | None = None
    # KV cache size: GB, or (when None) this fraction of the device memory free once the codec (its
    # state and graphs) is built (CPU: of 1 GB).
    kv_cache_memory: float | None = None
    kv_cache_fraction: float = 0.5
    page_size: int = 16  # tokens per KV page
    prefill_token_budget: int = 2048  # prompt tokens prefilled per engine step
    # Queue a step on the Talker's device only once the last one has run there, taking arrivals in
    # while it runs: an arrival's prefill then waits for at most the step in flight, not also the
    # next one queued behind it. Off, the engine queues each step as soon as the last is launched,
    # which keeps the device busy through the host's work between steps (a fraction of a
    # millisecond a step) at the cost of up to one more step before an arrival's first frame.
    step_on_idle: bool = True
    max_queue: int = 256  # requests waiting beyond the free slots; more are refused (the server answers 429)
    max_input_tokens: int = 4096  # text tokens per request
    return_codes: bool = False  # attach each chunk's 16-code frames (debugging, parity tests)
    max_seq_tokens: int = 12800  # prompt + frames of one request (RoPE table, page-table width)
    # Talker decode walk: "sdpa" eager, "triton" fused kernels (+ CUDA graphs), "torch" fused reference,
    # "auto" = triton on CUDA when Triton is installed, else sdpa.
    attention_backend: str = "auto"
    enforce_eager: bool = False  # no CUDA graphs
    # Batch sizes captured as CUDA graphs (talker decode, codec chunks); a batch runs in the smallest
    # bucket that holds it. None: 1, 2, 4, ..., 256 below max_streams, and max_streams.
    graph_buckets: tuple[int, ...] | None = None
    chunk_policy: ChunkPolicy = field(default_factory=ChunkPolicy)
    runaway: RunawayGuard = field(default_factory=RunawayGuard)
    # Launch chunks after a stream's first on the frames of earlier steps before the talker's step,
    # so codec and talker run at once (their own CUDA streams or devices); first chunks and final
    # flushes still follow the talker in the same step. None: when the Codec partition has a device
    # of its own (build_core).
    pipeline_codec: bool | None = None
    # The Codec partition's precision. "float32": the official decode's (within 1e-4 of it with TF32
    # off; on a GPU its convolutions, by PyTorch's default, and so its linears run in TF32, which moves
    # it 3-6e-3). "bfloat16"/"float16": its convs and linears in half precision, SnakeBeta, norms,
    # softmax and the output conv in fp32, half the streaming state; ~0.08 / ~0.01 max abs from the
    # fp32 decode (benchmarks/engine_steps.py --codec-dtype measures its speed).
    codec_dtype: str = "float32"
    # The Codec's fp32 convolutions and linears on a GPU: True TF32 tensor cores (3-6e-3 from the
    # exact fp32 decode on random full-size weights), False exact fp32 (within 1e-4 of the offline
    # decode, and about a quarter of TF32's speed at 64 streams x 8 frames), None as
    # torch.backends.cudnn.allow_tf32 says (PyTorch's default: TF32).
    codec_tf32: bool | None = None
    # "exact": every chunk equals the decode of the whole utterance, at any length (the model's own
    # output). "chunked": from frame 300 on, the official package's decode, which restarts the decoder
    # every 300 frames with 25 frames of context (a memory bound that adds a seam; up to ~0.4 apart on
    # the full-size codec): bit-parity with qwen-tts past 24 s (models/qwen3_tts/codec_windows.py).
    codec_decode: str = "exact"
    # The largest codec CUDA graph, in streams x frames a chunk; larger groups of chunks run as several
    # graphs. The codec's graphs share one memory pool that grows to the largest graph's activations
    # (about 18 MB a stream-frame for the full-size fp32 codec), so this bounds the codec's graph
    # memory (128: about 2 GB) and its start-up capture time; a group split in two costs a little
    # more than one graph of both. 0: no limit (graphs up to 64 streams x 8 frames).
    codec_graph_stream_frames: int = 128
    # The kernels' tile table (its GPU family or file) and the decode graphs' launch paths: PDL up
    # to pdl_max_rows rows, the slab GEMM up to slab_max_rows (cadence/kernels/config.py).
    kernels: KernelConfig = field(default_factory=KernelConfig)

    def __post_init__(self):
        if (self.max_streams is not None and self.max_streams < 1) or self.page_size < 1 or self.max_queue < 0:
            raise ValueError("max_streams and page_size must be >= 1, max_queue >= 0")
        if self.codec_graph_stream_frames < 0:
            raise ValueError("codec_graph_stream_frames must be >= 0 (0: no limit)")
        if self.codec_decode not in CODEC_DECODES:
            raise ValueError(f"unknown codec decode '{self.codec_decode}'; allowed: {', '.join(CODEC_DECODES)}")
        if self.codec_dtype not in CODEC_DTYPES:
            raise ValueError(f"unknown codec dtype '{self.codec_dtype}'; allowed: {', '.join(CODEC_DTYPES)}")
