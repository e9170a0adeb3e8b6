// The decode GEMM for one or two activation rows whose weights arrive before it may start: each
// CTA's slab of weight rows is copied into shared memory by the copy engine (one cp.async.bulk,
// completing on an mbarrier) *before* the kernel waits for the one before it (programmatic
// dependent launch), so the weight read overlaps that kernel and after the wait only the input
// rows, the dots and the stores are left on the chain (perf-notes #94; kernels/cuda_gemv.py).
//
// y[m, n] = in[m, :] . w[n, :] for every row m < M, where `in` is x, or with NORM
// rms_norm(x + res) * norm_w computed by every CTA for itself (the decoder's input and
// post-attention norms folded into the GEMM after them, so no norm kernel sits between two GEMMs);
// CTA 0 then stores the sum x + res, the next residual. PAIR 2: w is [gate; up] (2n rows) and
// y = silu(in . gate) * (in . up), rounded where the unfused GEMM and silu_mul round.
//
// Compiled at run time by NVRTC with these macros prepended (cuda_gemv.py; this folder is the
// include path, no CUDA header needed):
//   K        the input width (a multiple of 256)       M        activation rows (1 or 2)
//   PAIR     1, or 2 for SwiGLU                         NORM     1: the norm folded in
//   HAS_RES  1: NORM adds a residual first              THREADS  threads a CTA (8 warps)
//   TRIGGER_FIRST  1: let the next kernel launch before this one's wait (its slab copy starts a
//                  kernel earlier); 0: after it
// Rounding follows the layer kernels (triton_ops): bf16 storage, fp32 products and sums.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
#define ACT_BF16 1

// ---- PTX (tests/cuda_emulation/emulate.h has CPU stand-ins for this section) ------------------
#ifndef CADENCE_EMULATE
#define DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
__device__ __forceinline__ u16 from_f(float f) {  // round to nearest even, as PyTorch's casts
  u16 v;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f));
  return v;
}
// Programmatic dependent launch: wait for the kernel before (and its memory), then let the next in.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
#include "sm90.cuh"  // mbarriers and bulk copies
#endif  // CADENCE_EMULATE

constexpr int WARPS = THREADS / 32;
constexpr int KC = K / 256;                 // 16-byte chunks of a row a lane takes: k = 8 (lane + 32 j)
constexpr int NR = KC <= 4 ? 4 / M : PAIR;  // weight rows dotted together (registers allow more at short K)
static_assert(K % 256 == 0, "K must be a multiple of 256");
static_assert(NR % PAIR == 0, "rows go in whole SwiGLU pairs");

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ float to_f(u16 v) { return __uint_as_float((u32)v << 16); }
__device__ __forceinline__ float round_bf16(float f) { return to_f(from_f(f)); }
__device__ __forceinline__ float lo(u32 v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi(u32 v) { return __uint_as_float(v & 0xffff0000u); }

// The sum of the eight products of two 16-byte chunks of bf16.
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  float s = lo(a.x) * lo(b.x);
  s += hi(a.x) * hi(b.x);
  s += lo(a.y) * lo(b.y);
  s += hi(a.y) * hi(b.y);
  s += lo(a.z) * lo(b.z);
  s += hi(a.z) * hi(b.z);
  s += lo(a.w) * lo(b.w);
  return s + hi(a.w) * hi(b.w);
}

// The input rows into shared memory (xs, M x K bf16), normalised with NORM. Each thread takes the
// same 8-element chunks of every row: at most two a row (K <= 4096).
__device__ __forceinline__ void load_input(const u16* x, const u16* res, const uint4 (&nw)[2], u16* res_out,
                                           float eps, uint4* xs, float* partial) {
  constexpr int CHUNKS = K / 8, PER = (CHUNKS + THREADS - 1) / THREADS;
  static_assert(PER <= 2, "K <= 16 * THREADS");
  const int tid = threadIdx.x;
  if (!NORM) {
    for (int i = tid; i < M * CHUNKS; i += THREADS) xs[i] = reinterpret_cast<const uint4*>(x)[i];
    return;
  }
  uint4 v[M][PER];
  float ss[M];
  for (int m = 0; m < M; ++m) {
    ss[m] = 0.f;
    for (int c = 0; c < PER; ++c) {
      const int i = tid + c * THREADS;
      if (i >= CHUNKS) break;
      uint4 a = reinterpret_cast<const uint4*>(x)[m * CHUNKS + i];
      if (HAS_RES) {  // the sum, rounded as the norm kernel rounds it; CTA 0 stores it
        const uint4 b = reinterpret_cast<const uint4*>(res)[m * CHUNKS + i];
        u32* pa = reinterpret_cast<u32*>(&a);
        const u32* pb = reinterpret_cast<const u32*>(&b);
        for (int e = 0; e < 4; ++e)
          pa[e] = (u32)from_f(lo(pa[e]) + lo(pb[e])) | (u32)from_f(hi(pa[e]) + hi(pb[e])) << 16;
        if (blockIdx.x == 0) reinterpret_cast<uint4*>(res_out)[m * CHUNKS + i] = a;
      }
      const u32* p = reinterpret_cast<const u32*>(&a);
      for (int e = 0; e < 4; ++e) ss[m] += lo(p[e]) * lo(p[e]) + hi(p[e]) * hi(p[e]);
      v[m][c] = a;
    }
  }
  for (int m = 0; m < M; ++m) {  // the rows' sums of squares over the CTA
    for (int o = 16; o > 0; o >>= 1) ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], o);
    if (tid % 32 == 0) partial[m * WARPS + tid / 32] = ss[m];
  }
  __syncthreads();
  for (int m = 0; m < M; ++m) {
    float total = 0.f;
    for (int w = 0; w < WARPS; ++w) total += partial[m * WARPS + w];
    const float inv = 1.f / sqrtf(total / K + eps);
    for (int c = 0; c < PER; ++c) {
      const int i = tid + c * THREADS;
      if (i >= CHUNKS) break;
      const u32* p = reinterpret_cast<const u32*>(&v[m][c]);
      const u32* q = reinterpret_cast<const u32*>(&nw[c]);
      uint4 out;
      u32* o = reinterpret_cast<u32*>(&out);
      for (int e = 0; e < 4; ++e)  // the normalised value rounded, then times the weight, rounded
        o[e] = (u32)from_f(lo(q[e]) * round_bf16(lo(p[e]) * inv)) |
               (u32)from_f(hi(q[e]) * round_bf16(hi(p[e]) * inv)) << 16;
      xs[m * CHUNKS + i] = out;
    }
  }
}

