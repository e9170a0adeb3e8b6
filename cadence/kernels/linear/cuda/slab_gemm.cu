// The decode GEMM for one to eight activation rows whose weights arrive before it may start: each
// CTA's slab of weight rows is copied into shared memory by the copy engine (one cp.async.bulk,
// completing on an mbarrier) *before* the kernel waits for the one before it (programmatic
// dependent launch), so the weight read overlaps that kernel and after the wait only the input
// rows, the dots (on tensor cores) and the stores are left on the chain (linear/cuda_slab_gemm.py).
//
// y[m, n] = in[m, :] . w[n, :] for every row m < M, where `in` is x, or with NORM
// rms_norm(x + res) * norm_w computed by every CTA for itself (the decoder's input and
// post-attention norms folded into the GEMM after them, so no norm kernel sits between two GEMMs);
// CTA 0 then stores the sum x + res, the next residual. PAIR 2: w is [gate; up] (2n rows) and
// y = silu(in . gate) * (in . up), rounded where the unfused GEMM and silu_mul round.
//
// Compiled at run time by NVRTC with these macros prepended (cuda_slab_gemm.py; this folder and
// kernels/cuda_common are the include path, no CUDA header needed):
//   K        the input width (a multiple of 256)       M        activation rows (1-8)
//   PAIR     1, or 2 for SwiGLU                         NORM     1: the norm folded in
//   HAS_RES  1: NORM adds a residual first              THREADS  threads a CTA (8 warps)
//   TRIGGER_FIRST  1: let the next kernel launch before this one's wait (its slab copy starts a
//                  kernel earlier); 0: after it
//   ROWS     weight rows (outputs) a CTA: ceil(ROWS / 8) tiles of mma.sync (dot_tiles)
//   ATTN     1: x is qkv rows and the input is their attention over one cache page
//            (slab_attention.cuh, with its macros HQ, HKV, HD, PS): the code predictor's o
// Rounding follows the layer kernels (the Triton GEMMs and norm): bf16 storage, fp32 products and sums.

#include "prelude.cuh"  // types, bf16 rounding, PDL, bulk copies, mma.sync

constexpr int WARPS = THREADS / 32;
static_assert(K % 256 == 0, "K must be a multiple of 256");
static_assert(M >= 1 && M <= 8, "1-8 input rows: two rows of an m16 tile each");

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

// ---- the dots, on tensor cores -------------------------------------------------------------------
// One m16n8k16 takes 8 weight rows as B's 8 columns (n) and the input rows as A's rows, so a CTA's
// slab is ceil(ROWS / 8) tiles (twice for SwiGLU), and K is split over the warps in 64-wide steps
// (warp w takes steps w, w + WARPS, ...); each warp's sums meet in shared memory (reduce_store).
//
// Bank conflicts: lane (g, c) holds weight row g's k = 2c, 2c + 1 (and + 8), so a quarter warp
// (lanes 8j..8j + 7) reads two weight rows, whose starts share banks (rows are K * 2 bytes, a
// multiple of 128). A lane therefore reads a whole 16-byte chunk (two mmas' worth: K's order inside
// a dot is ours to choose, as long as A and B agree), and in a step of 8 chunks row g reads chunk
// c + 4 (s ^ (g & 1)) in its load s: the quarter warp's two rows read different halves of 128 bytes.
// A must then give even and odd weight rows their k in different orders, so every input row takes
// two of A's 16 rows: A's row 2m + p (m < 4) and 2m + p + 8 (m >= 4: rows 8-15, the fragment's
// upper half, same parity) is input row m in the order of rows of parity p, and output (m, n) is
// D[2m + (n & 1)][n] (D[2(m - 4) + (n & 1) + 8][n] for m >= 4), the other D entries pairing
// mismatched k and unused. Rows past four cost a second 16-byte input load a chunk, no more mmas.
constexpr int TILES = (ROWS + 7) / 8;  // n8 tiles of a slab
constexpr int STEPS = K / 64;
constexpr int RED = PAIR * TILES * 8;  // a warp's sums for one input row: its gate (then up) tiles' outputs
// The slab's space, which the warps' sums (WARPS x M x RED floats) take once the dots are done.
constexpr size_t SLAB_BYTES = (size_t)PAIR * ROWS * K * 2, RED_BYTES = (size_t)WARPS * M * RED * 4;
constexpr size_t SLAB_SPACE = ((SLAB_BYTES > RED_BYTES ? SLAB_BYTES : RED_BYTES) + 15) / 16 * 16;

