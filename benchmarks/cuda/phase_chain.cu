// The code predictor's chain of dependent phases as one persistent CUDA kernel whose weights stream
// into shared memory through the copy engine (cp.async.bulk completing on mbarriers), issued by a
// producer warp that runs ahead of the grid barriers (perf-notes #43).
//
// Question it answers: with Triton's tl.load a phase of the persistent code predictor costs
// 3.6-6.2 us whatever we tried (perf-notes #37-#40), because a barrier's release waits for every
// load the program has in flight. Here the weight loads are the copy engine's, issued by another
// warp, so nothing but the phase's own activations sits on the dependent chain. If a phase costs
// ~2 us here, a CUDA megakernel can bring the batch-1 walk to ~2 ms (issue 4).
//
// Model of one frame at batch 1 (0.6B code predictor shapes, random bf16 weights, fp32 activations):
// 15 steps x (5 layers x [qkv 1024->4096 with RMSNorm, attention stand-in, o 2048->1024,
// gate/up 1024->2x3072 with RMSNorm and SwiGLU, down 3072->1024] + head 1024->2048 with RMSNorm +
// sampler stand-in) = 405 phases, 2.4 GB of weights (the 5 layers' 157 MB do not fit in L2).
// Every phase reads the previous phase's whole output, so each waits for all CTAs (grid barrier).
// The attention and sampler stand-ins move a few KB through a few CTAs, as the real ones would.
//
// Build and run (on the H200):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/phase_chain benchmarks/cuda/phase_chain.cu
//   /tmp/phase_chain [reps=20] [json=FILE]
// Variants: "full" (barriers and weights), "nobarrier" (weights streamed, no waiting for other CTAs),
// "noweights" (the barrier chain alone), "stream" (the weights through the ring, no phase work),
// "ll" and "ll_noweights" (no barrier: activations as {value, tag} words polled by readers), at 4, 8 and 16 consumer warps, two ring shapes, and with or
// without the attention and sampler stand-ins (405 or 315 phases). After every "full" run each
// phase's outputs are compared with a plain reference kernel fed the megakernel's own input to it.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"

constexpr int MAX_K = 4096;  // the widest phase input (qkv output feeding attention)
constexpr int MIX_ROWS = 128;  // the attention / sampler stand-ins: one 128-wide "head" per CTA
// Mode bits. WAIT: a grid barrier before each phase; WEIGHTS: stream and use the weights; STREAM: the
// weights only, no phase work; LL: no barrier, each activation travels as one 64-bit word {value,
// phase tag} that the reader polls until the tag is the phase's (NCCL's "LL" protocol): one round
// trip carries both the data and its readiness, and no store waits for a release.
// SPLITK: a chunk's row pairs and k split over all consumer warps (partial sums combined through
// shared memory) instead of one pair per warp.
constexpr int WAIT = 1, WEIGHTS = 2, STREAM = 4, LL = 8, SPLITK = 16;

enum Kind : int { GEMV = 0, SWIGLU = 1, MIX = 2 };

struct Phase {
  const __nv_bfloat16* w;  // [n, k] row-major; SWIGLU: gate and up rows interleaved (2i gate, 2i+1 up)
  const float* x;          // [k]: the previous phase's output
  float* y;                // [n] (SWIGLU: [n / 2]; MIX: y[i] = x[i] for i < n)
  int k, n, kind, norm;    // norm: RMS-normalise x first (the norms before qkv, gate/up and head)
  int rows_per_cta;        // weight rows each CTA owns (even for SWIGLU)
  int chunk_rows;          // weight rows per ring stage
};

// ---- PTX helpers (sm_90): mbarriers and bulk copies shared with the code predictor -----------

#include "../../cadence/kernels/cuda/sm90.cuh"


