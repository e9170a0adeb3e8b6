"""The code predictor's 15 steps as one persistent Triton kernel (issue 4, perf-notes #35).

Layer by layer, a batch-1 frame's code predictor is ~1,000 short kernels (15 steps x 5 layers x
~9, plus heads and samplers), each too short to reach memory bandwidth: ~2.4 ms for 2.4 GB of
weights that take 0.5 ms to read. Here one launch runs all of it. Its programs, one per SM, stay
resident and share every phase's work; a grid-wide barrier (an atomic counter every program adds
to and then spins on: 0.9 us on an H200 alone, perf-notes #34, ~3.6 us among phases that move
memory, #37) separates the phases that depend on each other's results. One code-predictor step
over R rows (2 per stream at the first step: the talker's hidden state and code0's embedding at
positions 0 and 1; then 1 per stream):

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

Not faster than the layer kernels yet on an H200 (2.63-2.80 against 2.78-2.81 ms alone at batch 1,
slower inside the engine), so EngineConfig.persistent_max_rows is 0 by default. A phase costs ~6 us,
2.6 of them without the barrier. More SMs per phase (split-K), prefetching weights into L2 (1-4
phases ahead), a split barrier (arrive, next weights, wait) and a one-thread barrier did not
shorten it enough: with its weights already in L2 a phase still costs ~4 us (perf-notes #35-#40).
Closing the gap needs weights streamed into shared memory by the copy engine (TMA) outside the
barrier's release, which tl.load does not offer.

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
from .code_predictor_buffers import CodePredictorBuffers
from .triton_attention import norm_rope_heads
from .triton_sampler import _sample_choice, topk_search


@triton.jit
def grid_arrive(counter_ptr):
    """A program's arrival at a grid-wide barrier: its threads' stores, then one release add. The
    release waits until every memory operation the program issued before it is performed (loads
    too: perf-notes #37)."""
    tl.debug_barrier()  # every thread's stores issued before this program's release
    tl.atomic_add(counter_ptr, 1, sem="release")


@triton.jit
def grid_wait(counter_ptr, target):
    """Spin until the counter reaches `target` (barriers so far x grid), then let every thread on."""
    seen = tl.atomic_add(counter_ptr, 0, sem="acquire")
    while seen < target:
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def grid_barrier(counter_ptr, target):
    grid_arrive(counter_ptr)
    grid_wait(counter_ptr, target)


@triton.jit
def _sync(counter_ptr, passed, P):
    """The next grid-wide barrier; returns the count of barriers passed."""
    grid_barrier(counter_ptr, (passed + 1) * P)
    return passed + 1


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:  # fp32 weights: exact fp32 products, as PyTorch computes them with TF32 off
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _load_sum(x_ptr, r_ptr, src, rmask, kk, kmask, K: tl.constexpr, has_res):
    """Rows `src` of x (+ r where has_res), rounded to x's dtype as the unfused add is."""
    m = rmask[:, None] & kmask[None, :]
    x = tl.load(x_ptr + src[:, None] * K + kk[None, :], mask=m, other=0.0, cache_modifier=".cg")
    r = tl.load(r_ptr + src[:, None] * K + kk[None, :], mask=m & has_res, other=0.0, cache_modifier=".cg")
    return (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)


@triton.jit
def _linear_phase(
    x_ptr, r_ptr, nw_ptr, rsum_ptr, w_ptr, out_ptr, rows, row_first, row_step, N, eps, has_res, pid, P,
    K: tl.constexpr, NORM: tl.constexpr, STORE_SUM: tl.constexpr, SWIGLU: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """out[i, :N] = f(x[row_first + i * row_step]) @ w^T for i < rows, BLOCK_N output columns per
    tile, tiles shared round-robin by the P programs. f: identity, or with NORM the RMSNorm of
    x + r (weight nw). SWIGLU: w holds gate rows then up rows, out = silu(gate) * up."""
    rk = tl.arange(0, BLOCK_K)
    for t in range(pid, tl.cdiv(N, BLOCK_N), P):
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = rn < N
        for m0 in range(0, rows, BLOCK_M):
            rm = m0 + tl.arange(0, BLOCK_M)
            rmask = rm < rows
            src = row_first + rm * row_step
            inv = tl.zeros([BLOCK_M], tl.float32)
            if NORM:
                sq = tl.zeros([BLOCK_M], tl.float32)
                for k0 in range(0, K, BLOCK_K):
                    s = _load_sum(x_ptr, r_ptr, src, rmask, k0 + rk, k0 + rk < K, K, has_res).to(tl.float32)
                    sq += tl.sum(s * s, axis=1)
                inv = 1.0 / tl.sqrt(sq / K + eps)
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for k0 in range(0, K, BLOCK_K):
                kk = k0 + rk
                kmask = kk < K
                a = _load_sum(x_ptr, r_ptr, src, rmask, kk, kmask, K, has_res)
                if NORM:
                    if STORE_SUM:
                        if t == 0:
                            tl.store(rsum_ptr + src[:, None] * K + kk[None, :], a,
                                     mask=rmask[:, None] & kmask[None, :])  # fmt: skip
                    w_norm = tl.load(nw_ptr + kk, mask=kmask, other=0.0).to(tl.float32)
                    normed = (a.to(tl.float32) * inv[:, None]).to(a.dtype).to(tl.float32)
                    a = (w_norm[None, :] * normed).to(a.dtype)
                wmask = nmask[:, None] & kmask[None, :]
                w = tl.load(w_ptr + rn[:, None] * K + kk[None, :], mask=wmask, other=0.0, eviction_policy="evict_first")
                acc += _dot(a, tl.trans(w), IEEE)
                if SWIGLU:
                    wu = tl.load(w_ptr + (N + rn[:, None]) * K + kk[None, :], mask=wmask, other=0.0,
                                 eviction_policy="evict_first")  # fmt: skip
                    acc_up += _dot(a, tl.trans(wu), IEEE)
            dtype = out_ptr.dtype.element_ty
            if SWIGLU:  # rounded where the layered path rounds: gate/up outputs, then silu
                g = acc.to(dtype).to(tl.float32)
                silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)
                acc = silu * acc_up.to(dtype).to(tl.float32)
            tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(dtype), mask=rmask[:, None] & nmask[None, :])


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
            k = norm_rope_heads(src, HQ + kvh + one, one < 1, kn_ptr, cos_ptr, sin_ptr, pos, eps, D)
            v = tl.load(src + (HQ + HKV + kvh) * D + d, cache_modifier=".cg")
            cache = ((n * CTX + pos) * HKV + kvh) * D
            tl.store(kc_ptr + cache + one[:, None] * 0 + d[None, :], k)
            tl.store(vc_ptr + cache + d, v)
            tl.debug_barrier()  # this program's k and v stored before its threads read them back
            hmask = gi < G
            q = norm_rope_heads(src, kvh * G + gi, hmask, qn_ptr, cos_ptr, sin_ptr, pos, eps, D).to(tl.float32)
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
    streams, cache_stride, eps, scale,
    H: tl.constexpr, I: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, V: tl.constexpr,
    LAYERS: tl.constexpr, STEPS: tl.constexpr, CTX: tl.constexpr, G_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, IEEE: tl.constexpr,
    TOPK_WAYS: tl.constexpr, TOPK_PASSES: tl.constexpr,
):  # fmt: skip
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
            _linear_phase(d_ptr, ra_ptr, ln1_ptr + layer * H, rb_ptr, wqkv_ptr + layer * QKV * H, qkv_ptr, rows, 0, 1,
                          QKV, eps, layer > 0, pid, P, K=H, NORM=True, STORE_SUM=True, SWIGLU=False,
                          BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=IEEE)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
            cache = layer * cache_stride
            _attend_phase(qkv_ptr, qn_ptr + layer * D, kn_ptr + layer * D, cos_ptr, sin_ptr, kc_ptr + cache,
                          vc_ptr + cache, attn_ptr, streams, rows_per, pos0, eps, scale, pid, P, HQ=HQ, HKV=HKV, D=D,
                          G_PAD=G_PAD, CTX=CTX)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
            _linear_phase(attn_ptr, attn_ptr, ln2_ptr, rb_ptr, wo_ptr + layer * H * HQ * D, o_ptr, rows, 0, 1, H, eps,
                          False, pid, P, K=HQ * D, NORM=False, STORE_SUM=False, SWIGLU=False,
                          BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=IEEE)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
            # o + rb -> ra; RMSNorm -> gate/up -> SwiGLU.
            _linear_phase(o_ptr, rb_ptr, ln2_ptr + layer * H, ra_ptr, wgu_ptr + layer * 2 * I * H, act_ptr, rows, 0, 1,
                          I, eps, True, pid, P, K=H, NORM=True, STORE_SUM=True, SWIGLU=True,
                          BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=IEEE)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
            _linear_phase(act_ptr, act_ptr, ln2_ptr, ra_ptr, wdown_ptr + layer * H * I, d_ptr, rows, 0, 1, H, eps,
                          False, pid, P, K=I, NORM=False, STORE_SUM=False, SWIGLU=False,
                          BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=IEEE)  # fmt: skip
            passed = _sync(counter_ptr, passed, P)
        # Final norm of each stream's last row (row 2n + 1 at the first step), then head j.
        _linear_phase(d_ptr, ra_ptr, norm_ptr, rb_ptr, head_ptr + j * V * H, logits_ptr, streams, rows_per - 1,
                      rows_per, V, eps, True, pid, P, K=H, NORM=True, STORE_SUM=False, SWIGLU=False,
                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=IEEE)  # fmt: skip
        passed = _sync(counter_ptr, passed, P)
        col = tl.arange(0, BLOCK_V)
        valid = col < V
        key = ((j + 1).to(tl.uint32) * 0x1E3779B9).to(tl.uint32)  # sample_tokens' codebook key
        for n in range(pid, streams, P):
            x = tl.load(logits_ptr + n * V + col, mask=valid, other=-float("inf"), cache_modifier=".cg")
            code = _sample_choice(x.to(tl.float32), col, valid, n, do_ptr, temp_ptr, topk_ptr, topp_ptr, seed_ptr,
                                  frame_ptr, key, V, TOPK_WAYS, TOPK_PASSES)  # fmt: skip
            tl.store(codes_ptr + n * STEPS + j, code.to(tl.int64))
            if j + 1 < STEPS:  # the next step's input: codebook j+1's embedding of the code
                h = tl.arange(0, H)
                row = tl.load(emb_ptr + (j * V + code).to(tl.int64) * H + h)
                tl.store(d_ptr + n * H + h, row)
        passed = _sync(counter_ptr, passed, P)


