// The decode GEMM for up to 64 activation rows (routed at 33-64) whose weights arrive before it may
// start (perf-notes #115; kernels/cuda_gemm64.py): the idea of the one- and two-row slab GEMM
// (slab_gemv.cu) at a batch of 64. Each CTA copies its slab of weight rows into shared memory by the
// copy engine (PADDED: a cp.async.bulk a row, else one a slab, completing on one mbarrier) *before*
// it waits for the kernel before it (programmatic dependent launch), so that after the wait only the
// input rows, the dots and the stores are left on the chain. The Triton 64-row GEMM (triton_linear)
// only pulls its weights into L2 before its wait and streams them from there after it, interleaved
// with the input's reads.
//
// y[m, n] = x[m, :] . w[n, :] for the M rows of x; PAIR 2: w is [gate; up] (2n rows) and
// y = silu(x . gate) * (x . up), rounded where the unfused GEMM and silu_mul round.
//
// The input is read from L2 by every CTA (128 KB at 64 rows of K = 1024), straight into the
// tensor cores' A registers, never through shared memory: warp (r, q) of the 2 x 4 warps takes
// half r of the rows' m16 tiles and quarter q of K, so every input element is read once a CTA and
// every weight element by two warps. The four K quarters' sums meet in shared memory (where the
// slab was) and are added in quarter order.
//
// Measured: for the MLP's gate/up alone it takes the b64 walk 4.23 -> 4.16-4.17 ms (perf-notes #127:
// there the other route is cuBLAS, not launched early, and silu_mul), so gate/up runs here by
// default. For qkv and the heads too the walk is slower (#115: 4.34 against 4.20 ms): in the walk's
// stamps its loop beats the Triton tiles' (2.75 against 3.25 us at qkv, with BATCH 8), but the tail
// (the quarters' sums in shared memory, after the slowest warp) takes 1.5-2 us and the last CTA
// ends ~1.5 us after the median.
//
// Compiled at run time by NVRTC with these macros prepended (cuda_gemm64.py):
//   K      the input width (a multiple of 128)    M        activation rows (1-64)
//   PAIR   1, or 2 for SwiGLU                      ROWS     weight rows (outputs) a CTA
//   THREADS threads a CTA (256: 8 warps)           STAMP    1: clock stamps (prelude.cuh)
//   BATCH  K steps whose input loads a warp issues before their dots (a divisor of its steps)
//   WARP_KS  shares of K the warps split (default 4; 2: K halves, half the sums; 1: each warp owns
//            its m16 tile's outputs over all of K, no sums). Both walk ~0.35 ms slower (#127, #128):
//            with one m16 tile a warp, each slab fragment read from shared memory feeds one tile
//   MIN_BLOCKS  CTAs an SM must hold at once (__launch_bounds__): 2 caps a thread at 128 registers,
//               so that the next GEMM's CTAs fit beside this one's and start their copies early
//   ABLATE 1: the input's loads left out (A is made of the lane's index), 2: the slab's copy left
//          out (the dots read whatever shared memory holds), 3: the K shares' sums left out (the
//          first share's warps store their own dots): wrong results, for benchmarks/gemm64.py to
//          time the rest; 0: served. (Before session 37 ablation 2 left the input's loads out too.)
//   PADDED 1: a bulk copy a weight row, each row 64 bytes apart in shared memory (no bank
//          conflicts in the dots' B loads); 0: the slab as one copy, rows back to back
//   TRIGGER_FIRST  1: let the next kernel launch at this one's start (the graph's other kernels'
//                  order at 33-64 rows, triton_launch.trigger_first_for); 0: after the wait
// Rounding: bf16 storage, fp32 products and sums, as the layer kernels.

#include "prelude.cuh"  // types, bf16 rounding, PDL, bulk copies, mma.sync, clock stamps
#ifndef ABLATE
#define ABLATE 0
#endif

#ifndef WARP_KS
#define WARP_KS 4  // K's shares a CTA's warps split (their sums meet in shared memory)
#endif
constexpr int WARPS = THREADS / 32;
constexpr int WARP_ROWS = WARPS / WARP_KS;               // the warps split the input's m16 tiles (2 x 4
                                                         // warps; 4 x 2 or 4 x 1, #127)