__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ float poll_word(const unsigned long long* p, unsigned tag) {
  unsigned long long v = load_relaxed(p);
  while ((unsigned)(v >> 32) != tag) v = load_relaxed(p);
  return __uint_as_float((unsigned)v);
}
__device__ __forceinline__ void consumers_sync(int threads) {  // named barrier 1: the producer stays out
  asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Two weight rows (bf16, in shared memory) against x (floats, in shared memory) over elements
// [k0, k1) (multiples of 256), each summed over the warp: the rows share the x loads, and up to four
// k-steps are in flight at once.
__device__ __forceinline__ float2 rows_dot(const unsigned char* row_a, const unsigned char* row_b, const float* xs,
                                           int k0, int k1, int lane) {
  const uint4* wa = reinterpret_cast<const uint4*>(row_a);
  const uint4* wb = reinterpret_cast<const uint4*>(row_b);
  const float4* x = reinterpret_cast<const float4*>(xs);
  float acc_a[4] = {0.f, 0.f, 0.f, 0.f}, acc_b[4] = {0.f, 0.f, 0.f, 0.f};
  const int end = k1 / 8;
  for (int base = k0 / 8 + lane; base < end; base += 128) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = base + 32 * u;
      if (i < end) {
        const uint4 va = wa[i], vb = wb[i];
        const float4 x0 = x[2 * i], x1 = x[2 * i + 1];
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        const __nv_bfloat162* ha = reinterpret_cast<const __nv_bfloat162*>(&va);
        const __nv_bfloat162* hb = reinterpret_cast<const __nv_bfloat162*>(&vb);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 fa = __bfloat1622float2(ha[e]), fb = __bfloat1622float2(hb[e]);
          acc_a[u] += fa.x * xv[2 * e] + fa.y * xv[2 * e + 1];
          acc_b[u] += fb.x * xv[2 * e] + fb.y * xv[2 * e + 1];
        }
      }
    }
  }
  return make_float2(warp_sum((acc_a[0] + acc_a[1]) + (acc_a[2] + acc_a[3])),
                     warp_sum((acc_b[0] + acc_b[1]) + (acc_b[2] + acc_b[3])));
}

// How many warps share one row pair's k range when a chunk has `pairs` pairs: the most that the
// idle warps allow, a power of two, with each slice a multiple of 256 elements.
__device__ __forceinline__ int k_slices(int warps, int pairs, int k) {
  int slices = 1;
  while (2 * slices * pairs <= warps && (k / (2 * slices)) % 256 == 0 && k % (2 * slices) == 0) slices *= 2;
  return slices;
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + __expf(-g)) * u; }

// ---- the persistent kernel ------------------------------------------------------------------

