// The code predictor's 15 steps as one persistent CUDA kernel (issue 4, perf-notes #43, #45).
//
// The same phases as kernels/triton_code_predictor.py (read that file's docstring first): per step
// and layer qkv (the residual sum and RMSNorm done by every CTA for its rows), attend, o, gate/up
// with SwiGLU, down; then head and sample. A grid barrier separates dependent phases. What differs
// is how weights arrive: a producer warp in every CTA streams the CTA's weight rows of every phase,
// in order, into a shared-memory ring with the copy engine (cp.async.bulk completing on mbarriers).
// It runs ahead of the barriers, whose releases do not wait for it (the wall the Triton kernel hit,
// perf-notes #37-#40). `benchmarks/cuda/phase_chain.cu` measured this skeleton (#43).
//
// Compiled at run time by NVRTC (cuda_code_predictor.py prepends the macros below; this folder is the
// include path, for sm90.cuh; no CUDA header needed):
//   ACT_BF16        1: weights and activations bf16; 0: fp32
//   CONSUMER_WARPS  warps that compute (one more streams the weights)
//   MAX_ROWS        activation rows at most (2 per stream at the first step)
//   HIDDEN INTER HEADS KV_HEADS HEAD_DIM VOCAB LAYERS STEPS CTX K_MAX (the widest GEMM input)
//   SYNC_LL         0: a grid barrier between dependent phases; 1: none, every activation that
//                   crosses CTAs a 64-bit {value, tag} word its readers poll (see "activations")
//   TRACE           1: every CTA stamps its clock five times a phase (see the kernel), for
//                   benchmarks/code_predictor.py; 0 (served): no stamps
// Experiments: benchmarks/code_predictor.py --variants NAME=VALUE builds with extra macros, so that
// a switch (`#ifdef NAME`) can be A/B'd in one process; none is left in (perf-notes #51).
// Rounding follows the layer kernels (triton_ops): every stored activation is rounded to the
// activation dtype where they store one, products accumulate in fp32.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

constexpr int CONSUMERS = CONSUMER_WARPS * 32;
constexpr int PHASES = 1 + STEPS * (5 * LAYERS + 2);  // the start, 5 a layer, head and sampling a step
constexpr int STAMPS = 5;                              // a phase's stamps in the trace (TRACE)
constexpr int TRACE_WORDS = 2 + STAMPS * PHASES;       // a CTA's share of the trace
constexpr int QKV_WIDTH = (HEADS + 2 * KV_HEADS) * HEAD_DIM;
constexpr int GROUP = HEADS / KV_HEADS;

#if ACT_BF16
typedef u16 act_t;
__device__ __forceinline__ float to_f(act_t v) { return __uint_as_float((u32)v << 16); }
#else
typedef float act_t;
__device__ __forceinline__ float to_f(act_t v) { return v; }
__device__ __forceinline__ act_t from_f(float f) { return f; }
#endif
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
constexpr i64 I64_MAX = 0x7fffffffffffffffLL, I64_MIN = -0x7fffffffffffffffLL - 1;

// ---- PTX: loads through L2, mbarriers, bulk copies, the grid barrier -------------------------------
// (tests/cuda_emulation/emulate.h has CPU stand-ins for this section: the CPU test runs the kernel)
#ifndef CADENCE_EMULATE
#define DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]

#if ACT_BF16
// Round to nearest even in one instruction, as PyTorch's and Triton's casts (the bit arithmetic
// it replaced cost ~6 instructions a value: -0.05 ms a frame at batch 1, perf-notes #51).
__device__ __forceinline__ act_t from_f(float f) {
  act_t v;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f));
  return v;
}
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {  // two roundings, one instruction
  u32 v;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));
  return v;
}
#endif

__device__ __forceinline__ act_t load_cg(const act_t* p) {  // through L2: written by other CTAs
  act_t v;
#if ACT_BF16
  asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p));
#else
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
#endif
  return v;
}

__device__ __forceinline__ uint4 load16_cg(const void* p) {  // 16 bytes through L2
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 load16_volatile(const void* p) {  // two 64-bit words, each read whole
  u64 a, b;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
  return make_uint4((u32)a, (u32)(a >> 32), (u32)b, (u32)(b >> 32));
}

#include "sm90.cuh"  // mbarriers and bulk copies

__device__ __forceinline__ void smem_add(u32* p, u32 v) {  // an atomic add to shared memory
  asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(smem_addr(p)), "r"(v) : "memory");
}