// NR weight rows of the slab ws (shared memory) against the M input rows (shared memory), each
// sum over the warp: the rows go together so that their loads and reductions overlap and each input
// chunk is read once for all of them. Row q is slab row first + WARPS (q / PAIR), of the up slab
// (`up` rows on) where q % PAIR is 1; rows past `last` read row `last` (their sums are not stored).
__device__ __forceinline__ void dot_rows(const uint4* xs, const u16* ws, int first, int last, int up,
                                         float (&out)[NR][M], int lane) {
  float acc[NR][M][2] = {};
#pragma unroll
  for (int j = 0; j < KC; ++j) {
    uint4 x[M];
#pragma unroll
    for (int m = 0; m < M; ++m) x[m] = xs[m * (K / 8) + lane + 32 * j];
#pragma unroll
    for (int q = 0; q < NR; ++q) {
      const int row = imin(first + WARPS * (q / PAIR), last) + (q % PAIR) * up;
      const uint4 w = reinterpret_cast<const uint4*>(ws + (size_t)row * K)[lane + 32 * j];
#pragma unroll
      for (int m = 0; m < M; ++m) acc[q][m][j & 1] += dot8(w, x[m]);
    }
  }
#pragma unroll
  for (int q = 0; q < NR; ++q)
#pragma unroll
    for (int m = 0; m < M; ++m) out[q][m] = acc[q][m][0] + acc[q][m][1];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int q = 0; q < NR; ++q)
#pragma unroll
      for (int m = 0; m < M; ++m) out[q][m] += __shfl_xor_sync(0xffffffffu, out[q][m], o);
}

// Lane 0 stores the outputs of weight rows first, first + WARPS, ... (NR / PAIR of them) below
// `end`; y's rows are n wide.
__device__ __forceinline__ void store_rows(const float (&v)[NR][M], u16* y, int n, int first, int end, int lane) {
  if (lane) return;
  for (int i = 0; i < NR / PAIR; ++i) {
    const int row = first + WARPS * i;
    if (row >= end) break;
    for (int m = 0; m < M; ++m) {
      float out = v[i * PAIR][m];
      if (PAIR == 2) {
        const float g = round_bf16(out);
        out = round_bf16(g / (1.f + __expf(-g))) * round_bf16(v[i * PAIR + 1][m]);
      }
      y[(size_t)m * n + row] = from_f(out);
    }
  }
}

// x [M, K] (rows contiguous); w [PAIR * n, K]; y [M, n]. NORM: res [M, K] (HAS_RES), norm_w [K],
// res_out [M, K] (HAS_RES: x + res, stored by CTA 0). `rows` weight rows (outputs) a CTA.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
    slab_gemv_kernel(const u16* x, const u16* w, u16* y, const u16* res, const u16* norm_w, u16* res_out, int n,
                     int rows, float eps) {
  DYNAMIC_SHARED(smem);
  u16* ws = reinterpret_cast<u16*>(smem);  // PAIR x rows x K: the gate slab, then the up slab
  uint4* xs = reinterpret_cast<uint4*>(smem + (size_t)PAIR * rows * K * 2);  // M x K
  u64* bar = reinterpret_cast<u64*>(xs + M * (K / 8));
  float* partial = reinterpret_cast<float*>(bar + 1);  // M x WARPS: the norm's sums of squares
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n0 = blockIdx.x * rows, mine = imin(rows, n - n0);
  if (TRIGGER_FIRST) pdl_trigger();
  if (tid == 0) {  // the slab, on its way before the wait: weights are never written
    const unsigned bytes = (unsigned)mine * K * 2;
    mbar_init(bar, 1);
    mbar_init_fence();
    mbar_expect_tx(bar, PAIR * bytes);
    bulk_load_once(ws, w + (size_t)n0 * K, bytes, bar);
    if (PAIR == 2) bulk_load_once(ws + (size_t)rows * K, w + (size_t)(n + n0) * K, bytes, bar);
  }
  uint4 nw[2] = {};  // this thread's chunks of the norm weight, also constant
  if (NORM)
    for (int c = 0; c < 2 && tid + c * THREADS < K / 8; ++c) nw[c] = reinterpret_cast<const uint4*>(norm_w)[tid + c * THREADS];
  pdl_wait();
  if (!TRIGGER_FIRST) pdl_trigger();
  load_input(x, res, nw, res_out, eps, xs, partial);
  __syncthreads();
  mbar_wait(bar, 0);
  const int count = warp < mine ? (mine - warp + WARPS - 1) / WARPS : 0;  // this warp's rows: warp + WARPS i
  constexpr int GROUP = NR / PAIR;
  for (int i = 0; i < count; i += GROUP) {
    float v[NR][M];
    dot_rows(xs, ws, warp + WARPS * i, mine - 1, rows, v, lane);
    store_rows(v, y, n, n0 + warp + WARPS * i, n0 + mine, lane);
  }
}
