"""Qwen3-TTS's partitions and walks: what the engine schedules (see cadence/engine/partition.py).

Talker partition: talker + code predictor, the paged KV cache, and every per-request decode input
in slot-indexed tensors (hidden state, step counters, trailing text ids, sampling parameters,
seeds, the code0 presence mask for the repetition penalty, the EOS ban). A decode walk gathers
them by slot: no per-request Python and no lookup by request id inside the walk.
"""

from __future__ import annotations

import itertools
import logging
import time

import numpy as np
import torch

from ...engine.graphs import capture, capture_progress
from ...engine.kv_cache import PagedKVCache
from ...engine.partition import Admission, DecodeOutput, HostAudio
from ...engine.request import EngineRequest
from ...engine.transfer import to_device, to_device_packed
from ...kernels.sampling.reference import RowParams, mask_control_tokens, repetition_penalty, sample
from .codec import cast_decoder
from .codec_stream import StreamingCodecDecoder
from .codec_windows import CodecWindows
from .model import Qwen3TTSModel
from .paged_attention import PagedAttention
from .sampling import MIN_NEW_TOKENS

log = logging.getLogger(__name__)


class SlotState:
    """Per-request decode state, one row per slot, preallocated on the device.

    The scalar fields are rows of three packed tensors, one per dtype, laid out field-major
    ([fields, slots]): each field (`step`, `code0.top_k`, ...) is a contiguous [slots] view that the
    walks read like any tensor, and an admission writes all the fields of a pack in one indexed copy.
    """

    def __init__(self, model: Qwen3TTSModel, slots: int, max_trailing: int, max_pages: int):
        cfg, dev = model.config.talker, model.device
        self.pad_text = model.config.tts_pad_token_id
        self.hidden = torch.zeros(slots, cfg.hidden_size, dtype=model.dtype, device=dev)
        # Fields in the order of _scalar_fields. step: frames generated; position: the next talker
        # position; top_k 0, temperature 1 and top_p 1: off.
        self.longs = torch.zeros(6, slots, dtype=torch.long, device=dev)
        self.floats = torch.ones(5, slots, dtype=torch.float32, device=dev)
        self.bools = torch.zeros(3, slots, dtype=torch.bool, device=dev)
        self.step, self.position, self.trailing_len, self.seed, top_k0, top_k = self.longs
        self.rep_penalty, temperature0, top_p0, temperature, top_p = self.floats
        self.ignore_eos, do_sample0, do_sample = self.bools
        self.code0 = RowParams(do_sample0, temperature0, top_k0, top_p0)
        self.codes = RowParams(do_sample, temperature, top_k, top_p)
        self.trailing = torch.full((slots, max_trailing), self.pad_text, dtype=torch.long, device=dev)
        self.seen = torch.zeros(slots, cfg.vocab_size, dtype=torch.bool, device=dev)  # code0s generated
        self.block_table = torch.zeros(slots, max_pages, dtype=torch.long, device=dev)

    def assign_batch(
        self, slots: list[int], requests: list[EngineRequest], pages: list[list[int]], prompt_lens: list[int]
    ) -> None:
        """Fresh state for the requests of one prefill entering `slots` (never the dummy slot): one
        host->device copy and at most six indexed writes, however many requests. On CUDA the copy is
        from pinned memory and does not wait: a copy from pageable memory, or a `tensor[slot] =
        number`, would wait for the walk in flight. `hidden` is left as it is: the prefill that
        follows writes it for every slot, on the eager and the fused path alike.

        Trailing text and block-table rows are written up to the batch's longest (padded with tts_pad
        and 0, as the constructor fills them); further on a row keeps what an earlier request left,
        as it always has, and no result depends on it: trailing text is read below trailing_len only,
        the fused walk reads pages up to the slot's position and the eager walk masks those it
        gathers past it."""
        trailing = [r.prompt.trailing_text for r in requests]
        text = np.full((len(slots), max(map(len, trailing))), self.pad_text, dtype=np.int64)
        table = np.zeros((len(slots), max(map(len, pages))), dtype=np.int64)
        for i, (t, p) in enumerate(zip(trailing, pages, strict=True)):
            text[i, : len(t)] = t
            table[i, : len(p)] = p
        longs, floats, bools = _scalar_fields(requests, prompt_lens)
        idx, longs, floats, bools, text, table = to_device_packed(
            [np.asarray(slots, dtype=np.int64), longs, floats, bools, text, table], self.step.device
        )
        self.longs.index_copy_(1, idx, longs)
        self.floats.index_copy_(1, idx, floats)
        self.bools.index_copy_(1, idx, bools)
        self.seen.index_fill_(0, idx, False)
        if text.shape[1]:  # streaming layouts only
            self.trailing[:, : text.shape[1]].index_copy_(0, idx, text)
        self.block_table[:, : table.shape[1]].index_copy_(0, idx, table)

    def extend_trailing(self, slot: int, start: int, ids: list[int]) -> None:
        """Write more trailing text for a running slot (text still arriving), without a host wait."""
        end = start + len(ids)
        if end > self.trailing.shape[1]:
            raise ValueError(f"the text outgrows the {self.trailing.shape[1] - 1} tokens a request may hold")
        text, length = to_device_packed(
            [np.asarray(ids, dtype=np.int64), np.asarray([end], dtype=np.int64)], self.step.device
        )
        self.trailing[slot, start:end] = text
        self.trailing_len[slot : slot + 1] = length