__device__ __forceinline__ void dot_tiles(const uint4* xs, const u16* ws, int mine, int up, float* red, int warp,
                                          int lane) {
  const int g = lane / 4, c = lane % 4, parity = g & 1;
  constexpr bool UPPER = M > 4;  // A's rows 8-15 in use
  const bool feeds = g < 2 * M;  // this lane holds A's row g: input row g / 2
  const bool feeds_upper = UPPER && g + 8 < 2 * M;  // and A's row g + 8: input row g / 2 + 4
  const uint4* xrow = xs + (feeds ? g / 2 : 0) * (K / 8);
  const uint4* xrow_upper = xs + (feeds_upper ? g / 2 + 4 : 0) * (K / 8);
  const uint4* wrow[PAIR * TILES];  // this lane's weight row (B's column g) of each tile
#pragma unroll
  for (int t = 0; t < PAIR * TILES; ++t)
    wrow[t] = reinterpret_cast<const uint4*>(ws + (size_t)(imin((t % TILES) * 8 + g, mine - 1) + (t / TILES) * up) * K);
  float acc[PAIR * TILES][2][4] = {};  // two sums a tile (the loads s = 0, 1) for two chains of mmas
#pragma unroll
  for (int j = 0; j < (STEPS + WARPS - 1) / WARPS; ++j) {
    const int step = warp + WARPS * j;
    if (step >= STEPS) break;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int chunk = step * 8 + c + 4 * (s ^ parity);
      uint4 x = {}, xu = {};
      if (feeds) x = xrow[chunk];
      if (feeds_upper) xu = xrow_upper[chunk];
      const u32 a0[4] = {x.x, xu.x, x.y, xu.y}, a1[4] = {x.z, xu.z, x.w, xu.w};
#pragma unroll
      for (int t = 0; t < PAIR * TILES; ++t) {
        const uint4 w = wrow[t][chunk];
        const u32 b0[2] = {w.x, w.y}, b1[2] = {w.z, w.w};
        mma_16816(acc[t][s], a0, b0);
        mma_16816(acc[t][s], a1, b1);
      }
    }
  }
  __syncthreads();  // every warp is done with the slab, whose space the sums take (red)
  if (!feeds) return;  // lane (g, c) holds D[g][2c + parity] in acc[.][.][parity]: output n = 2c + parity
#pragma unroll
  for (int t = 0; t < PAIR * TILES; ++t) {
    red[(warp * M + g / 2) * RED + t * 8 + 2 * c + parity] =  // selects: acc stays in registers
        parity ? acc[t][0][1] + acc[t][1][1] : acc[t][0][0] + acc[t][1][0];
    if (feeds_upper)  // D[g + 8][2c + parity] in acc[.][.][2 + parity]
      red[(warp * M + g / 2 + 4) * RED + t * 8 + 2 * c + parity] =
          parity ? acc[t][0][3] + acc[t][1][3] : acc[t][0][2] + acc[t][1][2];
  }
}