@dataclass(frozen=True)
class CodePredictorTiles:
    """Launch choices: activation rows per dot (a tensor-core dot needs 16), weight rows per tile,
    K per loop step, warps. The grid is one program per SM (`programs`, 1 under the interpreter).
    Defaults: the best of `benchmarks/code_predictor.py --sweep` on the H200 (perf-notes #35)."""

    block_m: int = 16
    block_n: int = 32
    block_k: int = 256
    warps: int = 4


class PersistentCodePredictor(CodePredictorBuffers):
    """The code predictor of a FusedStack-ready model as one Triton kernel launch per frame, over
    CodePredictorBuffers' weights and activations. `__call__(first, params, seed, step)` returns
    the codes [B, 15]."""

    def __init__(self, stack, heads: list[torch.Tensor], embeddings: list[torch.Tensor], max_streams: int,
                 k_cache: torch.Tensor, v_cache: torch.Tensor, programs: int | None = None,
                 tiles: CodePredictorTiles = CodePredictorTiles()):  # fmt: skip
        super().__init__(stack, heads, embeddings, max_streams, k_cache, v_cache, programs)
        self.tiles = tiles

    def __call__(self, first: torch.Tensor, params: RowParams, seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """first [2B, H]: each stream's projected talker hidden state and code0 embedding, interleaved."""
        b = first.shape[0] // 2
        if b > self.max_streams:
            raise ValueError(f"the persistent code predictor holds at most {self.max_streams} streams, got {b}")
        s, t = self.stack, self.tiles
        block_v = triton.next_power_of_2(self.vocab)
        ways, passes = topk_search(block_v)  # the layer kernels' sampler's search, so the same codes
        self.d[: 2 * b].copy_(first)
        self.counter.zero_()
        _code_predictor_kernel[(self.programs,)](
            self.d, self.ra, self.rb, self.qkv, self.attn, self.o, self.act, self.logits, self.codes, self.counter,
            self.ln1, self.wqkv, self.q_norm, self.k_norm, self.wo, self.ln2, self.wgu, self.wdown, s.norm,
            self.heads, self.embeddings, s.cos, s.sin, self.k_cache, self.v_cache,
            params.do_sample, params.temperature, params.top_k, params.top_p, seed, step,
            b, self.k_cache.stride(0), s.eps, s.scale,
            H=self.hidden, I=self.inter, HQ=s.heads, HKV=s.kv_heads, D=s.head_dim, V=self.vocab,
            LAYERS=len(s.layers), STEPS=self.steps, CTX=self.steps + 1,
            G_PAD=max(1, triton.next_power_of_2(s.heads // s.kv_heads)),
            BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=min(t.block_k, triton.next_power_of_2(self.hidden)),
            BLOCK_V=block_v, IEEE=self.d.dtype == torch.float32, TOPK_WAYS=ways, TOPK_PASSES=passes,
            num_warps=t.warps,
        )  # fmt: skip
        return self.codes[:b]