__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"r"(CONSUMERS) : "memory"); }
__device__ __forceinline__ u64 load_word(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_word(u64* p, u64 v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void poll_pause() {}
__device__ __forceinline__ u64 sm_clock() {  // this SM's cycle counter
  u64 t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ u64 global_ns() {  // the GPU's global timer, in ns (coarser)
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// Every CTA arrives (one release add after the CTA's stores) and waits for the others.
__device__ __forceinline__ void grid_sync(u32* counter, u32& passed) {
  consumers_sync();
  passed += gridDim.x;
  if (threadIdx.x == 0) {
    // the last to arrive learns it from its own add: no poll's round trip (perf-notes #51)
    u32 seen;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(seen) : "l"(counter) : "memory");
    ++seen;  // the count with this CTA's arrival
    while (seen < passed) asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
  }
  consumers_sync();
}
#endif  // CADENCE_EMULATE
__device__ __forceinline__ float round_act(float f) { return to_f(from_f(f)); }

#include "activations.cuh"  // slot_t, get / put, phase_end: plain arrays or SYNC_LL's tagged words

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- the GEMM phases: which weight rows each CTA streams, and how ----------------------------------

enum Gemm { QKV = 0, OUT = 1, GATE_UP = 2, DOWN = 3, HEAD = 4 };

struct Weights {
  const act_t *wqkv, *wo, *wgu, *wdown, *heads;
};

struct GemmShape {
  const act_t* w;  // [n (x2: gate rows then up rows for SWIGLU), k]
  int n, k;        // outputs, inputs
  bool swiglu;
};

__device__ __forceinline__ GemmShape gemm_shape(const Weights& W, int kind, int layer, int step) {
  switch (kind) {
    case QKV: return {W.wqkv + (size_t)layer * QKV_WIDTH * HIDDEN, QKV_WIDTH, HIDDEN, false};
    case OUT: return {W.wo + (size_t)layer * HIDDEN * HEADS * HEAD_DIM, HIDDEN, HEADS * HEAD_DIM, false};
    case GATE_UP: return {W.wgu + (size_t)layer * 2 * INTER * HIDDEN, INTER, HIDDEN, true};
    case DOWN: return {W.wdown + (size_t)layer * HIDDEN * INTER, HIDDEN, INTER, false};
    default: return {W.heads + (size_t)step * VOCAB * HIDDEN, VOCAB, HIDDEN, false};
  }
}

// This CTA's outputs [first, last) of a GEMM and how many go in one ring stage.
struct Slab {
  int first, last, per_chunk;
};
__device__ __forceinline__ Slab slab_of(const GemmShape& g, int stage_bytes) {
  const int per_cta = (g.n + gridDim.x - 1) / gridDim.x;
  const int first = min((int)blockIdx.x * per_cta, g.n);
  const int row_bytes = g.k * (int)sizeof(act_t) * (g.swiglu ? 2 : 1);
  return {first, min(first + per_cta, g.n), max(1, stage_bytes / row_bytes)};
}

// The ring's producer: this CTA's rows of every GEMM of the frame, in the consumers' order.
__device__ void produce(const Weights& W, unsigned char* ring, u64* full, u64* empty, int stages, int stage_bytes) {
  int it = 0;
  for (int step = 0; step < STEPS; ++step) {
    for (int layer = 0; layer <= LAYERS; ++layer) {
      for (int kind = QKV; kind <= DOWN; ++kind) {
        if (layer == LAYERS && kind != QKV) break;  // after the layers: the head alone
        const GemmShape g = gemm_shape(W, layer == LAYERS ? HEAD : kind, layer, step);
        const Slab s = slab_of(g, stage_bytes);
        for (int o = s.first; o < s.last; o += s.per_chunk, ++it) {
          const int stage = it % stages, outs = min(s.per_chunk, s.last - o);
          mbar_wait(&empty[stage], ((it / stages) & 1) ^ 1);  // a fresh barrier passes parity 1 at once
          const u32 part = (u32)outs * g.k * sizeof(act_t);
          unsigned char* dst = ring + (size_t)stage * stage_bytes;
          mbar_expect_tx(&full[stage], g.swiglu ? 2 * part : part);
          // weights are read once a frame: evict-first, so that they do not push activations and
          // the attention cache (read again within microseconds) out of L2
          bulk_load_once(dst, g.w + (size_t)o * g.k, part, &full[stage]);
          if (g.swiglu) bulk_load_once(dst + part, g.w + (size_t)(g.n + o) * g.k, part, &full[stage]);
        }
      }
    }
  }
}

// The dot products of UNITS weight rows (w0, and w1 where UNITS is 2: SwiGLU's gate and up, or two
// output rows) with ROWS activation rows in shared memory (floats, row stride K_MAX), summed over
// the warp; acc[u][r] on every lane. Two units share each activation load and give the warp two
// independent chains of FMAs and shuffles: the dots are bound by issue and latency, not bandwidth.
template <int UNITS, int ROWS>
__device__ __forceinline__ void unit_dots(const act_t* w0, const act_t* w1, const float* xs, int k, int lane,
                                          float (&acc)[2][ROWS]) {
  constexpr int VEC = 16 / sizeof(act_t);  // weights per 16-byte load
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[0][r] = acc[1][r] = 0.f;
#pragma unroll 1  // smaller code, and faster than nvcc's own unrolling or 4 (perf-notes #51)
  for (int i = lane * VEC; i < k; i += 32 * VEC) {
    float wa[VEC], wb[VEC];
    const uint4 va = *reinterpret_cast<const uint4*>(w0 + i);
    const act_t* ha = reinterpret_cast<const act_t*>(&va);
#pragma unroll
    for (int e = 0; e < VEC; ++e) wa[e] = to_f(ha[e]);
    if (UNITS == 2) {
      const uint4 vb = *reinterpret_cast<const uint4*>(w1 + i);
      const act_t* hb = reinterpret_cast<const act_t*>(&vb);
#pragma unroll
      for (int e = 0; e < VEC; ++e) wb[e] = to_f(hb[e]);
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float* x = xs + r * K_MAX + i;
#pragma unroll
      for (int e = 0; e < VEC; e += 4) {
        const float4 xv = *reinterpret_cast<const float4*>(x + e);
        acc[0][r] += wa[e] * xv.x + wa[e + 1] * xv.y + wa[e + 2] * xv.z + wa[e + 3] * xv.w;
        if (UNITS == 2) acc[1][r] += wb[e] * xv.x + wb[e + 1] * xv.y + wb[e + 2] * xv.z + wb[e + 3] * xv.w;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    acc[0][r] = warp_sum(acc[0][r]);
    if (UNITS == 2) acc[1][r] = warp_sum(acc[1][r]);
  }
}

struct Scratch {
  float* xs;       // [MAX_ROWS, K_MAX]: the phase's input rows
  float* partial;  // [CONSUMER_WARPS, MAX_ROWS]
  float* inv;      // [MAX_ROWS]
};

// The activation rows of a GEMM into shared memory: rows `first + i * stride` of x (+ r, rounded as
// the unfused add is; each written by the phase tagged x_tag / r_tag), their residual sum stored
// (tagged `tag`) where `sum_out`, RMS-normalised with weight `norm_w` where given (rounded as the
// rms_norm kernel does). Every CTA computes the whole sum; CTA 0 stores it, in 16-byte stores
// (shared over all CTAs it was 0.04 ms a frame slower: every CTA's barrier release then waits for
// stores of its own, perf-notes #51). All rows at once in 16-byte packs, IN_FLIGHT of them per thread and
// array issued before the first is used: one L2 round trip for a phase's rows, not one per row.
constexpr int IN_FLIGHT = 4;
__device__ __noinline__ void load_rows(const Scratch& s, const slot_t* x, u32 x_tag, const slot_t* r, u32 r_tag,
                                       slot_t* sum_out, u32 tag, const act_t* norm_w, int rows, int first, int stride,
                                       int k, float eps, u64* mark) {  // the trace's stamp: rows in, or null
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int per_row = k / PACK, packs = rows * per_row;
  // The norm's weights for this thread's columns (tid + j * CONSUMERS): loaded first, so that
  // their round trip overlaps the rows' (the norms are all over HIDDEN columns).
  constexpr int NORM_COLUMNS = (HIDDEN + CONSUMERS - 1) / CONSUMERS;
  float nw[NORM_COLUMNS];
  if (norm_w)
#pragma unroll
    for (int j = 0; j < NORM_COLUMNS; ++j) nw[j] = tid + j * CONSUMERS < k ? to_f(norm_w[tid + j * CONSUMERS]) : 0.f;
  for (int base = tid; base < packs; base += IN_FLIGHT * CONSUMERS) {
    Pack xp[IN_FLIGHT], rp[IN_FLIGHT];
#pragma unroll
    for (int j = 0; j < IN_FLIGHT; ++j) {
      const int p = base + j * CONSUMERS;
      if (p < packs) {
        const size_t at = (size_t)(first + p / per_row * stride) * k + p % per_row * PACK;
        xp[j] = load_pack(x + at);
        if (r) rp[j] = load_pack(r + at);
      }
    }
#pragma unroll
    for (int j = 0; j < IN_FLIGHT; ++j) {
      const int p = base + j * CONSUMERS;
      if (p < packs) {
        const int i = p / per_row, c = p % per_row * PACK;
        const size_t at = (size_t)(first + i * stride) * k + c;
        float v[PACK];
        wait_pack(x + at, xp[j], x_tag, v);
        if (r) {
          float w[PACK];
          wait_pack(r + at, rp[j], r_tag, w);
#pragma unroll
          for (int e = 0; e < PACK; ++e) v[e] = round_act(v[e] + w[e]);
        }
        if (sum_out && blockIdx.x == 0) store_pack(sum_out + at, v, tag);
        float2* dst = reinterpret_cast<float2*>(s.xs + i * K_MAX + c);  // PACK is even (2, 4 or 8)
#pragma unroll
        for (int e = 0; e < PACK; e += 2) dst[e / 2] = make_float2(v[e], v[e + 1]);
      }
    }
  }
  consumers_sync();
  if (mark) *mark = sm_clock();
  if (!norm_w) return;
  for (int i = 0; i < rows; ++i) {  // each row's sum of squares: every thread a part of it
    float sq = 0.f;
    for (int c = tid; c < k; c += CONSUMERS) sq += s.xs[i * K_MAX + c] * s.xs[i * K_MAX + c];
    sq = warp_sum(sq);
    if (lane == 0) s.partial[warp * MAX_ROWS + i] = sq;
  }
  consumers_sync();
  if (tid < rows) {  // each row's inverse RMS
    float total = 0.f;
    for (int w = 0; w < CONSUMER_WARPS; ++w) total += s.partial[w * MAX_ROWS + tid];
    s.inv[tid] = 1.f / sqrtf(total / k + eps);
  }
  consumers_sync();
#pragma unroll
  for (int j = 0; j < NORM_COLUMNS; ++j) {
    const int c = tid + j * CONSUMERS;
    if (c < k)
      for (int i = 0; i < rows; ++i) {
        const float normed = round_act(s.xs[i * K_MAX + c] * s.inv[i]);
        s.xs[i * K_MAX + c] = round_act(nw[j] * normed);
      }
  }
  consumers_sync();
}

// Whether this CTA has outputs in a GEMM (one without reads nothing: see "activations").
__device__ __forceinline__ bool owns(const GemmShape& g, int stage_bytes) {
  const Slab sl = slab_of(g, stage_bytes);
  return sl.first < sl.last;
}

// One GEMM phase's dots for this CTA: out[i, n] for its ROWS rows and its outputs (tagged `tag`),
// the weights from the ring. `mark` (the trace's, or null): the clock once the first chunk is in.
template <int ROWS>
__device__ __noinline__ void gemm_rows(const GemmShape& g, const Scratch& s, slot_t* out, u32 tag, unsigned char* ring,
                                       u64* full, u64* empty, int stages, int stage_bytes, int& it, u64* mark) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Slab sl = slab_of(g, stage_bytes);
  for (int o = sl.first; o < sl.last; o += sl.per_chunk, ++it) {
    const int stage = it % stages, outs = min(sl.per_chunk, sl.last - o);
    const act_t* chunk = reinterpret_cast<const act_t*>(ring + (size_t)stage * stage_bytes);
    mbar_wait(&full[stage], (it / stages) & 1);
    if (mark && o == sl.first) *mark = sm_clock();
    for (int u = warp; u < outs; u += CONSUMER_WARPS) {
      float acc[2][ROWS];
      // two output rows at once where the chunk has a second for this warp (qkv's and the heads'
      // chunks hold 16 rows: two a warp; -0.06 ms a frame at batch 1, -0.21 at 4, perf-notes #51)
      const int pair = !g.swiglu && u + CONSUMER_WARPS < outs ? u + CONSUMER_WARPS : -1;
      if (g.swiglu || pair >= 0) {
        const act_t* second = chunk + (size_t)(g.swiglu ? outs + u : pair) * g.k;
        unit_dots<2, ROWS>(chunk + (size_t)u * g.k, second, s.xs, g.k, lane, acc);
        if (lane == 0)
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            if (g.swiglu) {  // rounded where linear_swiglu rounds: gate, up, silu
              const float gate = round_act(acc[0][r]), up = round_act(acc[1][r]);
              const float silu = round_act(gate / (1.f + __expf(-gate)));
              put(out + (size_t)r * g.n + o + u, silu * up, tag);
            } else {
              put(out + (size_t)r * g.n + o + u, acc[0][r], tag);
              put(out + (size_t)r * g.n + o + pair, acc[1][r], tag);
            }
          }
        if (pair >= 0) u += CONSUMER_WARPS;
      } else {
        unit_dots<1, ROWS>(chunk + (size_t)u * g.k, nullptr, s.xs, g.k, lane, acc);
        if (lane == 0)
#pragma unroll
          for (int r = 0; r < ROWS; ++r) put(out + (size_t)r * g.n + o + u, acc[0][r], tag);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[stage]);
  }
}

// gemm_rows for a run-time row count (1..MAX_ROWS): an instance per count, so that every loop over
// the rows is exact. A loop to MAX_ROWS under `r < rows` issued every row's instructions, predicated
// off, and the dots are bound by instruction issue (perf-notes #48).
template <int ROWS = MAX_ROWS>
__device__ void gemm(const GemmShape& g, const Scratch& s, slot_t* out, u32 tag, int rows, unsigned char* ring,
                     u64* full, u64* empty, int stages, int stage_bytes, int& it, u64* mark) {
  if constexpr (ROWS > 1) {
    if (rows < ROWS) return gemm<ROWS - 1>(g, s, out, tag, rows, ring, full, empty, stages, stage_bytes, it, mark);
  }
  gemm_rows<ROWS>(g, s, out, tag, ring, full, empty, stages, stage_bytes, it, mark);
}

// ---- attention: per (stream, kv head), QK-norm + RoPE, the cache write, GROUP query heads ----------

// QK-norm then RoPE of element d of one head, computed by a team of HEAD_DIM consecutive threads
// (a power of two), rounded as the qk_norm_rope_store kernel rounds. In two halves so that a thread
// issues every load it needs (two heads, the cache) before it waits for any: rope_loads issues the
// element, its rotation partner, the norm weights and the RoPE tables; rope_finish waits and
// computes. `red` [CONSUMER_WARPS] is scratch for the norm's sum. Every consumer thread calls
// rope_finish (it holds two CTA barriers).
struct RopeLoads {
  slot_t x, partner;
  float w, w_partner, cs, sn;
};
__device__ __forceinline__ RopeLoads rope_loads(const slot_t* head, const act_t* w, const act_t* cos_t,
                                                const act_t* sin_t, int pos, int d) {
  constexpr int HALF = HEAD_DIM / 2;
  const int pd = d < HALF ? d + HALF : d - HALF;
  return {load_slot(head + d), load_slot(head + pd), to_f(w[d]), to_f(w[pd]), to_f(cos_t[pos * HEAD_DIM + d]),
          to_f(sin_t[pos * HEAD_DIM + d])};
}
__device__ float rope_finish(const RopeLoads& l, const slot_t* head, u32 tag, int d, float* red, float eps) {
  constexpr int HALF = HEAD_DIM / 2;
  const int pd = d < HALF ? d + HALF : d - HALF;
  const float x = to_f(wait_slot(head + d, l.x, tag)), xp = to_f(wait_slot(head + pd, l.partner, tag));
  float sq = x * x;
  if (HEAD_DIM <= 32) {  // a team within a warp: xor offsets below HEAD_DIM stay inside it
    for (int o = HEAD_DIM / 2; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    consumers_sync();
  } else {  // a team of whole warps
    sq = warp_sum(sq);
    const int warp = threadIdx.x / 32, team_warp0 = (threadIdx.x / HEAD_DIM) * (HEAD_DIM / 32);
    if (threadIdx.x % 32 == 0) red[warp] = sq;
    consumers_sync();
    sq = 0.f;
    for (int i = 0; i < HEAD_DIM / 32; ++i) sq += red[team_warp0 + i];
  }
  consumers_sync();  // `red` is free again
  const float inv = 1.f / sqrtf(sq / HEAD_DIM + eps);
  const float normed = round_act(l.w * round_act(x * inv));
  const float partner = round_act(l.w_partner * round_act(xp * inv));
  const float rotated = d < HALF ? -partner : partner;
  const float a = round_act(normed * l.cs);
  const float b = round_act(round_act(rotated) * l.sn);
  return round_act(a + b);
}

// One (stream, kv head) per CTA: QK-norm + RoPE of the row's key and GROUP query heads, the key and
// value into the cache, scores, softmax, values. The cache's earlier positions were written by this
// CTA (an item always falls to the same CTA), so it reads them with plain loads, issued with the
// row's own before any wait: one memory round trip per row, not one per dependent step. This
// row's key and value come from shared memory.
__device__ __noinline__ void attend(const slot_t* qkv, u32 qkv_tag, slot_t* attn, u32 tag, act_t* kc, act_t* vc,
                                    const act_t* q_norm, const act_t* k_norm, const act_t* cos_t, const act_t* sin_t,
                                    int streams, int rows_per, int pos0, float eps, float scale, float* scratch,
                                    u64* mark) {  // the trace's stamp once the last row's q is ready, or null
  constexpr int PAIRS = (GROUP * CTX + CONSUMER_WARPS - 1) / CONSUMER_WARPS;  // (query head, position) per warp
  constexpr int PER_LANE = (HEAD_DIM + 31) / 32;
  float* q = scratch;                   // [GROUP, HEAD_DIM]
  float* key = q + GROUP * HEAD_DIM;    // [HEAD_DIM]: this row's key and value
  float* value = key + HEAD_DIM;        // [HEAD_DIM]
  float* prob = value + HEAD_DIM;       // [GROUP, CTX]
  float* red = prob + GROUP * CTX;      // [CONSUMER_WARPS]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = tid / HEAD_DIM, d = tid % HEAD_DIM;  // GROUP * HEAD_DIM <= CONSUMERS (checked by the host)
  for (int item = blockIdx.x; item < streams * KV_HEADS; item += gridDim.x) {
    const int n = item / KV_HEADS, kvh = item % KV_HEADS;
    auto cache_at = [&](int t) { return ((size_t)(n * CTX + t) * KV_HEADS + kvh) * HEAD_DIM; };
    for (int i = 0; i < rows_per; ++i) {
      const int pos = pos0 + i;
      const slot_t* row = qkv + (size_t)(n * rows_per + i) * QKV_WIDTH;
      const slot_t* k_head = row + (HEADS + kvh) * HEAD_DIM;
      const slot_t* v_head = row + (HEADS + KV_HEADS + kvh) * HEAD_DIM;
      const slot_t* q_head = row + (kvh * GROUP + min(g, GROUP - 1)) * HEAD_DIM;  // idle teams: any head
      // every load of this row first: the key, the query head, the value, the cache's earlier positions
      const RopeLoads kl = rope_loads(k_head, k_norm, cos_t, sin_t, pos, d);
      const RopeLoads ql = rope_loads(q_head, q_norm, cos_t, sin_t, pos, d);
      const slot_t v_raw = load_slot(v_head + d);
      float k_old[PAIRS][PER_LANE], v_old[CTX];
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {
        const int t = (warp + j * CONSUMER_WARPS) % CTX;
#pragma unroll
        for (int e = 0; e < PER_LANE; ++e)
          k_old[j][e] = t < pos && lane + 32 * e < HEAD_DIM ? to_f(kc[cache_at(t) + lane + 32 * e]) : 0.f;
      }
#pragma unroll
      for (int t = 0; t < CTX; ++t) v_old[t] = t < pos && g < GROUP ? to_f(vc[cache_at(t) + d]) : 0.f;
      // this row's key (the first team) and value into the cache and shared memory, its query heads
      const float k_new = rope_finish(kl, k_head, qkv_tag, d, red, eps);
      if (g == 0) {
        const act_t v_new = wait_slot(v_head + d, v_raw, qkv_tag);
        kc[cache_at(pos) + d] = from_f(k_new), vc[cache_at(pos) + d] = v_new;
        key[d] = round_act(k_new), value[d] = to_f(v_new);
      }
      const float q_new = rope_finish(ql, q_head, qkv_tag, d, red, eps);  // every team meets its barriers
      if (g < GROUP) q[g * HEAD_DIM + d] = q_new;
      consumers_sync();
      if (mark && i == rows_per - 1) *mark = sm_clock();
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {  // scores
        const int p = warp + j * CONSUMER_WARPS, qg = p / CTX, t = p % CTX;
        float s = neg_inf();
        if (p < GROUP * CTX && t <= pos) {
          float dot = 0.f;
#pragma unroll
          for (int e = 0; e < PER_LANE; ++e) {
            const int c = lane + 32 * e;
            if (c < HEAD_DIM) dot += q[qg * HEAD_DIM + c] * (t < pos ? k_old[j][e] : key[c]);
          }
          s = warp_sum(dot) * scale;
        }
        if (lane == 0 && p < GROUP * CTX) prob[p] = s;
      }
      consumers_sync();
      if (tid < GROUP) {  // softmax over positions 0..pos; probabilities rounded to the cache's dtype
        float m = neg_inf(), total = 0.f;
        for (int t = 0; t <= pos; ++t) m = fmaxf(m, prob[tid * CTX + t]);
        for (int t = 0; t < CTX; ++t) {
          const float e = t <= pos ? __expf(prob[tid * CTX + t] - m) : 0.f;
          total += e;
          prob[tid * CTX + t] = round_act(e);
        }
        red[tid] = total;
      }
      consumers_sync();
      if (g < GROUP) {
        float acc = 0.f;
#pragma unroll
        for (int t = 0; t < CTX; ++t)
          if (t <= pos) acc += prob[g * CTX + t] * (t < pos ? v_old[t] : value[d]);
        put(attn + (size_t)(n * rows_per + i) * HEADS * HEAD_DIM + (kvh * GROUP + g) * HEAD_DIM + d, acc / red[g], tag);
      }
      consumers_sync();
    }
  }
}

#include "sampling.cuh"  // sample_row: one stream's code, as sample_tokens picks it

// ---- the kernel ---------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__((CONSUMER_WARPS + 1) * 32, 1)
    code_predictor_kernel(slot_t* d, slot_t* ra, slot_t* rb, slot_t* qkv, slot_t* attn, slot_t* o, slot_t* act,
                          slot_t* logits, i64* codes, u32* counter, const u32* epoch, u64* trace, const act_t* ln1,
                          const act_t* wqkv, const act_t* q_norm, const act_t* k_norm, const act_t* wo,
                          const act_t* ln2, const act_t* wgu, const act_t* wdown, const act_t* final_norm,
                          const act_t* heads, const act_t* emb, const act_t* cos_t, const act_t* sin_t, act_t* k_cache,
                          act_t* v_cache, const bool* do_sample, const float* temperature, const i64* top_k,
                          const float* top_p, const i64* seed, const i64* frame, int streams, int cache_stride,
                          double eps_in, double scale_in, int stages, int stage_bytes) {
  DYNAMIC_SHARED(smem);
  unsigned char* ring = smem;
  Scratch s;
  s.xs = reinterpret_cast<float*>(smem + (size_t)stages * stage_bytes);
  s.partial = s.xs + MAX_ROWS * K_MAX;
  s.inv = s.partial + CONSUMER_WARPS * MAX_ROWS;
  double* red = reinterpret_cast<double*>(s.inv + MAX_ROWS + (MAX_ROWS % 2));  // 8-byte aligned
  u64* full = reinterpret_cast<u64*>(red + 2 * CONSUMER_WARPS);
  u64* empty = full + stages;
  const Weights W{wqkv, wo, wgu, wdown, heads};
  const float eps = (float)eps_in, scale = (float)scale_in;

  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) mbar_init(&full[i], 1), mbar_init(&empty[i], CONSUMER_WARPS);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x / 32 == CONSUMER_WARPS) {
    if (threadIdx.x % 32 == 0) produce(W, ring, full, empty, stages, stage_bytes);
    return;
  }

  u32 passed = 0;  // barrier arrivals expected so far
  int it = 0;      // ring chunks consumed
  // Each phase's outputs carry its tag (SYNC_LL; unused otherwise): the frame's epoch * 1024 plus
  // the phase's index (405 phases a frame at most); the host wrote the first input rows with `tag`.
  u32 tag = *epoch * 1024u;
  const u32 tag0 = tag;
  // Where the time goes (TRACE; benchmarks/code_predictor.py prints it): every CTA's cycle count
  // at five points of every phase, trace[cta * TRACE_WORDS + 2 + STAMPS * phase + j]: j = 0 its
  // input rows in shared memory (attention: its rows loaded, QK-normed and roped; sampling: the
  // code known), 1 the rows normalised, 2 its first weight chunk in the ring (1 and 2 are 0's time
  // where a phase has no norm or no weights), 3 every warp's work done, 4 past the phase's end
  // (phase 0: the start). 0-2 are 0 in a phase where the CTA had nothing to do. The global timer
  // at the start and the end (words 0, 1) turns cycles into ns.
  const bool stamps = TRACE && threadIdx.x == 0;
  u64* const mine = trace + (size_t)blockIdx.x * TRACE_WORDS;
  auto at = [&](int j) { return &mine[2 + STAMPS * (tag - tag0) + j]; };
  auto stamp = [&](int j) {
    if (stamps) *at(j) = sm_clock();
  };
  auto begin_phase = [&] {  // a new tag: idle until stamped
    ++tag;
    if (stamps) *at(0) = *at(1) = *at(2) = 0;
  };
  auto inputs_done = [&] {  // phases without a norm or weights: 0, 1 and 2 alike
    if (stamps) *at(0) = *at(1) = *at(2) = sm_clock();
  };
  if (stamps) mine[0] = global_ns();
  stamp(4);
  auto end_phase = [&] {
    if (TRACE) consumers_sync();  // the CTA's work, not only the stamping warp's
    stamp(3);
    phase_end(counter, passed);
    stamp(4);
  };
  u32 d_tag = tag, ra_tag = 0, rb_tag = 0, qkv_tag = 0, attn_tag = 0, o_tag = 0, act_tag = 0, logits_tag = 0;
  // One GEMM phase: this CTA's input rows (x + r, RMS-normalised by norm_w where given; their sum
  // stored to sum_out by CTA 0), its outputs to `out`, then the phase's end. Returns its tag.
  auto gemm_phase = [&](int kind, int layer, int step, const slot_t* x, u32 x_tag, const slot_t* r, u32 r_tag,
                        slot_t* sum_out, const act_t* norm_w, int rows, int first, int stride, slot_t* out) {
    const GemmShape g = gemm_shape(W, kind, layer, step);
    begin_phase();
    if (owns(g, stage_bytes)) {
      load_rows(s, x, x_tag, r, r_tag, sum_out, tag, norm_w, rows, first, stride, g.k, eps, stamps ? at(0) : nullptr);
      stamp(1);
      gemm(g, s, out, tag, rows, ring, full, empty, stages, stage_bytes, it, stamps ? at(2) : nullptr);
    }
    end_phase();
    return tag;
  };
  for (int step = 0; step < STEPS; ++step) {
    const int rows_per = step == 0 ? 2 : 1, rows = streams * rows_per, pos0 = step == 0 ? 0 : step + 1;
    for (int layer = 0; layer < LAYERS; ++layer) {
      // d (+ ra) -> rb, RMSNorm -> QKV. The first layer has no residual yet.
      qkv_tag = rb_tag = gemm_phase(QKV, layer, step, d, d_tag, layer > 0 ? ra : nullptr, ra_tag, rb,
                                    ln1 + layer * HIDDEN, rows, 0, 1, qkv);
      begin_phase();
      attend(qkv, qkv_tag, attn, tag, k_cache + (size_t)layer * cache_stride, v_cache + (size_t)layer * cache_stride,
             q_norm + layer * HEAD_DIM, k_norm + layer * HEAD_DIM, cos_t, sin_t, streams, rows_per, pos0, eps, scale,
             s.xs, stamps ? at(0) : nullptr);  // stamp 0: loads and norms done
      if (stamps) *at(1) = *at(2) = *at(0);
      attn_tag = tag;
      end_phase();
      o_tag = gemm_phase(OUT, layer, step, attn, attn_tag, nullptr, 0, nullptr, nullptr, rows, 0, 1, o);
      // o + rb -> ra, RMSNorm -> gate/up -> SwiGLU
      act_tag = ra_tag =
          gemm_phase(GATE_UP, layer, step, o, o_tag, rb, rb_tag, ra, ln2 + layer * HIDDEN, rows, 0, 1, act);
      d_tag = gemm_phase(DOWN, layer, step, act, act_tag, nullptr, 0, nullptr, nullptr, rows, 0, 1, d);
    }
    // The final norm of each stream's last row (d + ra), then head `step`.
    logits_tag = gemm_phase(HEAD, 0, step, d, d_tag, ra, ra_tag, nullptr, final_norm, streams, rows_per - 1, rows_per,
                            logits);
    const u32 codebook_key = (u32)(step + 1) * 0x1E3779B9u;  // sample_tokens' key of codebook step + 1
    begin_phase();
    for (int n = blockIdx.x; n < streams; n += gridDim.x) {
      const int code = sample_row(logits, logits_tag, n, do_sample, temperature, top_k, top_p, seed, frame,
                                  codebook_key, red, reinterpret_cast<u32*>(s.xs));  // xs: free until the next phase
      inputs_done();  // the code known; then the next input's embedding
      if (threadIdx.x == 0) codes[n * STEPS + step] = code;
      if (step + 1 < STEPS)  // the next step's input: codebook step + 1's embedding of the code
        for (int h = threadIdx.x; h < HIDDEN; h += CONSUMERS)
          put_raw(d + (size_t)n * HIDDEN + h, emb[((size_t)step * VOCAB + code) * HIDDEN + h], tag);
    }
    d_tag = tag;
    end_phase();
  }
  if (stamps) mine[1] = global_ns();
}