// After the warps' dots: each output's warp sums added in warp order, SwiGLU, one coalesced store.
__device__ __forceinline__ void reduce_store(const float* red, u16* y, int n, int n0, int mine) {
  for (int i = threadIdx.x; i < M * mine; i += THREADS) {
    const int m = i / mine, r = i % mine;
    float v[PAIR] = {};
    for (int w = 0; w < WARPS; ++w)
      for (int p = 0; p < PAIR; ++p) v[p] += red[(w * M + m) * RED + p * TILES * 8 + r];
    y[(size_t)m * n + n0 + r] = from_f(PAIR == 2 ? swiglu(v[0], v[1]) : v[0]);
  }
}

// ATTN's arguments (zeros without it, so that every instance takes the same parameters).
struct Attention {
  const u16* q_norm;  // [HD]
  const u16* k_norm;  // [HD]
  const u16* cos;     // [positions, HD]
  const u16* sin;     // [positions, HD]
  const long long *position, *slot, *context, *page;  // M rows' (one page); constant (read before the wait)
  u16* k_cache;  // the layer's [pages, PS, HKV, HD]
  u16* v_cache;
  float scale;
};
#if ATTN
#include "slab_attention.cuh"
#else
constexpr int KV_ELEMS = 0;
#endif

// x [M, K] (rows contiguous; ATTN: M qkv rows); w [PAIR * n, K]; y [M, n]. NORM: res [M, K]
// (HAS_RES), norm_w [K], res_out [M, K] (HAS_RES: x + res, stored by CTA 0). `rows` weight rows
// (outputs) a CTA. Shared memory: the slab (then the warps' sums), (ATTN) the page's keys and
// values, the input rows, the mbarrier, the norm's partial sums.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
    slab_gemm_kernel(const u16* x, const u16* w, u16* y, const u16* res, const u16* norm_w, u16* res_out, int n,
                     int rows, float eps, Attention at) {
  DYNAMIC_SHARED(smem);
  u16* ws = reinterpret_cast<u16*>(smem);  // PAIR x rows x K: the gate slab, then the up slab
  u16* kv = reinterpret_cast<u16*>(smem + SLAB_SPACE);  // ATTN: the page's keys and values (KV_ELEMS)
  uint4* xs = reinterpret_cast<uint4*>(kv + KV_ELEMS);  // M x K
  u64* bar = reinterpret_cast<u64*>(xs + M * (K / 8));
  float* partial = reinterpret_cast<float*>(bar + 1);  // M x WARPS: the norm's sums of squares
  float* red = reinterpret_cast<float*>(smem);         // WARPS x M x RED: the warps' sums, over the slab
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n0 = blockIdx.x * rows, mine = imin(rows, n - n0);
  if (TRIGGER_FIRST) pdl_trigger();
  if (tid == 0) {  // the slab, on its way before the wait: weights are never written
    const unsigned bytes = (unsigned)mine * K * 2;
    mbar_init(bar, 1);
    mbar_init_fence();
#if ATTN
    mbar_expect_tx(bar, PAIR * bytes + attend_prefetch_bytes(at));
    attend_prefetch(at, kv, bar);
#else
    mbar_expect_tx(bar, PAIR * bytes);
#endif
    bulk_load_once(ws, w + (size_t)n0 * K, bytes, bar);
    if (PAIR == 2) bulk_load_once(ws + (size_t)rows * K, w + (size_t)(n + n0) * K, bytes, bar);
  }
  uint4 nw[2] = {};  // this thread's chunks of the norm weight, also constant
  if (NORM)
    for (int c = 0; c < 2 && tid + c * THREADS < K / 8; ++c) nw[c] = reinterpret_cast<const uint4*>(norm_w)[tid + c * THREADS];
  pdl_wait();
  if (!TRIGGER_FIRST) pdl_trigger();
#if ATTN
  attend(x, at, kv, xs, bar, warp, lane, eps);
#else
  load_input(x, res, nw, res_out, eps, xs, partial);
#endif
  __syncthreads();
  mbar_wait(bar, 0);
  dot_tiles(xs, ws, mine, rows, red, warp, lane);
  __syncthreads();
  reduce_store(red, y, n, n0, mine);
}
