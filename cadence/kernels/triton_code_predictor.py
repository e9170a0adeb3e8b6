"""The code predictor's 15 steps as one persistent Triton kernel (issue 4, perf-notes #35).

Layer by layer, a batch-1 frame's code predictor is ~1,000 short kernels (15 steps x 5 layers x
~9, plus heads and samplers), each too short to reach memory bandwidth: ~2.4 ms for 2.4 GB of
weights that take 0.5 ms to read. Here one launch runs all of it. Its programs, one per SM, stay
resident and share every phase's work; a grid-wide barrier (an atomic counter every program adds
to and then spins on: ~0.9 us on an H200, perf-notes #34) separates the phases that depend on each
other's results. One code-predictor step over R rows (2 per stream at the first step: the talker's
hidden state and code0's embedding at positions 0 and 1; then 1 per stream):

    per layer  qkv     RMSNorm(d + r) @ Wqkv (each program normalises the rows itself, so no
                       phase of its own; the first tile's program stores the residual sum)
               attend  per (stream, kv head): QK-norm + RoPE, k and v into the 16-position
                       cache, the group's query heads over positions 0..p
               o       attn @ Wo
               mlp     SwiGLU(RMSNorm(o + r') @ [Wgate; Wup])
               down    act @ Wdown
    head               final RMSNorm of each stream's last row @ lm_head[j] -> logits
    sample             per stream: the same sampler as `sample_tokens` (codebook j + 1), the
                       code, and the next step's input row codec_embedding[j][code]

The residual stream alternates between two buffers (the qkv phase reads one and writes the other,
the mlp phase back), so no program overwrites a row another is still reading. Arithmetic and
rounding follow the layered kernels (triton_ops), so results match them to accumulation order.

Not faster than the layer kernels yet on an H200 (2.63 against 2.78 ms alone at batch 1, slower
inside the engine), so EngineConfig.persistent_max_rows is 0 by default: each phase is bound by one
SM's share of the weights (the 1,024-wide projections give 32 tiles for 132 SMs); split-K there,
summed by the consuming phase, is the next step (perf-notes #35).

The spinning barrier needs every program resident at once: the grid is at most one program per
SM. Under TRITON_INTERPRET=1 programs run one after another, so only a grid of one can finish
there: that is how the CPU tests run it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..engine.sampler import RowParams
from .triton_ops import _sample_choice


@triton.jit
def _grid_barrier(counter_ptr, target):
    """Wait until every program has arrived: the counter reaches `target` (barriers so far x grid)."""
    tl.debug_barrier()  # every thread's stores issued before this program's release
    tl.atomic_add(counter_ptr, 1, sem="release")
    seen = tl.atomic_add(counter_ptr, 0, sem="acquire")
    while seen < target:
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def _sync(counter_ptr, passed, P):
    """The next grid-wide barrier; returns the count of barriers passed."""
    _grid_barrier(counter_ptr, (passed + 1) * P)
    return passed + 1


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:  # fp32 weights: exact fp32 products, as PyTorch computes them with TF32 off
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _load_input(x_ptr, x_stride, r_ptr, src, rmask, kk, kmask, K: tl.constexpr, has_res, X_PARTS: tl.constexpr):
    """Rows `src` of the input (+ r where has_res), rounded to the activation dtype as the unfused
    add is. X_PARTS = 0: x is an activation [rows, K]; n: x holds n fp32 partial sums of a split-K
    GEMM, x_stride apart, added here in split order and rounded as that GEMM's output would be."""
    m = rmask[:, None] & kmask[None, :]
    offs = src[:, None] * K + kk[None, :]
    dtype = r_ptr.dtype.element_ty
    if X_PARTS == 0:
        x = tl.load(x_ptr + offs, mask=m, other=0.0, cache_modifier=".cg").to(tl.float32)
    else:
        x = tl.zeros(offs.shape, tl.float32)
        for part in tl.static_range(X_PARTS):
            x += tl.load(x_ptr + part * x_stride + offs, mask=m, other=0.0, cache_modifier=".cg")
        x = x.to(dtype).to(tl.float32)
    r = tl.load(r_ptr + offs, mask=m & has_res, other=0.0, cache_modifier=".cg")
    return (x + r.to(tl.float32)).to(dtype)