static_assert(WARPS % WARP_KS == 0, "THREADS / 32 warps in WARP_KS shares of K");
constexpr int MT = (M + 15) / 16;                        // m16 tiles of the input
constexpr int MTW = (MT + WARP_ROWS - 1) / WARP_ROWS;    // a warp's m16 tiles
constexpr int MP = MT * 16;                              // the input's rows padded to whole tiles
constexpr int TILES = (ROWS + 7) / 8;                    // n8 tiles of a slab (gate's, then up's)
constexpr int NT = PAIR * TILES;
constexpr int KW = K / WARP_KS;                          // a warp's share of K
constexpr int STEPS = KW / 32;                           // its steps: two mmas of k16 each
static_assert(STEPS % BATCH == 0, "BATCH must divide a warp's K steps");
constexpr int RED = NT * 8;                              // a row's sums in the reduction buffer
// A slab row in shared memory, in elements: with PADDED K and 64 bytes, so that the two weight rows
// a quarter warp reads (lanes 8j..8j+7: rows 2j and 2j + 1, 64 bytes each) sit in different banks.
constexpr int LD = K + (PADDED ? 32 : 0);
static_assert(K % (32 * WARP_KS) == 0, "K must be a multiple of 128");
static_assert(M >= 1 && M <= 64, "1-64 rows");

// The dots of warp (wr, wk): its m16 tiles against the CTA's NT weight tiles over its quarter of
// K. Lane (g, c) = (lane / 4, lane % 4) loads 16 contiguous bytes (8 k) of input rows g and g + 8
// of each tile and of weight row g of each tile at the same k, and feeds them to two m16n8k16 as
// their k slots 2c, 2c + 1, 2c + 8, 2c + 9: K's order inside a dot is ours to choose as long as A
// and B agree, and this way every load is a whole 16-byte chunk (slab_gemv.cu's dot_tiles does
// the same). The input's loads of BATCH steps are issued before their dots.
__device__ __forceinline__ void dots(const u16* x, const u16* ws, int mine, int wr, int wk, int lane,
                                     float (&acc)[MTW][NT][4]) {
  const int g = lane / 4, c = lane % 4;
  const uint4* xrow[MTW][2];
  bool has[MTW][2];
#pragma unroll
  for (int i = 0; i < MTW; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (wr * MTW + i) * 16 + h * 8 + g;
      has[i][h] = r < M;
      xrow[i][h] = reinterpret_cast<const uint4*>(x) + (size_t)(has[i][h] ? r : 0) * (K / 8);
    }
  const uint4* wrow[NT];  // this lane's weight row of each tile (past the CTA's last: its last)
#pragma unroll
  for (int t = 0; t < NT; ++t)
    wrow[t] = reinterpret_cast<const uint4*>(ws + (size_t)(imin((t % TILES) * 8 + g, mine - 1) + (t / TILES) * ROWS) * LD);
  const int chunk0 = wk * (KW / 8) + c;
#pragma unroll 1
  for (int b = 0; b < STEPS; b += BATCH) {
    uint4 a[BATCH][MTW][2];
#pragma unroll
    for (int s = 0; s < BATCH; ++s)
#pragma unroll
      for (int i = 0; i < MTW; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          a[s][i][h] = ABLATE == 1 ? uint4{(u32)lane, (u32)s, (u32)i, (u32)h}
                              : has[i][h] ? xrow[i][h][chunk0 + (b + s) * 4] : uint4{0u, 0u, 0u, 0u};
#pragma unroll
    for (int s = 0; s < BATCH; ++s) {
      const int chunk = chunk0 + (b + s) * 4;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const uint4 w = wrow[t][chunk];
        const u32 b0[2] = {w.x, w.y}, b1[2] = {w.z, w.w};
#pragma unroll
        for (int i = 0; i < MTW; ++i) {
          const uint4 lo8 = a[s][i][0], hi8 = a[s][i][1];  // rows g and g + 8
          const u32 a0[4] = {lo8.x, hi8.x, lo8.y, hi8.y}, a1[4] = {lo8.z, hi8.z, lo8.w, hi8.w};
          mma_16816(acc[i][t], a0, b0);
          mma_16816(acc[i][t], a1, b1);
        }
      }
    }
  }
}

