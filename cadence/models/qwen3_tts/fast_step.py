"""The fast talker_decode walk: the whole frame step as fused kernels, two CUDA graphs per batch bucket.

One step = code0 logits and sampling (repetition penalty, EOS ban, control-token mask, temperature,
top-k, top-p, counter-based Gumbel noise: one kernel), the 15 code-predictor steps with their
sampling, the 16-embedding sum plus trailing text, and the 28 talker layers over the paged KV cache.
The frame is final after the code predictor; the talker layers only prepare the next step. So the
walk is captured as two graphs, `frame` and `advance`, and the engine queues the frames' codec
chunks between them (decode() runs the first, advance() the second): a stream's first audio does
not wait for the talker layers (~1 ms of a batch-1 walk, more at large batches).
Everything a request contributes is gathered from slot-indexed device tensors by the `slots`
buffer, so a replay reads nothing per request on the host and never looks anything up by request
id (padding rows point at a dummy slot that owns a scratch page).

The decoder layers (talker and code predictor) run as fused_stack.FusedStack.

`ops` is kernels.ops' TritonOps on GPUs and TorchOps elsewhere; the same code runs eagerly on the
CPU (where the tests check it against the eager walk) and under graphs on CUDA.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from ...engine.graphs import capture, capture_progress
from ...engine.partition import DecodeOutput
from ...engine.transfer import to_device
from ...kernels.linear.cuda_slab_gemm import slab_linear, slab_plan
from ...kernels.norm.kv_prefetch import CODE_PREDICTOR_MEGABYTES, KvPrefetchPlan
from ...kernels.ops import Ops
from ...kernels.sampling import CodeHistory, EosRule, RowParams, TokenOutputs, TokenSampling
from .fused_stack import FusedStack
from .model import prefill_tracks
from .prompt import Prompt
from .sampling import MIN_NEW_TOKENS
from .walk_buffers import CodePredictorIndex, DecodeGraph, PrefillGraph, WalkInputs

log = logging.getLogger(__name__)

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Token rows of one prefill captured as graphs, up to the engine's prefill token budget.
PREFILL_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048)


class FastDecoder:
    """Runs the decode walk of a `Qwen3TTSTalker` partition through fused ops (+ CUDA graphs)."""

    def __init__(
        self,
        partition,
        ops: Ops,
        use_graphs: bool,
        buckets: tuple[int, ...] = DEFAULT_BUCKETS,
        prefill_token_budget: int = 2048,
        pdl_max_rows: int = 0,
        slab_max_rows: int = 0,
    ):
        self.p = partition
        model = partition.model
        talker, cfg = model.talker, model.config.talker
        cp_cfg = cfg.code_predictor
        self.ops = ops
        self.dev = model.device
        self.state = partition.state
        self.dummy = partition.dummy_slot
        self.ps = partition.kv.page_size
        self.eos = cfg.codec_eos_token_id
        self.suppress = cfg.suppressed_code0_range[0]
        self.pad_text = model.config.tts_pad_token_id
        # Up to slab_max_rows rows the stacks' GEMMs are the slab GEMM (kernels/linear/cuda_slab_gemm.py; Hopper, bf16;
        # the partition passes 0 but for the Triton walk).
        self.talker_stack = FusedStack(talker.model, ops, partition.max_positions, slab_max_rows=slab_max_rows)
        # The code predictor's context is one 16-token page: splitting it would only add empty programs. Its
        # norms pull the next layer's cached keys and values into L2 (kv_prefetch.py; the talker's do not).
        self.cp_stack = FusedStack(
            talker.code_predictor.model, ops, cp_cfg.num_code_groups, attention_splits=1, slab_max_rows=slab_max_rows,
            kv_prefetch=KvPrefetchPlan(CODE_PREDICTOR_MEGABYTES),
        )  # fmt: skip
        self.talker = talker
        self.groups = cfg.num_code_groups
        # The 16 codebooks' input tables as one (a copy, ~70 MB for the 0.6B in bf16), so that a
        # frame's embedding is one gather-and-sum kernel (ops.embed_frame), not 16 lookups, a stack
        # and a sum.
        tables = [talker.model.codec_embedding.weight] + [e.weight for e in talker.code_predictor.model.codec_embedding]
        self.frame_table = torch.cat(tables)
        self.frame_offsets = torch.tensor([0] + [t.shape[0] for t in tables[:-1]], device=self.dev).cumsum(0)
        self.side = torch.cuda.Stream(self.dev) if self.dev.type == "cuda" else None  # see _beside
        self.copies = torch.cuda.Stream(self.dev) if self.dev.type == "cuda" else None  # see _read_back
        rows = partition.max_slots + 1
        shape = (cp_cfg.num_hidden_layers, rows, cp_cfg.num_code_groups, cp_cfg.num_key_value_heads, cp_cfg.head_dim)
        # The code predictor's 16-position cache: one "page" of 16 tokens per batch row.
        self.cp_k = torch.zeros(shape, dtype=model.dtype, device=self.dev)
        self.cp_v = torch.zeros(shape, dtype=model.dtype, device=self.dev)
        self.cp_index = CodePredictorIndex.build(rows, self.groups, self.dev)
        self.buckets = tuple(b for b in buckets if b < partition.max_slots) + (partition.max_slots,)
        self.graphs: dict[int, DecodeGraph] = {}
        self.pdl_max_rows = pdl_max_rows
        self._pending_advance: Callable[[], None] | None = None  # the last walk's second half, not yet run
        limit = max(prefill_token_budget, PREFILL_BUCKETS[0])
        self.prefill_buckets = tuple(b for b in PREFILL_BUCKETS if b < limit) + (limit,)
        self.prefill_graphs: dict[int, PrefillGraph] = {}
        self.pad_prefill = False  # pad prefills to their token bucket without graphs (tests of the padding)
        self._host: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # pinned read-back buffers
        self._flip = 0
        if use_graphs:
            self.capture()

    # -- the step ---------------------------------------------------------------------------------

    def step(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One whole walk for every slot in `slots` [B] (device): frame() then advance_rows(). Returns
        (frames [B,16], eos [B])."""
        frame, eos, inputs = self.frame(slots)
        self.advance_rows(slots, frame, inputs)
        return frame, eos

    def frame(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, WalkInputs]:
        """A walk's first half: code0 and the 15 code-predictor codes of each slot's next frame, and
        the talker layers' other inputs (gathered beside the code predictor). The frame is final
        here; only the next frame needs the talker layers over it (advance_rows)."""
        st, ops, talker = self.state, self.ops, self.talker
        with self._beside():
            inputs = self._walk_inputs(slots)
        hidden = st.hidden[slots]
        logits = self._head(hidden, talker.codec_head.weight)  # the sampler computes in fp32
        # The samplers write the frame's codes in place and each code's embedding where the next
        # code-predictor step reads it: no lookup, stack or cat kernels between them. They read each
        # row's parameters, seed, frame counter and code0 history from the slot-indexed state through
        # `slots` (no gather kernels); code0's also bans EOS for the first MIN_NEW_TOKENS frames or
        # where ignore_eos is set, and records its token in `seen`.
        frame = torch.empty(hidden.shape[0], self.groups, dtype=torch.long, device=self.dev)
        pair = torch.empty(hidden.shape[0], 2, hidden.shape[1], dtype=hidden.dtype, device=self.dev)
        pair[:, 0] = hidden  # code-predictor position 0; position 1 is code0's embedding
        spec = TokenSampling(
            st.code0, st.seed, st.step, 0, rows=slots, history=CodeHistory(st.seen, st.rep_penalty, record=True),
            eos=EosRule(st.ignore_eos, self.eos, self.suppress, min_frames=MIN_NEW_TOKENS),
        )  # fmt: skip
        code0 = ops.sample_tokens(
            logits, spec, TokenOutputs(frame[:, 0], talker.model.codec_embedding.weight, pair[:, 1])
        )
        self._predict_into(pair, frame, st.codes, st.seed, st.step, slots)
        eos = code0 == self.eos
        self._join()
        return frame, eos, inputs

    def _walk_inputs(self, slots: torch.Tensor) -> WalkInputs:
        """What the talker layers read besides the frame: this step's trailing-text embedding (the
        text projection's two GEMMs) and the slots' positions, pages and cache slots."""
        st = self.state
        step, position = st.step[slots], st.position[slots]
        col = step.clamp(max=st.trailing.shape[1] - 1)
        text_ids = torch.where(step < st.trailing_len[slots], st.trailing[slots, col], self.pad_text)
        block_table = st.block_table[slots]
        page = block_table.gather(1, (position // self.ps)[:, None])[:, 0]
        return WalkInputs(
            self.talker.embed_text(text_ids), step, position, position + 1, block_table,
            page * self.ps + position % self.ps,
        )  # fmt: skip

    def advance_rows(self, slots: torch.Tensor, frame: torch.Tensor, inputs: WalkInputs) -> None:
        """A walk's second half: the frame's 16 embeddings plus this step's trailing text through the
        28 talker layers (the next walk's hidden state), and the slots' step and position moved on."""
        st, kv = self.state, self.p.kv
        with self._beside():  # nothing in the layers reads the state's step and position (they take `inputs`)
            st.step[slots] = inputs.step + 1
            st.position[slots] = inputs.context  # position + 1
            # The dummy slot that pads batches up to a bucket must not advance into real pages.
            st.position.narrow(0, self.dummy, 1).zero_()
            st.step.narrow(0, self.dummy, 1).zero_()
        x = self.ops.embed_frame(frame, self.frame_table, self.frame_offsets, inputs.text)
        st.hidden[slots] = self.talker_stack(
            x, inputs.position, inputs.block_table, inputs.context, inputs.slot_index, kv.k, kv.v, decode=True
        )  # fmt: skip
        self._join()

    @contextlib.contextmanager
    def _beside(self) -> Iterator[None]:
        """Work queued inside runs on a second stream forked off the current one (under capture, a
        branch of the graph beside the main chain), so that small kernels nothing near reads stay
        off the walk's critical path (about 40 kernels of a batch-1 walk); _join() waits for it.
        Inline where there is no second stream (CPU)."""
        if self.side is None:
            yield
            return
        self.side.wait_stream(torch.cuda.current_stream(self.dev))
        with torch.cuda.stream(self.side):
            yield

    def _join(self) -> None:
        if self.side is not None:
            torch.cuda.current_stream(self.dev).wait_stream(self.side)

    def _head(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """A head's logits: the slab GEMM where the stacks run it (faster than the layer kernels' GEMM
        at batch 1), else ops.linear."""
        if h.shape[0] <= self.talker_stack.slab_max_rows:
            plan = slab_plan(weight.shape[0], weight.shape[1], h.shape[0])
            if plan is not None:
                return slab_linear(h, weight, plan)[0]
        return self.ops.linear(h, weight)

    def _predict_codes(self, hidden, code0, step, seed, slots) -> torch.Tensor:
        """Codes 1..15 [B, 15] of talker hidden states and their code0s, as a walk predicts them (the
        tests and benchmarks compare the code predictor's paths through this); step and seed per
        row, the sampling parameters those of `slots`."""
        pair = torch.stack([hidden, self.talker.embed_codec(code0)], dim=1)
        frame = torch.empty(hidden.shape[0], self.groups, dtype=torch.long, device=self.dev)
        self._predict_into(pair, frame, self.state.codes.take(slots), seed, step)
        return frame[:, 1:]

    def _predict_into(self, pair: torch.Tensor, frame: torch.Tensor, params: RowParams, seed, step, rows=None) -> None:
        """Codes 1..15 of each row into frame[:, 1:], from pair [B, 2, H] (the talker's hidden state
        and code0's embedding: the code predictor's positions 0 and 1). params, seed and step (the
        noise's frame counter) are per row, or with `rows` tables read at those rows (the slots)."""
        talker, ops = self.talker, self.ops
        cp = talker.code_predictor
        b = pair.shape[0]
        # Positions 0 and 1 as 2B query rows sharing their page.
        first = cp.small_to_mtp_projection(pair).flatten(0, 1)
        ix, n = self.cp_index, 2 * b
        h = self.cp_stack(
            first, ix.first_pos[:n], ix.first_page[:n], ix.first_ctx[:n], ix.first_slot[:n], self.cp_k, self.cp_v,
            decode=True, new_tokens=2,
        )[1::2]  # fmt: skip
        for j in range(self.groups - 1):
            logits = self._head(h, cp.lm_head[j].weight)
            spec = TokenSampling(params, seed, step, j + 1, rows=rows)
            if j + 2 == self.groups:  # the last code: nothing reads its embedding
                ops.sample_tokens(logits, spec, TokenOutputs(frame[:, j + 1]))
                break
            table = cp.model.codec_embedding[j].weight
            embedded = torch.empty(b, table.shape[1], dtype=table.dtype, device=self.dev)
            ops.sample_tokens(logits, spec, TokenOutputs(frame[:, j + 1], table, embedded))
            h = self.cp_stack(
                cp.small_to_mtp_projection(embedded), ix.step_pos[j, :b], ix.page[:b], ix.step_ctx[j, :b],
                ix.step_slot[j, :b], self.cp_k, self.cp_v, decode=True,
            )  # fmt: skip

    @torch.no_grad()
    def prefill(self, slots: list[int], prompts: list[Prompt]) -> None:
        """talker_prefill through the fused stack: all prompts as one flat batch of token rows, each
        row attending over its own prompt prefix through its request's page table. Under graphs the
        rows pad up to a token bucket (padding rows belong to the dummy slot and write its scratch
        page) and the prompt embeddings are computed inside the graph: the host makes one copy of
        ids and indices before the replay (a cloned voice's x-vector or reference frames one more).
        Prompts longer than the largest bucket run eagerly."""
        lengths = [len(p) for p in prompts]
        total = sum(lengths)
        bucket = next((b for b in self.prefill_buckets if b >= total), None)
        pad = bucket is not None and (bool(self.prefill_graphs) or self.pad_prefill)
        rows = bucket if pad else total
        overrides = self.p.model.codec_overrides(prompts)  # none but for cloned voices
        extra_rows = [row + i for row, value in overrides for i in range(len(value))]
        inputs = self._prefill_inputs(slots, prompts, rows, extra_rows)
        graph = self.prefill_graphs.get(bucket) if pad else None
        norm = self.talker_stack.norm
        if graph is not None:
            extra = graph.extra  # rows not flagged keep whatever an earlier prefill left: unread
        else:
            extra = norm.new_zeros((rows, norm.shape[0]) if overrides else (1, 1))
        for row, value in overrides:
            extra[row : row + len(value)] = value
        if graph is None:
            self._prefill_rows(inputs.to(self.dev, non_blocking=True), extra)
            return
        graph.inputs.copy_(inputs, non_blocking=True)
        graph.graph.replay()

    def _prefill_inputs(
        self, slots: list[int], prompts: list[Prompt], rows: int, extra_rows: list[int]
    ) -> torch.Tensor:
        """[9, rows] int64 on the host (pinned on CUDA): the prompts' tracks (model.prefill_tracks, 4
        rows), 1 where the codec track's embedding comes from `extra` (rows `extra_rows`), then each
        row's position and owning slot, then each prompt's last row and its slot (entries past the
        prompts point at row 0 and the dummy slot)."""
        lengths = [len(p) for p in prompts]
        inputs = np.zeros((9, rows), dtype=np.int64)
        inputs[:4] = prefill_tracks(prompts, rows)
        inputs[4, extra_rows] = 1
        index = inputs[5:]
        index[[1, 3]] = self.dummy
        total = sum(lengths)
        starts = np.cumsum(lengths, dtype=np.int64) - lengths
        index[0, :total] = np.arange(total) - np.repeat(starts, lengths)
        index[1, :total] = np.repeat(slots, lengths)
        index[2, : len(slots)] = starts + np.asarray(lengths) - 1
        index[3, : len(slots)] = slots
        out = torch.from_numpy(inputs)
        return out.pin_memory() if self.dev.type == "cuda" else out

    def _prefill_rows(self, inputs: torch.Tensor, extra: torch.Tensor) -> None:
        """The prefill body (captured per token bucket): inputs [9, rows] (see _prefill_inputs), extra
        [rows, H] (or [1, 1] zeros where no row takes its codec embedding from it)."""
        st, kv = self.state, self.p.kv
        text, codec = self.p.model.embed_tracks(inputs[:4])
        x = text + torch.where(inputs[4, :, None].bool(), extra, codec)
        positions, owner, last, out_slots = inputs[5:]
        block_table = st.block_table[owner]
        page = block_table.gather(1, (positions // self.ps)[:, None])[:, 0]
        slot_index = page * self.ps + positions % self.ps
        h = self.talker_stack(x, positions, block_table, positions + 1, slot_index, kv.k, kv.v)
        st.hidden[out_slots] = h[last]

    # -- graphs -----------------------------------------------------------------------------------

    def bucket(self, n: int) -> int:
        return next(b for b in self.buckets if b >= n)

    @torch.no_grad()
    def capture(self) -> None:
        start = time.perf_counter()
        free_before = torch.cuda.mem_get_info(self.dev)[0]
        pool = torch.cuda.graph_pool_handle()
        with capture_progress(2 * len(self.buckets) + len(self.prefill_buckets), "talker graphs") as bar:
            for b in sorted(self.buckets, reverse=True):  # largest first: smaller graphs reuse its pool
                slots = torch.full((b,), self.dummy, dtype=torch.long, device=self.dev)
                with self._pdl(b):
                    frame, (frames, eos, inputs) = capture(lambda: self.frame(slots), self.dev, pool)  # noqa: B023
                    # `frames` and `inputs` stay referenced (DecodeGraph), so the advance's capture cannot
                    # reuse their memory.
                    advance, _ = capture(lambda: self.advance_rows(slots, frames, inputs), self.dev, pool)  # noqa: B023
                self.graphs[b] = DecodeGraph(frame, advance, slots, frames, eos, inputs)
                bar.update(2)
            # Prefill graphs get a pool of their own: a prefill runs between a decode walk and the
            # moment its frames are read, so it must not reuse the decode graphs' output memory.
            prefill_pool = torch.cuda.graph_pool_handle()
            hidden = self.talker_stack.norm.shape[0]
            for rows in sorted(self.prefill_buckets, reverse=True):
                inputs = self._prefill_inputs([], [], rows, []).to(self.dev)
                extra = torch.zeros(rows, hidden, dtype=self.talker_stack.norm.dtype, device=self.dev)
                with self._pdl(rows):
                    graph, _ = capture(lambda: self._prefill_rows(inputs, extra), self.dev, prefill_pool)  # noqa: B023
                self.prefill_graphs[rows] = PrefillGraph(graph, inputs, extra)
                bar.update()
        torch.cuda.synchronize(self.dev)
        used = (free_before - torch.cuda.mem_get_info(self.dev)[0]) / 2**20
        log.info(
            "captured %d decode graphs (batch buckets %s) and %d prefill graphs (token buckets %s) in %.1f s, "
            "%.0f MiB of graph memory",
            len(self.graphs), list(self.buckets), len(self.prefill_graphs), list(self.prefill_buckets),
            time.perf_counter() - start, used,
        )  # fmt: skip

    def _pdl(self, rows: int) -> contextlib.AbstractContextManager:
        """Kernels launched (and so captured) with programmatic dependent launch for graphs of at most
        `pdl_max_rows` rows (KernelConfig.pdl_max_rows: it shortens decode steps up to 64 rows and
        slows larger ones, where kernels launched early hold SM slots the running one's later waves
        need); graphs above the PDL threshold (launch/pdl.py) let each kernel in before the one before
        it waits."""
        return self.ops.pdl_settings(rows <= self.pdl_max_rows, self.ops.trigger_first_for(rows))

    @torch.no_grad()
    def decode(self, slots: list[int]) -> DecodeOutput:
        """Queue the first half of a walk (the frames) and their copies to the host; the second half
        waits for advance(), so that work queued in between (the frames' codec chunks) runs first."""
        self.advance()
        if self.copies is not None:  # the last walk's frames read before this walk overwrites them
            torch.cuda.current_stream(self.dev).wait_stream(self.copies)
        n = len(slots)
        if not self.graphs:
            idx = to_device(slots, self.dev)
            frames, eos, inputs = self.frame(idx)
            self._pending_advance = functools.partial(self.advance_rows, idx, frames, inputs)
        else:
            g = self.graphs[self.bucket(n)]
            if g.host_slots != tuple(slots):  # padding rows point at the dummy slot
                padded = torch.tensor(list(slots) + [self.dummy] * (g.slots.shape[0] - n), dtype=torch.long)
                # From pinned memory: a copy from pageable memory may wait for the stream (engine/transfer.py).
                g.slots.copy_(padded.pin_memory(), non_blocking=True)
                g.host_slots = tuple(slots)
            g.frame.replay()
            self._pending_advance = g.advance.replay
            frames, eos = g.frames[:n], g.eos[:n]
        return self._read_back(frames, eos)

    @torch.no_grad()
    def advance(self) -> None:
        """Queue the last walk's second half (the talker layers over its frames), if not yet queued.
        decode() calls it first itself, and so does the partition's prefill() before it reassigns slots."""
        pending, self._pending_advance = self._pending_advance, None
        if pending is not None:
            pending()

    def _read_back(self, frames: torch.Tensor, eos: torch.Tensor) -> DecodeOutput:
        """Queue the copies of a walk's frames and EOS flags to the host and return without waiting:
        no host synchronisation inside a decode step. Pinned buffers alternate between two walks,
        since the engine reads a walk's copies after it has launched the next one."""
        if self.dev.type != "cuda":
            return DecodeOutput(frames, eos, frames)
        n = frames.shape[0]
        if self._host is None:
            rows = self.buckets[-1]
            self._host = [
                (torch.empty(rows, self.groups, dtype=torch.long).pin_memory(),
                 torch.empty(rows, dtype=torch.bool).pin_memory())
                for _ in range(2)
            ]  # fmt: skip
        self._flip ^= 1
        host_frames, host_eos = (t[:n] for t in self._host[self._flip])
        # On a stream of their own, so that the walk's second half starts as soon as its first ends;
        # decode() waits for them before the next walk writes the frames again.
        self.copies.wait_stream(torch.cuda.current_stream(self.dev))
        with torch.cuda.stream(self.copies):
            host_frames.copy_(frames, non_blocking=True)
            host_eos.copy_(eos, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
        if not self.graphs:  # allocator memory: not handed out again before the copies are done
            frames.record_stream(self.copies)
            eos.record_stream(self.copies)
        return DecodeOutput(host_frames, host_eos, frames, ready)