@triton.jit
def _linear_phase(
    x_ptr, x_stride, r_ptr, nw_ptr, rsum_ptr, w_ptr, out_ptr, out_stride, rows, row_first, row_step, N, eps,
    has_res, pid, P, K: tl.constexpr, X_PARTS: tl.constexpr, NORM: tl.constexpr, STORE_SUM: tl.constexpr,
    SWIGLU: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """out[i, :N] = f(x[row_first + i * row_step]) @ w^T for i < rows. Work items are (tile of
    BLOCK_N output columns, K split), shared round-robin by the P programs. f: identity, or with
    NORM the RMSNorm of x + r (weight nw). SWIGLU: w holds gate rows then up rows, out = silu(gate)
    * up. SPLIT = 1: out is the activation, rounded; SPLIT > 1: item (t, s) stores its fp32 partial
    over the s-th K range at out + s * out_stride, and the consuming phase adds them (X_PARTS), so
    a narrow weight still spreads over every SM without a phase of its own for the reduction."""
    rk = tl.arange(0, BLOCK_K)
    K_SPLIT: tl.constexpr = K // SPLIT
    dtype = r_ptr.dtype.element_ty
    for item in range(pid, tl.cdiv(N, BLOCK_N) * SPLIT, P):
        t = item // SPLIT
        split = item % SPLIT
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = rn < N
        for m0 in range(0, rows, BLOCK_M):
            rm = m0 + tl.arange(0, BLOCK_M)
            rmask = rm < rows
            src = row_first + rm * row_step
            inv = tl.zeros([BLOCK_M], tl.float32)
            if NORM:  # the row statistics need all of K, whatever this item's split
                sq = tl.zeros([BLOCK_M], tl.float32)
                for k0 in range(0, K, BLOCK_K):
                    kk = k0 + rk
                    v = _load_input(x_ptr, x_stride, r_ptr, src, rmask, kk, kk < K, K, has_res, X_PARTS)
                    v = v.to(tl.float32)
                    sq += tl.sum(v * v, axis=1)
                inv = 1.0 / tl.sqrt(sq / K + eps)
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for k0 in range(0, K_SPLIT, BLOCK_K):  # a compile-time trip count: a pipelined loop
                kk = split * K_SPLIT + k0 + rk
                kmask = kk < K
                a = _load_input(x_ptr, x_stride, r_ptr, src, rmask, kk, kmask, K, has_res, X_PARTS)
                if NORM:
                    if STORE_SUM:
                        if t == 0:
                            tl.store(rsum_ptr + src[:, None] * K + kk[None, :], a,
                                     mask=rmask[:, None] & kmask[None, :])  # fmt: skip
                    w_norm = tl.load(nw_ptr + kk, mask=kmask, other=0.0).to(tl.float32)
                    normed = (a.to(tl.float32) * inv[:, None]).to(dtype).to(tl.float32)
                    a = (w_norm[None, :] * normed).to(dtype)
                wmask = nmask[:, None] & kmask[None, :]
                w = tl.load(w_ptr + rn[:, None] * K + kk[None, :], mask=wmask, other=0.0, eviction_policy="evict_first")
                acc += _dot(a, tl.trans(w), IEEE)
                if SWIGLU:
                    wu = tl.load(w_ptr + (N + rn[:, None]) * K + kk[None, :], mask=wmask, other=0.0,
                                 eviction_policy="evict_first")  # fmt: skip
                    acc_up += _dot(a, tl.trans(wu), IEEE)
            out_mask = rmask[:, None] & nmask[None, :]
            if SPLIT > 1:
                tl.store(out_ptr + split * out_stride + rm[:, None] * N + rn[None, :], acc, mask=out_mask)
            else:
                if SWIGLU:  # rounded where the layered path rounds: gate/up outputs, then silu
                    g = acc.to(dtype).to(tl.float32)
                    silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
                    acc = silu * acc_up.to(dtype).to(tl.float32)
                tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(dtype), mask=out_mask)


