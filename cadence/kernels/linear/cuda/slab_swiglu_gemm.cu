// The slab SwiGLU GEMM: the decode GEMM for up to 64 activation rows (routed at 33-64, for the MLP's
// gate/up with SwiGLU; linear/cuda_slab_swiglu_gemm.py) whose weights arrive before it may start:
// the idea of the one- and two-row slab GEMM (slab_gemm.cu) at a batch of 64. Each CTA copies its
// slab of weight rows into shared memory by the copy engine (a cp.async.bulk a row, completing on one
// mbarrier) *before* it waits for the kernel before it (programmatic dependent launch), so that after
// the wait only the input rows, the dots and the stores are left on the chain. The Triton 64-row GEMM
// (triton_streaming_gemm.py) only pulls its weights into L2 before its wait and streams them from
// there after it, interleaved with the input's reads.
//
// y[m, n] = x[m, :] . w[n, :] for the M rows of x; PAIR 2: w is [gate; up] (2n rows) and
// y = silu(x . gate) * (x . up), rounded where the unfused GEMM and silu_mul round.
//
// The input is read from L2 by every CTA (128 KB at 64 rows of K = 1024), straight into the
// tensor cores' A registers, never through shared memory: warp (r, q) of the 2 x 4 warps takes
// half r of the rows' m16 tiles and quarter q of K, so every input element is read once a CTA and
// every weight element by two warps. The four K quarters' sums meet in shared memory (where the
// slab was), scattered over the warps: each warp adds the four shares of a quarter of its warp
// row's outputs, in quarter order, and stores those.
//
// Only gate/up runs here: there the other route is cuBLAS (not launched early) and silu_mul. For qkv
// and the heads the Triton tiles are faster: this kernel's loop is shorter than theirs, but its tail
// (the quarters' sums in shared memory, after the slowest warp) is longer.
//
// Compiled at run time by NVRTC with these macros prepended (cuda_slab_swiglu_gemm.py):
//   K      the input width (a multiple of 128)    M        activation rows (1-64)
//   PAIR   1, or 2 for SwiGLU                      ROWS     weight rows (outputs) a CTA
//   THREADS threads a CTA (256: 8 warps)
//   BATCH  K steps whose input loads a warp issues before their dots (a divisor of its steps)
//   TRIGGER_FIRST  1: let the next kernel launch at this one's start (the graph's other kernels'
//                  order at 33-64 rows, launch.pdl.trigger_first_for); 0: after the wait
// Rounding: bf16 storage, fp32 products and sums, as the layer kernels.

#include "prelude.cuh"  // types, bf16 rounding, PDL, bulk copies, mma.sync

constexpr int WARP_KS = 4;                               // K's shares a CTA's warps split (their sums
                                                         // meet in shared memory)
constexpr int WARPS = THREADS / 32;
constexpr int WARP_ROWS = WARPS / WARP_KS;               // the warps split the input's m16 tiles (2 x 4
                                                         // warps)
static_assert(WARPS % WARP_KS == 0, "THREADS / 32 warps in WARP_KS shares of K");
constexpr int MT = (M + 15) / 16;                        // m16 tiles of the input
constexpr int MTW = (MT + WARP_ROWS - 1) / WARP_ROWS;    // a warp's m16 tiles
constexpr int TILES = (ROWS + 7) / 8;                    // n8 tiles of a slab (gate's, then up's)
constexpr int NT = PAIR * TILES;
constexpr int KW = K / WARP_KS;                          // a warp's share of K
constexpr int STEPS = KW / 32;                           // its steps: two mmas of k16 each
static_assert(STEPS % BATCH == 0, "BATCH must divide a warp's K steps");
constexpr int UNITS = MTW * TILES * 4;                   // a lane's outputs (D entries of its tiles)
constexpr int UPP = (UNITS + WARP_KS - 1) / WARP_KS;     // units a part: the outputs a warp sums
// A slab row in shared memory, in elements: K and 64 bytes, so that the two weight rows a quarter
// warp reads (lanes 8j..8j+7: rows 2j and 2j + 1, 64 bytes each) sit in different banks.
constexpr int LD = K + 32;
static_assert(K % (32 * WARP_KS) == 0, "K must be a multiple of 128");
static_assert(M >= 1 && M <= 64, "1-64 rows");

// The dots of warp (wr, wk): its m16 tiles against the CTA's NT weight tiles over its quarter of
// K. Lane (g, c) = (lane / 4, lane % 4) loads 16 contiguous bytes (8 k) of input rows g and g + 8
// of each tile and of weight row g of each tile at the same k, and feeds them to two m16n8k16 as
// their k slots 2c, 2c + 1, 2c + 8, 2c + 9: K's order inside a dot is ours to choose as long as A
// and B agree, and this way every load is a whole 16-byte chunk (slab_gemm.cu's dot_tiles does
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
          a[s][i][h] = has[i][h] ? xrow[i][h][chunk0 + (b + s) * 4] : uint4{0u, 0u, 0u, 0u};
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