template <int CW>  // consumer warps; one more warp produces
__global__ void __launch_bounds__((CW + 1) * 32, 1)
    chain_kernel(const Phase* __restrict__ phases, int num_phases, unsigned* counter, int stages, int stage_bytes,
                 int mode, const float* acts, unsigned long long* ll) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  float* xs = reinterpret_cast<float*>(smem + (size_t)stages * stage_bytes);
  float* partial = xs + MAX_K;  // [CW] for the norm's sum of squares
  float2* split_sums = reinterpret_cast<float2*>(partial + 32);  // [2][CW]: SPLITK's partial dots, by chunk parity
  unsigned long long* full = reinterpret_cast<unsigned long long*>(split_sums + 2 * 32);
  unsigned long long* empty = full + stages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grid = gridDim.x, cta = blockIdx.x;
  constexpr int consumers = CW * 32;
  // LL: the word of activation `a` (a pointer into `acts`) in `ll`, at the same offset
  auto word = [&](const float* a) { return ll + (a - acts); };

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], CW);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == CW) {  // producer: this CTA's weight rows of every phase, in order, as far ahead as the ring allows
    if (lane != 0 || !(mode & WEIGHTS)) return;
    int it = 0;
    for (int p = 0; p < num_phases; ++p) {
      const Phase ph = phases[p];
      if (ph.kind == MIX) continue;
      const int r1 = min((cta + 1) * ph.rows_per_cta, ph.n);
      for (int r = cta * ph.rows_per_cta; r < r1; r += ph.chunk_rows, ++it) {
        const int s = it % stages;
        mbar_wait(&empty[s], ((it / stages) & 1) ^ 1);  // a fresh barrier passes parity 1 at once
        const unsigned bytes = min(ph.chunk_rows, r1 - r) * ph.k * 2;
        mbar_expect_tx(&full[s], bytes);
        bulk_load(ring + (size_t)s * stage_bytes, ph.w + (size_t)r * ph.k, bytes, &full[s]);
      }
    }
    return;
  }

  int it = 0;
  for (int p = 0; p < num_phases; ++p) {
    const Phase ph = phases[p];
    const unsigned tag = p;  // of this phase's input: phase p - 1 tags its outputs p (phase 0's input: 0)
    auto put = [&](float* y, float v) {
      if (mode & LL) store_relaxed(word(y), (unsigned long long)(tag + 1) << 32 | __float_as_uint(v));
      else *y = v;
    };
    if (mode & STREAM) {  // the copy engine's streaming rate through this ring, nothing else
      if (ph.kind == MIX) continue;
      const int r1 = min((cta + 1) * ph.rows_per_cta, ph.n);
      for (int r = cta * ph.rows_per_cta; r < r1; r += ph.chunk_rows, ++it) {
        mbar_wait(&full[it % stages], (it / stages) & 1);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[it % stages]);
      }
      continue;
    }
    if (p > 0 && (mode & WAIT)) {  // every CTA has finished phase p - 1
      if (threadIdx.x == 0)
        while (load_acquire(counter) < (unsigned)(grid * p)) {
        }
      consumers_sync(consumers);
    }
    if (ph.kind == MIX) {  // a few KB through a few CTAs (L2 round trips, no weights)
      const int r1 = min((cta + 1) * MIX_ROWS, ph.n);
      for (int i = cta * MIX_ROWS + threadIdx.x; i < r1; i += consumers)
        put(ph.y + i, mode & LL ? poll_word(word(ph.x + i), tag) : __ldcg(ph.x + i));
    } else {
      const int r0 = cta * ph.rows_per_cta, r1 = min(r0 + ph.rows_per_cta, ph.n);
      float scale = 1.f;
      if (r0 < r1) {  // x through L2 (written by other CTAs), and its RMS if the phase normalises
        float sq = 0.f;
        if (mode & LL) {  // every word's load in flight at once, then poll the ones not ready yet
          constexpr int per_thread = MAX_K / consumers;
          unsigned long long v[per_thread];
          const unsigned long long* src = word(ph.x);
#pragma unroll
          for (int u = 0; u < per_thread; ++u) {
            const int i = threadIdx.x + u * consumers;
            if (i < ph.k) v[u] = load_relaxed(src + i);
          }
#pragma unroll
          for (int u = 0; u < per_thread; ++u) {
            const int i = threadIdx.x + u * consumers;
            if (i < ph.k) {
              while ((unsigned)(v[u] >> 32) != tag) v[u] = load_relaxed(src + i);
              const float f = __uint_as_float((unsigned)v[u]);
              xs[i] = f;
              sq += f * f;
            }
          }
        } else {
          for (int i = threadIdx.x * 4; i < ph.k; i += consumers * 4) {
            float4 v = __ldcg(reinterpret_cast<const float4*>(ph.x + i));
            *reinterpret_cast<float4*>(xs + i) = v;
            sq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
          }
        }
        if (ph.norm) {
          sq = warp_sum(sq);
          if (lane == 0) partial[warp] = sq;
        }
        consumers_sync(consumers);
        if (ph.norm) {
          float total = 0.f;
          for (int w = 0; w < CW; ++w) total += partial[w];
          scale = rsqrtf(total / ph.k + 1e-6f);
        }
      }
      for (int r = r0; r < r1; r += ph.chunk_rows, ++it) {
        const int s = it % stages, rows = min(ph.chunk_rows, r1 - r);
        const unsigned char* chunk = ring + (size_t)s * stage_bytes;
        if (mode & WEIGHTS) {
          mbar_wait(&full[s], (it / stages) & 1);
          // Row pairs (SWIGLU: rows 2i gate and 2i+1 up make output (r + 2i) / 2; an odd GEMV chunk's
          // last row pairs with itself). Without SPLITK each warp takes whole pairs; with it, each
          // pair's k range is split over `slices` warps and the slice-0 warp adds their sums.
          const int pairs = (rows + 1) / 2;
          const int slices = mode & SPLITK ? k_slices(CW, pairs, ph.k) : 1;
          const int span = ph.k / slices, slice = warp / pairs;
          auto finish = [&](int j, float2 d) {
            const int j2 = min(j + 1, rows - 1);
            if (ph.kind == SWIGLU) {
              put(ph.y + (r + j) / 2, silu_mul(d.x * scale, d.y * scale));
            } else {
              put(ph.y + r + j, d.x * scale);
              if (j2 != j) put(ph.y + r + j2, d.y * scale);
            }
          };
          if (slices == 1) {
            for (int j = 2 * warp; j < rows; j += 2 * CW) {
              const int j2 = min(j + 1, rows - 1);
              const float2 d = rows_dot(chunk + (size_t)j * ph.k * 2, chunk + (size_t)j2 * ph.k * 2, xs, 0, ph.k, lane);
              if (lane == 0) finish(j, d);
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
          } else {  // pairs * slices <= CW: one (pair, slice) per warp, the rest idle
            float2* sums = split_sums + (it & 1) * 32;
            const int j = 2 * (warp % pairs), j2 = min(j + 1, rows - 1);
            if (slice < slices) {
              const float2 d = rows_dot(chunk + (size_t)j * ph.k * 2, chunk + (size_t)j2 * ph.k * 2, xs, slice * span,
                                        (slice + 1) * span, lane);
              if (lane == 0) sums[warp] = d;
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
            // The partial sums are in. `sums` alternates by chunk, so one sync a chunk will do: a
            // phase's chunks only shrink, so once split its later chunks split too (and sync).
            consumers_sync(consumers);
            if (warp < pairs && lane == 0) {
              float2 d = sums[warp];
              for (int t = 1; t < slices; ++t) d.x += sums[warp + t * pairs].x, d.y += sums[warp + t * pairs].y;
              finish(j, d);
            }
          }
        } else {  // the chain alone: a value per output row that still depends on x
          const int step = ph.kind == SWIGLU ? 2 : 1;
          for (int j = threadIdx.x * step; j < rows; j += consumers * step)
            put(ph.y + (r + j) / step, xs[(r + j) % ph.k] * scale);
        }
      }
    }
    consumers_sync(consumers);  // this CTA's outputs are written (and xs is free for the next phase)
    if (threadIdx.x == 0 && !(mode & LL))  // release: ordered after every consumer's stores by the barrier above
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
  }
}