@triton.jit
def _norm_rope(src_ptr, heads, hmask, w_ptr, cos_ptr, sin_ptr, pos, eps, D: tl.constexpr):
    """QK-norm then RoPE of the heads `heads` [NH] of one qkv row, rounded as qk_norm_rope_store."""
    half: tl.constexpr = D // 2
    d = tl.arange(0, D)
    m = hmask[:, None]
    x = tl.load(src_ptr + heads[:, None] * D + d[None, :], mask=m, other=0.0, cache_modifier=".cg")
    dtype = x.dtype
    x32 = x.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x32 * x32, axis=1) / D + eps)
    w = tl.load(w_ptr + d).to(tl.float32)
    normed = (w[None, :] * (x32 * inv[:, None]).to(dtype).to(tl.float32)).to(dtype)
    pd = tl.where(d < half, d + half, d - half)
    xp = tl.load(src_ptr + heads[:, None] * D + pd[None, :], mask=m, other=0.0, cache_modifier=".cg").to(tl.float32)
    wp = tl.load(w_ptr + pd).to(tl.float32)
    partner = (wp[None, :] * (xp * inv[:, None]).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    rotated = tl.where(d[None, :] < half, -partner, partner)
    c = tl.load(cos_ptr + pos * D + d).to(tl.float32)
    s = tl.load(sin_ptr + pos * D + d).to(tl.float32)
    a = (normed.to(tl.float32) * c[None, :]).to(dtype).to(tl.float32)
    b = (rotated.to(dtype).to(tl.float32) * s[None, :]).to(dtype).to(tl.float32)
    return (a + b).to(dtype)


@triton.jit
def _attend_phase(
    qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, kc_ptr, vc_ptr, attn_ptr, streams, rows_per, pos0, eps, scale,
    pid, P, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, G_PAD: tl.constexpr, CTX: tl.constexpr,
):  # fmt: skip
    """Per (stream, kv head): for each of the stream's rows (positions pos0, pos0 + 1, ...) write
    its k and v into the cache, then attend its query heads over positions 0..p. kc/vc: this
    layer's cache, [rows, CTX, HKV, D]."""
    G: tl.constexpr = HQ // HKV
    W: tl.constexpr = (HQ + 2 * HKV) * D
    d = tl.arange(0, D)
    gi = tl.arange(0, G_PAD)
    ctx = tl.arange(0, CTX)
    one = tl.arange(0, 1)
    for item in range(pid, streams * HKV, P):
        n = item // HKV
        kvh = item % HKV
        for i in range(rows_per):
            row = n * rows_per + i
            pos = pos0 + i
            src = qkv_ptr + row * W
            k = _norm_rope(src, HQ + kvh + one, one < 1, kn_ptr, cos_ptr, sin_ptr, pos, eps, D)
            v = tl.load(src + (HQ + HKV + kvh) * D + d, cache_modifier=".cg")
            cache = ((n * CTX + pos) * HKV + kvh) * D
            tl.store(kc_ptr + cache + one[:, None] * 0 + d[None, :], k)
            tl.store(vc_ptr + cache + d, v)
            tl.debug_barrier()  # this program's k and v stored before its threads read them back
            hmask = gi < G
            q = _norm_rope(src, kvh * G + gi, hmask, qn_ptr, cos_ptr, sin_ptr, pos, eps, D).to(tl.float32)
            kv_rows = ((n * CTX + ctx) * HKV + kvh) * D
            valid = ctx <= pos
            kt = tl.load(kc_ptr + kv_rows[:, None] + d[None, :], mask=valid[:, None], other=0.0, cache_modifier=".cg")
            vt = tl.load(vc_ptr + kv_rows[:, None] + d[None, :], mask=valid[:, None], other=0.0, cache_modifier=".cg")
            s = tl.sum(q[:, None, :] * kt.to(tl.float32)[None, :, :], axis=2)  # [G_PAD, CTX]
            s = tl.where(valid[None, :], s * scale, -float("inf"))
            p = tl.exp(s - tl.max(s, axis=1)[:, None])
            total = tl.sum(p, axis=1)
            if vt.dtype != tl.float32:  # probabilities rounded to the cache's dtype, as paged_attention
                p = p.to(vt.dtype).to(tl.float32)
            out = tl.sum(p[:, :, None] * vt.to(tl.float32)[None, :, :], axis=1) / total[:, None]
            dst = attn_ptr + (row * HQ + kvh * G + gi[:, None]) * D + d[None, :]
            tl.store(dst, out.to(attn_ptr.dtype.element_ty), mask=hmask[:, None])
            tl.debug_barrier()


@triton.jit
def _code_predictor_kernel(
    d_ptr, ra_ptr, rb_ptr, qkv_ptr, attn_ptr, o_ptr, act_ptr, logits_ptr, codes_ptr, counter_ptr,
    ln1_ptr, wqkv_ptr, qn_ptr, kn_ptr, wo_ptr, ln2_ptr, wgu_ptr, wdown_ptr, norm_ptr, head_ptr, emb_ptr,
    cos_ptr, sin_ptr, kc_ptr, vc_ptr,
    do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr,
    streams, cache_stride, d_stride, o_stride, logits_stride, eps, scale,
    H: tl.constexpr, I: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, V: tl.constexpr,
    LAYERS: tl.constexpr, STEPS: tl.constexpr, CTX: tl.constexpr, G_PAD: tl.constexpr,
    SPLIT_O: tl.constexpr, SPLIT_DOWN: tl.constexpr, SPLIT_HEAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """d: the layer input as SPLIT_DOWN fp32 partials (the down projection's, or the step's input
    row in part 0 and zeros in the rest); o, logits: SPLIT_O / SPLIT_HEAD partials likewise."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    QKV: tl.constexpr = (HQ + 2 * HKV) * D
    passed = 0  # barriers passed
    for step in range(STEPS):
        j = step + tl.zeros([], tl.int32)  # predicts codebook j + 1 (a tensor, also when interpreted)
        rows_per = tl.where(j == 0, 2, 1)
        rows = streams * rows_per
        pos0 = tl.where(j == 0, 0, j + 1)
        for layer in range(LAYERS):
            # d + r -> rb (the residual sum); RMSNorm -> QKV. The first layer has no residual yet.
            _linear_phase(d_ptr, d_stride, ra_ptr, ln1_ptr + layer * H, rb_ptr, wqkv_ptr + layer * QKV * H, qkv_ptr,
                          0, rows, 0, 1, QKV, eps, layer > 0, pid, P, K=H, X_PARTS=SPLIT_DOWN, NORM=True,
                          STORE_SUM=True, SWIGLU=False, SPLIT=1, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                          IEEE=IEEE)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
            cache = layer * cache_stride
            _attend_phase(qkv_ptr, qn_ptr + layer * D, kn_ptr + layer * D, cos_ptr, sin_ptr, kc_ptr + cache,
                          vc_ptr + cache, attn_ptr, streams, rows_per, pos0, eps, scale, pid, P, HQ=HQ, HKV=HKV, D=D,
                          G_PAD=G_PAD, CTX=CTX)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
            _linear_phase(attn_ptr, 0, rb_ptr, ln2_ptr, rb_ptr, wo_ptr + layer * H * HQ * D, o_ptr, o_stride, rows,
                          0, 1, H, eps, False, pid, P, K=HQ * D, X_PARTS=0, NORM=False, STORE_SUM=False,
                          SWIGLU=False, SPLIT=SPLIT_O, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                          IEEE=IEEE)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
            # o + rb -> ra; RMSNorm -> gate/up -> SwiGLU.
            _linear_phase(o_ptr, o_stride, rb_ptr, ln2_ptr + layer * H, ra_ptr, wgu_ptr + layer * 2 * I * H, act_ptr,
                          0, rows, 0, 1, I, eps, True, pid, P, K=H, X_PARTS=SPLIT_O, NORM=True, STORE_SUM=True,
                          SWIGLU=True, SPLIT=1, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                          IEEE=IEEE)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
            _linear_phase(act_ptr, 0, rb_ptr, ln2_ptr, ra_ptr, wdown_ptr + layer * H * I, d_ptr, d_stride, rows, 0,
                          1, H, eps, False, pid, P, K=I, X_PARTS=0, NORM=False, STORE_SUM=False, SWIGLU=False,
                          SPLIT=SPLIT_DOWN, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                          IEEE=IEEE)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
        # Final norm of each stream's last row (row 2n + 1 at the first step), then head j.
        _linear_phase(d_ptr, d_stride, ra_ptr, norm_ptr, rb_ptr, head_ptr + j * V * H, logits_ptr, logits_stride,
                      streams, rows_per - 1, rows_per, V, eps, True, pid, P, K=H, X_PARTS=SPLIT_DOWN, NORM=True,
                      STORE_SUM=False, SWIGLU=False, SPLIT=SPLIT_HEAD, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                      BLOCK_K=BLOCK_K, IEEE=IEEE)  # fmt: skip
        passed = _sync(counter_ptr, passed, P)
        col = tl.arange(0, BLOCK_V)
        valid = col < V
        key = ((j + 1).to(tl.uint32) * 0x1E3779B9).to(tl.uint32)  # sample_tokens' codebook key
        dtype = ra_ptr.dtype.element_ty
        for n in range(pid, streams, P):
            x = tl.zeros([BLOCK_V], tl.float32)
            for part in tl.static_range(SPLIT_HEAD):  # the head's partials, in split order
                x += tl.load(logits_ptr + part * logits_stride + n * V + col, mask=valid, other=0.0,
                             cache_modifier=".cg")  # fmt: skip
            x = tl.where(valid, x.to(dtype).to(tl.float32), -float("inf"))
            code = _sample_choice(x, col, valid, n, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr, frame_ptr, key, V)
            tl.store(codes_ptr + n * STEPS + j, code.to(tl.int64))
            if j + 1 < STEPS:  # the next step's input: codebook j+1's embedding of the code, as part 0
                h = tl.arange(0, H)
                row = tl.load(emb_ptr + (j * V + code).to(tl.int64) * H + h).to(tl.float32)
                tl.store(d_ptr + n * H + h, row)
                for part in tl.static_range(1, SPLIT_DOWN):
                    tl.store(d_ptr + part * d_stride + n * H + h, tl.zeros([H], tl.float32))
        passed = _sync(counter_ptr, passed, P)


@dataclass(frozen=True)
class CodePredictorTiles:
    """Launch choices: activation rows per dot (a tensor-core dot needs 16), weight rows per tile,
    K per loop step, warps, and the K splits of the narrow GEMMs (o and down: 1,024 outputs are 32
    tiles of 32 rows, so 4 splits give ~128 work items for 132 SMs; the 2,048-wide head 2). The
    grid is one program per SM (`programs`, 1 under the interpreter). Defaults: the best of
    `benchmarks/code_predictor.py --sweep` on the H200 (perf-notes #35, #36)."""

    block_m: int = 16
    block_n: int = 32
    block_k: int = 256
    warps: int = 4
    split_o: int = 4
    split_down: int = 4
    split_head: int = 2


def _split(k: int, wanted: int) -> int:
    """The most K splits up to `wanted` that cut K into equal multiples of 16 (a dot's K)."""
    return next(s for s in range(wanted, 0, -1) if k % (16 * s) == 0)


class PersistentCodePredictor:
    """The code predictor of a FusedStack-ready model as one kernel launch per frame.

    Stacks the layers' weights (one tensor per kind, indexed by layer), the 15 heads and the 14
    input tables, and owns the activation buffers for up to `max_streams` streams (a CUDA graph
    captures their addresses). `__call__(first, params, seed, step)` returns the codes [B, 15]."""

    def __init__(self, stack, heads: list[torch.Tensor], embeddings: list[torch.Tensor], max_streams: int,
                 k_cache: torch.Tensor, v_cache: torch.Tensor, programs: int | None = None,
                 tiles: CodePredictorTiles = CodePredictorTiles()):  # fmt: skip
        layers = stack.layers
        self.stack = stack
        self.ln1 = torch.stack([L.ln1 for L in layers])
        self.wqkv = torch.stack([L.wqkv for L in layers])
        self.q_norm = torch.stack([L.q_norm for L in layers])
        self.k_norm = torch.stack([L.k_norm for L in layers])
        self.wo = torch.stack([L.wo for L in layers])
        self.ln2 = torch.stack([L.ln2 for L in layers])
        self.wgu = torch.stack([L.wgu for L in layers])
        self.wdown = torch.stack([L.wdown for L in layers])
        self.heads = torch.stack(heads)
        self.embeddings = torch.stack(embeddings)
        self.k_cache, self.v_cache = k_cache, v_cache
        hidden, dev, dtype = stack.norm.shape[0], stack.norm.device, stack.norm.dtype
        self.hidden, self.inter = hidden, self.wgu.shape[1] // 2
        self.vocab, self.steps = self.heads.shape[1], self.heads.shape[0]
        self.max_streams = max_streams
        rows = 2 * max_streams
        self.counter = torch.zeros(1, dtype=torch.int32, device=dev)
        self.ra, self.rb = (torch.zeros(rows, hidden, dtype=dtype, device=dev) for _ in range(2))
        self.qkv = torch.zeros(rows, self.wqkv.shape[1], dtype=dtype, device=dev)
        self.attn = torch.zeros(rows, stack.heads * stack.head_dim, dtype=dtype, device=dev)
        self.act = torch.zeros(rows, self.inter, dtype=dtype, device=dev)
        self.codes = torch.zeros(max_streams, self.steps, dtype=torch.long, device=dev)
        self.tiles = tiles  # sets the split-K partial buffers d, o and logits
        if programs is None:
            interpreted = not dev.type == "cuda"
            programs = 1 if interpreted else torch.cuda.get_device_properties(dev).multi_processor_count
        self.programs = programs

    @property
    def tiles(self) -> CodePredictorTiles:
        return self._tiles

    @tiles.setter
    def tiles(self, tiles: CodePredictorTiles) -> None:
        """The launch choices, and the fp32 partial-sum buffers their K splits need."""
        s = self.stack
        self.splits = (
            _split(s.heads * s.head_dim, tiles.split_o), _split(self.inter, tiles.split_down),
            _split(self.hidden, tiles.split_head),
        )  # fmt: skip
        k_steps = [self.hidden, s.heads * s.head_dim // self.splits[0], self.inter // self.splits[1]]
        k_steps.append(self.hidden // self.splits[2])
        self.block_k = min(tiles.block_k, *(k & -k for k in k_steps))  # a power of two that divides every K range
        self._tiles = tiles
        rows, dev = 2 * self.max_streams, self.ra.device
        self.d = torch.zeros(self.splits[1], rows, self.hidden, dtype=torch.float32, device=dev)
        self.o = torch.zeros(self.splits[0], rows, self.hidden, dtype=torch.float32, device=dev)
        self.logits = torch.zeros(self.splits[2], self.max_streams, self.vocab, dtype=torch.float32, device=dev)

    def __call__(self, first: torch.Tensor, params: RowParams, seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """first [2B, H]: each stream's projected talker hidden state and code0 embedding, interleaved."""
        b = first.shape[0] // 2
        if b > self.max_streams:
            raise ValueError(f"the persistent code predictor holds at most {self.max_streams} streams, got {b}")
        s, t = self.stack, self.tiles
        self.d[0, : 2 * b].copy_(first)
        self.d[1:, : 2 * b].zero_()
        self.counter.zero_()
        _code_predictor_kernel[(self.programs,)](
            self.d, self.ra, self.rb, self.qkv, self.attn, self.o, self.act, self.logits, self.codes, self.counter,
            self.ln1, self.wqkv, self.q_norm, self.k_norm, self.wo, self.ln2, self.wgu, self.wdown, s.norm,
            self.heads, self.embeddings, s.cos, s.sin, self.k_cache, self.v_cache,
            params.do_sample, params.temperature, params.top_k, params.top_p, seed, step,
            b, self.k_cache.stride(0), self.d.stride(0), self.o.stride(0), self.logits.stride(0), s.eps, s.scale,
            H=self.hidden, I=self.inter, HQ=s.heads, HKV=s.kv_heads, D=s.head_dim, V=self.vocab,
            LAYERS=len(s.layers), STEPS=self.steps, CTX=self.steps + 1,
            G_PAD=max(1, triton.next_power_of_2(s.heads // s.kv_heads)),
            SPLIT_O=self.splits[0], SPLIT_DOWN=self.splits[1], SPLIT_HEAD=self.splits[2],
            BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=self.block_k,
            BLOCK_V=triton.next_power_of_2(self.vocab), IEEE=self.ra.dtype == torch.float32, num_warps=t.warps,
        )  # fmt: skip
        return self.codes[:b]