def _scalar_fields(requests: list[EngineRequest], prompt_lens: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The columns of SlotState's packed fields for `requests` ([fields, requests] each), in the
    order SlotState.__init__ unpacks them."""
    ps = [r.params for r in requests]
    longs = [
        [0] * len(ps),
        prompt_lens,
        [len(r.prompt.trailing_text) for r in requests],
        [p.seed if p.seed is not None else 0 for p in ps],
        [p.top_k for p in ps],
        [p.subtalker_top_k for p in ps],
    ]
    floats = [
        [p.repetition_penalty for p in ps],
        [p.temperature for p in ps],
        [p.top_p for p in ps],
        [p.subtalker_temperature for p in ps],
        [p.subtalker_top_p for p in ps],
    ]
    bools = [[r.ignore_eos for r in requests], [p.do_sample for p in ps], [p.subtalker_dosample for p in ps]]
    return np.array(longs, dtype=np.int64), np.array(floats, dtype=np.float32), np.array(bools, dtype=np.bool_)


ATTENTION_BACKENDS = ("sdpa", "triton", "torch")


class Qwen3TTSTalker:
    """The Talker partition (walks talker_prefill, talker_decode) over a paged KV cache.

    attention_backend: "sdpa" runs the eager walk (the model's own layers, PyTorch attention over
    pages gathered per step); "triton" the fused walk with Triton kernels, under one CUDA graph per
    batch bucket unless `enforce_eager`; "torch" the fused walk with PyTorch definitions of the
    fused ops (the CPU stand-in the tests use to check the fused walk against the eager one).
    """

    def __init__(
        self,
        model: Qwen3TTSModel,
        max_slots: int,
        kv_bytes: int,
        page_size: int,
        max_trailing: int,
        max_seq_tokens: int = 12800,
        attention_backend: str = "sdpa",
        enforce_eager: bool = False,
        graph_buckets: tuple[int, ...] | None = None,
        prefill_token_budget: int = 2048,
        pdl_max_rows: int = 0,
        slab_max_rows: int = 0,
    ):
        if attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(
                f"unknown attention backend '{attention_backend}'; allowed: {', '.join(ATTENTION_BACKENDS)}"
            )
        cfg = model.config.talker
        self.model = model
        self.max_slots = max_slots
        self.page_size = page_size
        self.max_positions = max_seq_tokens
        per_token = PagedKVCache.bytes_per_token(
            cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, model.dtype
        )
        num_pages = kv_bytes // (per_token * page_size)
        layers, kv_heads, dim = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
        self.kv = PagedKVCache(layers, num_pages, page_size, kv_heads, dim, model.dtype, model.device)
        self.bytes_per_token = per_token
        # One extra slot pads fused batches up to their bucket; it owns a scratch page.
        self.dummy_slot = max_slots
        self.state = SlotState(model, max_slots + 1, max_trailing + 1, self.kv.pages_for(max_seq_tokens))
        self.state.block_table[self.dummy_slot] = self.kv.scratch_page
        self._positions = [0] * max_slots  # host mirror: how many pages the eager gather must span
        self._eos = cfg.codec_eos_token_id
        self.eos_free_frames = MIN_NEW_TOKENS
        self._suppress_start = cfg.suppressed_code0_range[0]
        self.fast = None
        if attention_backend != "sdpa":
            from ...kernels.backends import load_ops
            from .fast_step import DEFAULT_BUCKETS, FastDecoder

            use_graphs = model.device.type == "cuda" and not enforce_eager
            self.fast = FastDecoder(
                self, load_ops(attention_backend), use_graphs, graph_buckets or DEFAULT_BUCKETS, prefill_token_budget,
                pdl_max_rows, slab_max_rows if attention_backend == "triton" else 0,
            )  # fmt: skip

    def tokens_to_reserve(self, request: EngineRequest, max_frames: int) -> int:
        return len(request.prompt) + max_frames

    def fits(self, tokens: int) -> bool:
        """Whether one request of `tokens` KV tokens can ever run (position and page-table limits)."""
        return tokens <= self.max_positions and self.kv.pages_for(tokens) <= self.kv.num_pages

    @torch.no_grad()
    def prefill(self, admissions: list[Admission]) -> None:
        model, dev = self.model, self.model.device
        self.advance()  # the last walk's rest first: slots are reassigned below
        prompts = [a.request.prompt for a in admissions]
        lengths = [len(p) for p in prompts]
        slot_ids = [a.slot for a in admissions]
        self.state.assign_batch(slot_ids, [a.request for a in admissions], [a.pages for a in admissions], lengths)
        for slot, n in zip(slot_ids, lengths, strict=True):
            self._positions[slot] = n
        if self.fast is not None:
            self.fast.prefill(slot_ids, prompts)
            return
        embeds = model.prefill_embeddings_batch(prompts).split(lengths)
        longest = max(lengths)
        x = torch.zeros(len(embeds), longest, embeds[0].shape[1], dtype=model.dtype, device=dev)
        valid = torch.zeros(len(embeds), longest, dtype=torch.bool, device=dev)
        for i, e in enumerate(embeds):
            x[i, : e.shape[0]] = e
            valid[i, : e.shape[0]] = True
        slots = torch.tensor(slot_ids, device=dev)
        positions = torch.arange(longest, device=dev).expand(len(embeds), -1)
        pages = self.kv.pages_for(longest)
        attend = PagedAttention(self.kv, self.state.block_table[slots, :pages], positions, valid)
        hidden = model.talker(x, positions, attend)
        last = torch.tensor(lengths, device=dev) - 1
        self.state.hidden[slots] = hidden[torch.arange(len(embeds), device=dev), last]

    @torch.no_grad()
    def decode(self, slots: list[int]) -> DecodeOutput:
        for s in slots:
            self._positions[s] += 1
        if self.fast is not None:
            return self.fast.decode(slots)
        return self._decode_eager(slots)

    def advance(self) -> None:
        if self.fast is not None:
            self.fast.advance()

    def busy(self) -> bool:
        """Every walk runs on the current stream (side branches join it), so its queue says."""
        dev = self.model.device
        return dev.type == "cuda" and not torch.cuda.current_stream(dev).query()

    def _decode_eager(self, slots: list[int]) -> DecodeOutput:
        talker, st = self.model.talker, self.state
        dev = st.step.device
        idx = torch.tensor(slots, device=dev)
        hidden, step, position, seed = st.hidden[idx], st.step[idx], st.position[idx], st.seed[idx]

        logits = talker.codec_head(hidden).float()
        logits = repetition_penalty(logits, st.seen[idx], st.rep_penalty[idx])
        ban_eos = (step < MIN_NEW_TOKENS) | st.ignore_eos[idx]
        logits = mask_control_tokens(logits, self._eos, self._suppress_start, ban_eos)
        code0 = sample(logits, st.code0.take(idx), seed, step, codebook=0)
        st.seen[idx, code0] = True

        code_params = st.codes.take(idx)
        rest = talker.predict_codes(
            hidden, code0, lambda j, scores: sample(scores, code_params, seed, step, codebook=j + 1)
        )
        frame = torch.cat([code0[:, None], rest], dim=1)

        # Next input: the frame's 16 embeddings plus this step's trailing text (tts_pad once used up).
        col = step.clamp(max=st.trailing.shape[1] - 1)
        text_ids = torch.where(
            step < st.trailing_len[idx],
            st.trailing[idx, col],
            st.trailing.new_full((), self.model.config.tts_pad_token_id),
        )
        x = (talker.embed_frame(frame) + talker.embed_text(text_ids))[:, None]
        pages = self.kv.pages_for(max(self._positions[s] for s in slots))
        valid = torch.ones(len(slots), 1, dtype=torch.bool, device=dev)
        attend = PagedAttention(self.kv, st.block_table[idx, :pages], position[:, None], valid)
        st.hidden[idx] = talker(x, position[:, None], attend)[:, 0]
        st.step[idx] = step + 1
        st.position[idx] = position + 1
        return DecodeOutput(frame.cpu(), (code0 == self._eos).cpu(), frame)

    def append_text(self, slot: int, start: int, ids: list[int]) -> None:
        self.state.extend_trailing(slot, start, ids)

    def release(self, slot: int) -> None:
        self._positions[slot] = 0


class Qwen3TTSCodec:
    """The Codec partition (walk codec_chunk): the stateful streaming decoder over slot-indexed state.

    On CUDA each (batch bucket, frames bucket) runs as a captured graph: a chunk is hundreds of small
    kernels whose launch cost, not their arithmetic, dominates. Batches pad with a dummy slot; a
    final chunk whose size is not a bucket pads with repeated frames (its stream's state is thrown
    away after) and other odd sizes run eagerly.

    `dtype` bfloat16/float16 runs a low-precision copy of the decoder (codec.cast_decoder: SnakeBeta,
    norms, softmax, codebook sums and the output conv stay fp32); the model's own decoder stays the
    fp32 offline decode. The audio handed back is fp32 in every case. `tf32`: the fp32 math in
    TF32 or exact (codec_stream.tf32_as_convs; None follows torch.backends.cudnn.allow_tf32).
    `windowed`: reproduce the official package's 300-frame windows (codec_windows.py) instead of the
    exact decode.
    """

    FRAME_BUCKETS = (1, 2, 4, 8)
    # Every 8 streams from 16 up: a chunk costs about its padded batch from ~16 streams on (64 x 8
    # frames 19.8 ms, 8 x 8 3.9 ms on an H200), and groups of streams reaching a chunk together are
    # any size (256 arrivals prefilled ~51 a step under the 2,048-token budget make groups of 51,
    # which a bucket of 64 would pad by 13).
    BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 128, 256)

    def __init__(
        self,
        model: Qwen3TTSModel,
        max_slots: int,
        use_graphs: bool = False,
        max_batch: int = 64,
        graph_buckets: tuple[int, ...] | None = None,
        own_stream: bool = False,
        dtype: torch.dtype = torch.float32,
        tf32: bool | None = None,
        autotune_from: int = 1,
        windowed: bool = False,
        graph_stream_frames: int = 0,
    ):
        decoder = model.codec.decoder
        if dtype != torch.float32:
            decoder = cast_decoder(decoder, dtype)
        self.decoder = StreamingCodecDecoder(decoder, tf32)
        self.decoder.allocate(max_slots + 1)
        self.dummy = max_slots
        self.samples_per_frame = model.samples_per_frame
        self.sample_rate = model.sample_rate
        self.device = next(model.codec.decoder.parameters()).device  # the Talker's, or its own (build_core)
        self.windows = CodecWindows(self.decoder, max_slots + 1, self.device) if windowed else None
        self.max_batch = max_batch
        largest = min(max_batch, max_slots)
        self.batch_buckets = tuple(b for b in graph_buckets or self.BATCH_BUCKETS if b < largest) + (largest,)
        # The graphs share one memory pool, which grows to the largest graph's activations (about
        # 18 MB a stream-frame for the full-size fp32 codec): graphs of at most `graph_stream_frames`
        # streams x frames (0: no limit) bound it, and larger groups run as several graphs.
        self.graph_batch = {f: self._largest_bucket(f, graph_stream_frames) for f in self.FRAME_BUCKETS}
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        # cuDNN autotuning (torch.backends.cudnn.benchmark) for the graphs of at least this many
        # stream-frames (batch x frames); smaller ones take cuDNN's heuristic choice.
        self.autotune_from = autotune_from
        self.capture_seconds: dict[tuple[int, int], float] = {}
        # `own_stream` (CUDA): the codec runs on a stream of its own, so that the chunks the engine
        # pipelines (EngineConfig.pipeline_codec) overlap the talker's step on the same GPU.
        self.stream = torch.cuda.Stream(self.device) if own_stream and self.device.type == "cuda" else None
        if use_graphs:
            with torch.cuda.device(self.device):  # capture streams and graph pools belong to the current device
                self._capture()

    def reset(self, slots: list[int], requests: list[EngineRequest] | None = None) -> None:
        """Cold state for new streams. A cloned voice in the in-context mode continues its reference
        audio, so the reference frames are decoded first and their audio dropped: the stream's
        audio is then the official decode of reference + generated frames with the reference's
        share cut off."""
        self.decoder.reset(slots)
        if self.windows is not None:
            self.windows.reset(slots)
        for slot, request in zip(slots, requests or [], strict=False):
            ref = request.prompt.ref_codes
            if ref:
                frames = to_device(ref, self.device)[None]
                if self.windows is None:
                    self.decoder.decode([slot], frames)
                else:  # the reference's frames count toward the official windows, as the official decode sees them
                    self.windows.decode([slot], frames, self.decoder.decode)

    def decode(self, slots: list[int], frames: torch.Tensor, finishing: bool = False) -> torch.Tensor:
        if self.stream is None:
            return self._decode_chunk(slots, frames, finishing)
        # after what the caller queued (the frames, a reset of these slots), not after later work
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        if frames.is_cuda:
            frames.record_stream(self.stream)  # made on the caller's stream, read on this one
        with torch.cuda.stream(self.stream):
            return self._decode_chunk(slots, frames, finishing)

    def _decode_chunk(self, slots: list[int], frames: torch.Tensor, finishing: bool) -> torch.Tensor:
        if self.windows is None:
            return self._decode(slots, frames, finishing)
        return self.windows.decode(slots, frames, lambda s, f: self._decode(s, f, finishing))

    def to_host(self, audio: torch.Tensor, codes: torch.Tensor | None = None) -> HostAudio:
        if audio.device.type != "cuda":
            return HostAudio(audio.float(), codes=None if codes is None else codes.cpu())
        stream = self.stream or torch.cuda.current_stream(self.device)

        def pinned_copy(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            return torch.empty(t.shape, dtype=dtype, pin_memory=True).copy_(t, non_blocking=True)

        with torch.cuda.stream(stream):  # behind this decode, not behind what the talker queues later
            host = pinned_copy(audio, torch.float32)
            codes = None if codes is None else pinned_copy(codes, codes.dtype)
            ready = torch.cuda.Event()
            ready.record(stream)
        return HostAudio(host, ready, codes)

    def fetch(self, audio: torch.Tensor) -> np.ndarray:
        """The audio on the host now (`to_host(audio).wait()`), for benchmarks and tests."""
        return self.to_host(audio).wait()

    def _largest_bucket(self, frames: int, stream_frames: int) -> int:
        """The most streams one graph of `frames` frames holds under the stream-frames limit (0:
        none); at least the smallest batch bucket."""
        fitting = [b for b in self.batch_buckets if not stream_frames or b * frames <= stream_frames]
        return max(fitting, default=self.batch_buckets[0])

    def _decode(self, slots: list[int], frames: torch.Tensor, finishing: bool) -> torch.Tensor:
        n, f = frames.shape[0], frames.shape[1]
        fb = next((b for b in self.FRAME_BUCKETS if b >= f), None)
        most = self.graph_batch[fb] if self.graphs and fb is not None else self.max_batch  # both <= max_batch
        if n > most:  # bounded activation memory: split large groups
            parts = [self._decode(slots[i : i + most], frames[i : i + most], finishing) for i in range(0, n, most)]
            return torch.cat(parts)
        if not self.graphs or fb is None or (fb != f and not finishing):
            return self.decoder.decode(slots, frames)
        if fb != f:  # pad a final chunk with copies of its last frame; the extra audio is dropped
            frames = torch.cat([frames, frames[:, -1:].expand(n, fb - f, frames.shape[2])], dim=1)
        graph, slot_buf, code_buf, wav = self.graphs[(self.bucket(n), fb)]
        slot_buf.fill_(self.dummy)
        # pinned + non_blocking: a copy from pageable memory would first wait for the codec's earlier
        # chunks on this stream, holding the host (and the talker's launch) back
        slot_buf[:n].copy_(torch.tensor(slots, dtype=torch.long).pin_memory(), non_blocking=True)
        code_buf[:n].copy_(frames)
        graph.replay()
        return wav[:n, : f * self.samples_per_frame].clone()

    def bucket(self, n: int) -> int:
        return next(b for b in self.batch_buckets if b >= n)

    @torch.no_grad()
    def _capture(self) -> None:
        start = time.perf_counter()
        free_before = torch.cuda.mem_get_info(self.device)[0]
        autotune = torch.backends.cudnn.benchmark
        pool = torch.cuda.graph_pool_handle()
        largest_first = sorted(self.batch_buckets, reverse=True), sorted(self.FRAME_BUCKETS, reverse=True)
        shapes = [(b, f) for b, f in itertools.product(*largest_first) if b <= self.graph_batch[f]]
        try:
            with capture_progress(len(shapes), "codec graphs") as bar:
                for b, f in shapes:
                    began = time.perf_counter()
                    # fixed shapes per graph: autotuning picks the fastest conv algorithms for them
                    torch.backends.cudnn.benchmark = b * f >= self.autotune_from
                    slots = torch.full((b,), self.dummy, dtype=torch.long, device=self.device)
                    codes = torch.zeros(b, f, 16, dtype=torch.long, device=self.device)
                    graph, wav = capture(lambda: self.decoder.decode(slots, codes), self.device, pool)  # noqa: B023
                    self.graphs[(b, f)] = (graph, slots, codes, wav)
                    self.capture_seconds[(b, f)] = time.perf_counter() - began
                    bar.update()
        finally:
            torch.backends.cudnn.benchmark = autotune
        self.decoder.reset([self.dummy])
        torch.cuda.synchronize(self.device)
        used = (free_before - torch.cuda.mem_get_info(self.device)[0]) / 2**20
        log.info(
            "captured %d codec graphs (batch buckets %s x frames %s, at most %s streams a graph) in %.1f s, "
            "%.0f MiB of graph memory",
            len(self.graphs), list(self.batch_buckets), list(self.FRAME_BUCKETS), self.graph_batch,
            time.perf_counter() - start, used,
        )  # fmt: skip

    @property
    def bytes_per_stream(self) -> int:
        return self.decoder.bytes_per_stream()