// ---- reference: one launch per phase, one block per output --------------------------------------

__global__ void reference_phase(Phase ph) {
  __shared__ float red[32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  if (ph.kind == MIX) {
    const int i = blockIdx.x * blockDim.x + tid;
    if (i < ph.n) ph.y[i] = ph.x[i];
    return;
  }
  auto block_sum = [&](float v) {
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = 0.f;
    for (int w = 0; w < warps; ++w) t += red[w];
    return t;
  };
  float scale = 1.f;
  if (ph.norm) {
    float sq = 0.f;
    for (int i = tid; i < ph.k; i += blockDim.x) sq += ph.x[i] * ph.x[i];
    scale = rsqrtf(block_sum(sq) / ph.k + 1e-6f);
  }
  auto dot = [&](int row) {
    float acc = 0.f;
    for (int i = tid; i < ph.k; i += blockDim.x) acc += __bfloat162float(ph.w[(size_t)row * ph.k + i]) * ph.x[i];
    return block_sum(acc) * scale;
  };
  if (ph.kind == GEMV) {
    float d = dot(blockIdx.x);
    if (tid == 0) ph.y[blockIdx.x] = d;
  } else {
    float g = dot(2 * blockIdx.x), u = dot(2 * blockIdx.x + 1);
    if (tid == 0) ph.y[blockIdx.x] = silu_mul(g, u);
  }
}

__global__ void fill_random(__nv_bfloat16* w, size_t n, float bound, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    w[i] = __float2bfloat16((h / 4294967296.f * 2.f - 1.f) * bound);
  }
}

// ---- host -----------------------------------------------------------------------------------

__global__ void ll_from_floats(unsigned long long* ll, const float* x, int n, unsigned tag) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) ll[i] = (unsigned long long)tag << 32 | __float_as_uint(x[i]);
}
__global__ void floats_from_ll(float* x, const unsigned long long* ll, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = __uint_as_float((unsigned)ll[i]);
}

struct Chain {
  std::vector<Phase> phases;  // x and y point into `acts`
  float* acts = nullptr;
  unsigned long long* ll = nullptr;  // LL variants: the same activations as {value, tag} words
  float* ref_acts = nullptr;  // the reference's outputs, at the same offsets
  size_t act_bytes = 0;
  size_t weight_bytes = 0;
};