// x [M, K] (rows contiguous); w [PAIR * n, K]; y [M, n]; n / gridDim.x weight rows (outputs) a CTA,
// at most ROWS.
// Shared memory: the slab (PAIR x rows x LD), later the K quarters' sums over it, then the mbarrier.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
    slab_gemm64_kernel(const u16* x, const u16* w, u16* y, int n STAMP_PARAMS) {
  DYNAMIC_SHARED(smem);
  [[maybe_unused]] const i64 t_start = STAMP ? (i64)global_ns() : 0;
  constexpr size_t SLAB_BYTES = (size_t)PAIR * ROWS * LD * 2, RED_BYTES = (size_t)WARP_KS * MP * RED * 4;
  constexpr size_t BAR_AT = ((SLAB_BYTES > RED_BYTES ? SLAB_BYTES : RED_BYTES) + 15) / 16 * 16;
  u16* ws = reinterpret_cast<u16*>(smem);
  u64* bar = reinterpret_cast<u64*>(smem + BAR_AT);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // This CTA's outputs: the n split evenly over the grid (at most ROWS each), so that the grid can be
  // one CTA an SM whatever n (cuda_gemm64.ctas_for).
  const int n0 = (int)((i64)blockIdx.x * n / gridDim.x), mine = (int)((i64)(blockIdx.x + 1) * n / gridDim.x) - n0;
  if (TRIGGER_FIRST) pdl_trigger();
  if (warp == 0) {  // the slab, on its way before the wait (weights are never written)
    const unsigned bytes = ABLATE == 2 ? 0u : (unsigned)(PAIR * mine * K * 2);
    if (lane == 0) {
      mbar_init(bar, 1);
      mbar_init_fence();
      mbar_expect_tx(bar, bytes);
    }
    __syncwarp();
    if (bytes && PADDED) {  // a copy a row
      for (int r = lane; r < PAIR * mine; r += 32) {
        const int p = r / mine, row = r % mine;
        bulk_load_once(ws + (size_t)(p * ROWS + row) * LD, w + ((size_t)p * n + n0 + row) * K, K * 2, bar);
      }
    } else if (bytes && lane < PAIR) {  // a copy a slab (gate's, up's)
      bulk_load_once(ws + (size_t)lane * ROWS * LD, w + ((size_t)lane * n + n0) * K, bytes / PAIR, bar);
    }
  }
  [[maybe_unused]] const i64 t_ahead = STAMP ? (i64)global_ns() : 0;
  pdl_wait();
  if (!TRIGGER_FIRST) pdl_trigger();
  [[maybe_unused]] const i64 t_waited = STAMP ? (i64)global_ns() : 0;
  __syncthreads();  // the barrier's init, before anyone waits on it
  mbar_wait(bar, 0);
  float acc[MTW][NT][4] = {};
  const int wr = warp / WARP_KS, wk = warp % WARP_KS;
  dots(x, ws, mine, wr, wk, lane, acc);
  [[maybe_unused]] const i64 t_dots = STAMP ? (i64)global_ns() : 0;
  const int g = lane / 4, c = lane % 4;
  if (ABLATE == 3) {  // the sums left out: each warp of the first K share stores its own dots, unsummed
    if (wk == 0)
      for (int i = 0; i < MTW; ++i)
        for (int t = 0; t < TILES; ++t)
          for (int e = 0; e < 4; ++e) {  // D's rows g (e 0, 1) and g + 8 (e 2, 3), columns 2c, 2c + 1
            const int r = (wr * MTW + i) * 16 + g + e / 2 * 8, col = t * 8 + 2 * c + e % 2;
            if (r < M && col < mine) y[(size_t)r * n + n0 + col] = from_f(acc[i][t][e]);
          }
    return;
  }
  __syncthreads();  // every warp's dots done: the slab's memory takes the sums
  float* red = reinterpret_cast<float*>(smem);  // [WARP_KS][MP][RED]
#pragma unroll
  for (int i = 0; i < MTW; ++i) {
    const int r = (wr * MTW + i) * 16 + g;
    if (r >= MP) break;  // a tile past the input's (MT odd)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* at = red + ((size_t)wk * MP + r + h * 8) * RED + t * 8 + 2 * c;
        at[0] = acc[i][t][2 * h], at[1] = acc[i][t][2 * h + 1];
      }
  }
  __syncthreads();
  for (int i = tid; i < M * mine; i += THREADS) {  // the quarters' sums in order, one coalesced store
    const int m = i / mine, col = i % mine;
    float v[PAIR] = {};
    for (int q = 0; q < WARP_KS; ++q)
      for (int p = 0; p < PAIR; ++p) v[p] += red[((size_t)q * MP + m) * RED + p * TILES * 8 + col];
    y[(size_t)m * n + n0 + col] = from_f(PAIR == 2 ? swiglu(v[0], v[1]) : v[0]);
  }
#if STAMP
  if (tid == 0) write_stamps(stamps, stamp_row + blockIdx.x, t_start, t_ahead, t_waited, t_dots);
#endif
}
