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
// This file holds the types, the PTX helpers and the kernel; its parts are beside it, included in
// this order: sm90.cuh (mbarriers, bulk copies), activations.cuh (buffers that cross CTAs),
// gemm.cuh (the weight ring, a phase's input rows, the dots), attention.cuh, sampling.cuh.
// Compiled at run time by NVRTC (cuda_code_predictor.py prepends the macros below; this folder is
// the include path; no CUDA header needed):
//   ACT_BF16        1: weights and activations bf16; 0: fp32
//   CONSUMER_WARPS  warps that compute (one more streams the weights)
//   MAX_ROWS        activation rows at most (2 per stream at the first step)
//   HIDDEN INTER HEADS KV_HEADS HEAD_DIM VOCAB LAYERS STEPS CTX K_MAX (the widest GEMM input)
//   SYNC_LL         0: a grid barrier between dependent phases; 1: none, every activation that
//                   crosses CTAs a 64-bit {value, tag} word its readers poll (see "activations")
//   TRACE           1: every CTA stamps its clock five times a phase (see the kernel), for
//                   benchmarks/code_predictor.py; 0 (served): no stamps
// Experiments: benchmarks/code_predictor.py --variants NAME=VALUE builds with extra macros, so that
// a switch (`#ifdef NAME`) can be A/B'd in one process; none is left in (perf-notes #51, #56, #57).
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

#include "gemm.cuh"       // the weight ring, the phase's input rows, the dots
#include "attention.cuh"  // one (stream, kv head) per CTA: QK-norm, RoPE, the cache, softmax
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
  // xs: the phase's input rows, or the sampler's bins (SAMPLER_WORDS), whichever is larger
  constexpr int XS_FLOATS = MAX_ROWS * K_MAX > SAMPLER_WORDS ? MAX_ROWS * K_MAX : SAMPLER_WORDS;
  s.partial = s.xs + XS_FLOATS;
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
  u32 d_tag = tag, ra_tag = 0, rb_tag = 0, o_tag = 0, act_tag = 0, logits_tag = 0;
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
      rb_tag = gemm_phase(QKV, layer, step, d, d_tag, layer > 0 ? ra : nullptr, ra_tag, rb, ln1 + layer * HIDDEN, rows,
                          0, 1, qkv);  // (qkv carries the same tag)
      act_t *kc = k_cache + (size_t)layer * cache_stride, *vc = v_cache + (size_t)layer * cache_stride;
      begin_phase();
      attend(qkv, rb_tag, attn, tag, kc, vc, q_norm + layer * HEAD_DIM, k_norm + layer * HEAD_DIM, cos_t, sin_t,
             streams, rows_per, pos0, eps, scale, s.xs, stamps ? at(0) : nullptr);  // stamp 0: loads and norms done
      if (stamps) *at(1) = *at(2) = *at(0);
      const u32 attn_tag = tag;
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