static __nv_bfloat16* random_weights(int n, int k, unsigned seed) {
  __nv_bfloat16* w;
  CHECK(cudaMalloc(&w, (size_t)n * k * 2));
  fill_random<<<1024, 256>>>(w, (size_t)n * k, std::sqrt(3.f / k), seed);  // variance 1/k: outputs stay O(1)
  CHECK(cudaGetLastError());
  return w;
}

// 15 steps x (5 layers x 5 phases + head + sampler) over 5 layers' and 15 heads' random weights.
// `stand_ins` false leaves out the attention and sampler phases (315 phases): what the chain costs if
// they fold into the phases that consume them (each CTA doing the few KB of work itself).
static Chain build_chain(int grid, bool stand_ins) {
  const int hidden = 1024, qkv = 4096, heads_dim = 2048, inter = 3072, vocab = 2048, layers = 5, steps = 15;
  struct Layer { __nv_bfloat16 *qkv, *o, *gate_up, *down; };
  std::vector<Layer> ws;
  unsigned seed = 1;
  for (int l = 0; l < layers; ++l)
    ws.push_back({random_weights(qkv, hidden, seed++), random_weights(hidden, heads_dim, seed++),
                  random_weights(2 * inter, hidden, seed++), random_weights(hidden, inter, seed++)});
  std::vector<__nv_bfloat16*> heads;
  for (int j = 0; j < steps; ++j) heads.push_back(random_weights(vocab, hidden, seed++));

  Chain c;
  c.weight_bytes = (size_t)steps * (layers * (qkv * hidden + hidden * heads_dim + 2 * inter * hidden + hidden * inter) +
                                    vocab * hidden) * 2;
  std::vector<Phase> spec;  // x and y as offsets into one activation buffer, fixed up below
  size_t offset = hidden;   // [0, hidden): the first input
  size_t prev = 0;
  auto add = [&](const __nv_bfloat16* w, int k, int n, int kind, int norm) {
    Phase ph{w, (const float*)prev, (float*)offset, k, n, kind, norm, 0, 0};
    spec.push_back(ph);
    prev = offset;
    offset += MAX_K;
  };
  for (int j = 0; j < steps; ++j) {
    for (int l = 0; l < layers; ++l) {
      add(ws[l].qkv, hidden, qkv, GEMV, 1);
      if (stand_ins) add(nullptr, qkv, heads_dim, MIX, 0);
      add(ws[l].o, heads_dim, hidden, GEMV, 0);
      add(ws[l].gate_up, hidden, 2 * inter, SWIGLU, 1);
      add(ws[l].down, inter, hidden, GEMV, 0);
    }
    add(heads[j], hidden, vocab, GEMV, 1);
    if (stand_ins) add(nullptr, vocab, hidden, MIX, 0);  // the sampler's stand-in: next step's input
  }
  for (Phase& ph : spec) {  // rows per CTA: the fewest that cover n over the grid (even for SwiGLU pairs)
    if (ph.kind == MIX) continue;
    ph.rows_per_cta = (ph.n + grid - 1) / grid;
    if (ph.kind == SWIGLU) ph.rows_per_cta += ph.rows_per_cta % 2;
  }
  const size_t act_floats = (spec.size() + 1) * (size_t)MAX_K;  // >= offset; main() copies this much
  CHECK(cudaMalloc(&c.acts, act_floats * sizeof(float)));
  CHECK(cudaMalloc(&c.ref_acts, act_floats * sizeof(float)));
  CHECK(cudaMalloc(&c.ll, act_floats * sizeof(unsigned long long)));
  std::vector<float> x0(hidden);
  for (int i = 0; i < hidden; ++i) x0[i] = std::sin(0.37f * i) + 0.1f;
  CHECK(cudaMemcpy(c.acts, x0.data(), hidden * sizeof(float), cudaMemcpyHostToDevice));
  c.act_bytes = act_floats * sizeof(float);
  for (const Phase& s : spec) {
    Phase a = s;
    a.x = c.acts + (size_t)s.x, a.y = c.acts + (size_t)s.y;
    c.phases.push_back(a);
  }
  return c;
}

struct Variant {
  const char* name;
  int mode, warps, stages, stage_bytes;
  bool stand_ins;
};