// Output unit u of a lane (its m16 tile u / (TILES * 4), n8 tile u / 4 % TILES, D entry u % 4): its
// gate (h 0) or up (h 1) dot.
__device__ __forceinline__ float unit_dot(const float (&acc)[MTW][NT][4], int u, int h) {
  return acc[u / (TILES * 4)][u / 4 % TILES + h * TILES][u % 4];
}
// Where share q of float j of warp row wr's part p sits for `lane`: [WARP_ROWS][WARP_KS parts]
// [WARP_KS shares][UPP * PAIR][32 lanes], over the slab's memory once the dots are done.
__device__ __forceinline__ float* share_at(unsigned char* smem, int wr, int p, int q, int j, int lane) {
  return reinterpret_cast<float*>(smem) + (((size_t)(wr * WARP_KS + p) * WARP_KS + q) * (UPP * PAIR) + j) * 32 + lane;
}

// x [M, K] (rows contiguous); w [PAIR * n, K]; y [M, n]; n / gridDim.x weight rows (outputs) a CTA,
// at most ROWS.
// Shared memory: the slab (PAIR x rows x LD), later the K quarters' sums over it, then the mbarrier
// (16 bytes).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    slab_swiglu_gemm_kernel(const u16* x, const u16* w, u16* y, int n) {
  DYNAMIC_SHARED(smem);
  constexpr size_t SLAB_BYTES = (size_t)PAIR * ROWS * LD * 2, RED_BYTES = (size_t)WARP_ROWS * WARP_KS * WARP_KS * UPP * PAIR * 32 * 4;
  constexpr size_t BAR_AT = ((SLAB_BYTES > RED_BYTES ? SLAB_BYTES : RED_BYTES) + 15) / 16 * 16;
  u16* ws = reinterpret_cast<u16*>(smem);
  u64* bar = reinterpret_cast<u64*>(smem + BAR_AT);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // This CTA's outputs: the n split evenly over the grid (at most ROWS each), so that the grid can be
  // one CTA an SM whatever n (cuda_slab_swiglu_gemm.ctas_for).
  const int n0 = (int)((i64)blockIdx.x * n / gridDim.x), mine = (int)((i64)(blockIdx.x + 1) * n / gridDim.x) - n0;
  if (TRIGGER_FIRST) pdl_trigger();
  if (warp == 0) {  // the slab, on its way before the wait (weights are never written)
    const unsigned bytes = (unsigned)(PAIR * mine * K * 2);
    if (lane == 0) {
      mbar_init(bar, 1);
      mbar_init_fence();
      mbar_expect_tx(bar, bytes);
    }
    __syncwarp();
    if (bytes) {  // a copy a row, each to its padded row
      for (int r = lane; r < PAIR * mine; r += 32) {
        const int p = r / mine, row = r % mine;
        bulk_load_once(ws + (size_t)(p * ROWS + row) * LD, w + ((size_t)p * n + n0 + row) * K, K * 2, bar);
      }
    }
  }
  pdl_wait();
  if (!TRIGGER_FIRST) pdl_trigger();
  __syncthreads();  // the barrier's init, before anyone waits on it
  mbar_wait(bar, 0);
  float acc[MTW][NT][4] = {};
  const int wr = warp / WARP_KS, wk = warp % WARP_KS;
  dots(x, ws, mine, wr, wk, lane, acc);
  // The K shares' sums, scattered over the warps of a warp row: a lane's UNITS outputs (each a gate
  // and an up dot with PAIR 2) are cut into WARP_KS parts, and warp (wr, wk) owns part wk. Each warp
  // stores the parts it does not own into shared memory, a float a lane at consecutive addresses (no
  // bank conflicts), and reads the other shares of its own, adding them to its registers in share
  // order (the bits of a sum over the shares in order). The owner then applies SwiGLU in registers
  // and stores its outputs: about a quarter of the shared-memory wavefronts that storing every float
  // and reading them back an output at a time would take.
  const int g = lane / 4, c = lane % 4;
  __syncthreads();  // every warp's dots done: the slab's memory takes the shares
#pragma unroll
  for (int p = 0; p < WARP_KS; ++p) {
    if (p == wk) continue;
#pragma unroll
    for (int u = p * UPP; u < imin(UNITS, (p + 1) * UPP); ++u)
#pragma unroll
      for (int h = 0; h < PAIR; ++h) *share_at(smem, wr, p, wk, (u - p * UPP) * PAIR + h, lane) = unit_dot(acc, u, h);
  }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < WARP_KS; ++p) {
    if (p != wk) continue;  // p is known at compile time inside: acc's registers by constant index
#pragma unroll
    for (int u = p * UPP; u < imin(UNITS, (p + 1) * UPP); ++u) {
      float v[PAIR];
#pragma unroll
      for (int h = 0; h < PAIR; ++h) {
        v[h] = 0.0f;
#pragma unroll
        for (int q = 0; q < WARP_KS; ++q) {
          if (q == p) v[h] += unit_dot(acc, u, h);
          else v[h] += *share_at(smem, wr, p, q, (u - p * UPP) * PAIR + h, lane);
        }
      }
      const int i = u / (TILES * 4), t = u / 4 % TILES, e = u % 4;  // D's rows g, g + 8; columns 2c, 2c + 1
      const int r = (wr * MTW + i) * 16 + g + e / 2 * 8, col = t * 8 + 2 * c + e % 2;
      if (r < M && col < mine) y[(size_t)r * n + n0 + col] = from_f(PAIR == 2 ? swiglu(v[0], v[1]) : v[0]);
    }
  }
}