template <int CW>
static void launch(const Phase* phases, int num_phases, unsigned* counter, const Variant& v, int grid, size_t smem,
                   const Chain& c) {
  void* args[] = {(void*)&phases, (void*)&num_phases, (void*)&counter, (void*)&v.stages, (void*)&v.stage_bytes,
                  (void*)&v.mode, (void*)&c.acts, (void*)&c.ll};
  CHECK(cudaFuncSetAttribute((void*)chain_kernel<CW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  // cooperative: the launch fails rather than deadlocks if the grid could not all be resident
  CHECK(cudaLaunchCooperativeKernel((void*)chain_kernel<CW>, grid, (CW + 1) * 32, args, smem, 0));
}

// The largest |y - ref| / max|ref| over every phase, each phase's reference computed from the
// megakernel's own input to it (a chain of 405 random layers amplifies rounding differences, so
// comparing whole chains would not tell a bug from chaos).
static double local_error(const Chain& c) {
  for (const Phase& ph : c.phases) {
    Phase r = ph;
    r.y = c.ref_acts + (ph.y - c.acts);
    const int blocks = ph.kind == MIX ? (ph.n + 255) / 256 : ph.kind == SWIGLU ? ph.n / 2 : ph.n;
    reference_phase<<<blocks, 256>>>(r);
  }
  CHECK(cudaGetLastError());
  std::vector<float> a(c.act_bytes / sizeof(float)), b(a.size());
  CHECK(cudaMemcpy(a.data(), c.acts, c.act_bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(b.data(), c.ref_acts, c.act_bytes, cudaMemcpyDeviceToHost));
  double err = 0;
  for (const Phase& ph : c.phases) {
    const size_t base = ph.y - c.acts;
    const int outs = ph.kind == SWIGLU ? ph.n / 2 : ph.n;
    double ref_max = 1e-30, diff = 0;
    for (int i = 0; i < outs; ++i) {
      ref_max = std::max(ref_max, (double)std::fabs(b[base + i]));
      const double d = std::fabs((double)a[base + i] - b[base + i]);
      diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    }
    err = std::max(err, diff / ref_max);
  }
  return err;
}

int main(int argc, char** argv) {
  int reps = 20;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "reps=", 5)) reps = std::atoi(argv[i] + 5);
    else if (!std::strncmp(argv[i], "json=", 5)) json = argv[i] + 5;
    else {
      std::fprintf(stderr, "usage: %s [reps=N] [json=FILE]\n", argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int grid = prop.multiProcessorCount;
  const Chain chains[2] = {build_chain(grid, false), build_chain(grid, true)};
  CHECK(cudaDeviceSynchronize());

  const Variant variants[] = {
      {"full", WAIT | WEIGHTS, 8, 6, 32768, true},  {"full", WAIT | WEIGHTS, 16, 6, 32768, true},
      {"full", WAIT | WEIGHTS, 4, 6, 32768, true},  {"full", WAIT | WEIGHTS, 8, 12, 16384, true},
      {"nobarrier", WEIGHTS, 8, 6, 32768, true},    {"nobarrier", WEIGHTS, 16, 6, 32768, true},
      {"noweights", WAIT, 8, 6, 32768, true},       {"noweights", WAIT, 16, 6, 32768, true},
      {"full", WAIT | WEIGHTS, 8, 6, 32768, false}, {"full", WAIT | WEIGHTS, 16, 6, 32768, false},
      {"noweights", WAIT, 8, 6, 32768, false},   {"stream", WEIGHTS | STREAM, 8, 6, 32768, true},
      {"stream", WEIGHTS | STREAM, 8, 12, 16384, true}, {"stream", WEIGHTS | STREAM, 8, 3, 65536, true},
      {"ll", LL | WEIGHTS, 8, 6, 32768, true},     {"ll", LL | WEIGHTS, 16, 6, 32768, true},
      {"ll", LL | WEIGHTS, 8, 6, 32768, false},    {"ll", LL | WEIGHTS, 16, 6, 32768, false},
      {"ll_noweights", LL, 8, 6, 32768, true},     {"ll_noweights", LL, 16, 6, 32768, true},
      {"full_splitk", WAIT | WEIGHTS | SPLITK, 8, 6, 32768, true},
      {"full_splitk", WAIT | WEIGHTS | SPLITK, 16, 6, 32768, true},
      {"nobarrier_splitk", WEIGHTS | SPLITK, 16, 6, 32768, true},
      {"ll_splitk", LL | WEIGHTS | SPLITK, 8, 6, 32768, true},
      {"ll_splitk", LL | WEIGHTS | SPLITK, 16, 6, 32768, true},
      {"ll_splitk", LL | WEIGHTS | SPLITK, 16, 3, 65536, true},
      {"ll_splitk", LL | WEIGHTS | SPLITK, 16, 6, 32768, false},
  };
  Phase* d_phases;
  unsigned* counter;
  CHECK(cudaMalloc(&d_phases, chains[1].phases.size() * sizeof(Phase)));
  CHECK(cudaMalloc(&counter, sizeof(unsigned)));
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));

  std::printf("%s, %d SMs\n", prop.name, grid);
  std::printf("%-10s %6s %5s %6s %8s %10s %10s %8s %10s\n", "variant", "phases", "warps", "stages", "stage_kb",
              "ms/frame", "us/phase", "GB/s", "max_err");
  FILE* out = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  if (out) std::fprintf(out, "[\n");
  bool first = true;
  for (const Variant& v : variants) {
    const Chain& chain = chains[v.stand_ins];
    const int n = (int)chain.phases.size();
    std::vector<Phase> phases = chain.phases;
    for (Phase& ph : phases) {
      if (ph.kind == MIX) continue;
      const int fit = std::min(ph.rows_per_cta, v.stage_bytes / (ph.k * 2));
      ph.chunk_rows = ph.kind == SWIGLU ? std::max(2, fit & ~1) : std::max(1, fit);
    }
    CHECK(cudaMemcpy(d_phases, phases.data(), n * sizeof(Phase), cudaMemcpyHostToDevice));
    const size_t smem = (size_t)v.stages * v.stage_bytes + (MAX_K + 32 + 2 * 2 * 32) * sizeof(float) + 2 * v.stages * 8;
    std::vector<float> ms;
    for (int r = 0; r < reps + 3; ++r) {
      CHECK(cudaMemsetAsync(counter, 0, sizeof(unsigned)));
      // NaN everywhere but the first input: an output never written shows in the check
      CHECK(cudaMemsetAsync(chain.acts + 1024, 0xff, chain.act_bytes - 1024 * sizeof(float)));
      if (v.mode & LL) {  // tag 0xffffffff matches no phase; the first input carries tag 0
        CHECK(cudaMemsetAsync(chain.ll, 0xff, chain.act_bytes * 2));
        ll_from_floats<<<4, 256>>>(chain.ll, chain.acts, 1024, 0);
      }
      CHECK(cudaEventRecord(t0));
      if (v.warps == 4) launch<4>(d_phases, n, counter, v, grid, smem, chain);
      else if (v.warps == 8) launch<8>(d_phases, n, counter, v, grid, smem, chain);
      else launch<16>(d_phases, n, counter, v, grid, smem, chain);
      CHECK(cudaEventRecord(t1));
      CHECK(cudaEventSynchronize(t1));
      float t;
      CHECK(cudaEventElapsedTime(&t, t0, t1));
      if (r >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const float med = ms[ms.size() / 2];
    const bool checked = (v.mode & WEIGHTS) && ((v.mode & WAIT) || (v.mode & LL)) && !(v.mode & STREAM);
    if (checked && (v.mode & LL)) floats_from_ll<<<1024, 256>>>(chain.acts, chain.ll, chain.act_bytes / sizeof(float));
    const double err = checked ? local_error(chain) : -1;
    std::printf("%-10s %6d %5d %6d %8d %10.3f %10.2f %8.0f %10.2e\n", v.name, n, v.warps, v.stages, v.stage_bytes / 1024,
                med, med * 1e3 / n, chain.weight_bytes / (med * 1e-3) / 1e9, err);
    if (out)
      std::fprintf(out,
                   "%s  {\"variant\": \"%s\", \"phases\": %d, \"warps\": %d, \"stages\": %d, \"stage_bytes\": %d, "
                   "\"ms_per_frame\": %.4f, \"us_per_phase\": %.3f, \"weight_gb\": %.4f, \"max_rel_err\": %.3e}",
                   first ? "" : ",\n", v.name, n, v.warps, v.stages, v.stage_bytes, med, med * 1e3 / n,
                   chain.weight_bytes / 1e9, err);
    first = false;
  }
  if (out) {
    std::fprintf(out, "\n]\n");
    std::fclose(out);
  }
  return 0;
}
