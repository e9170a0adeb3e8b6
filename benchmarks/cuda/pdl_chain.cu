// A chain of one-row GEMMs as separate kernels under programmatic dependent launch (PDL), each
// CTA's whole weight slab copied into shared memory by the copy engine (cp.async.bulk) *before*
// the kernel waits for the one before it (perf-notes #94).
//
// Question it answers: the Triton layer kernels stream each GEMM's weights at ~2.5 TB/s into the
// SMs once their wait returns, whatever their lead, depth or L2 prefetch (#92, #93), and that is
// ~75 % of the batch-1 walk. Here a kernel's weights are in flight while the kernel before it
// runs, and after its wait only the activation row (2-6 KB from L2), the dots and the store are
// left on the chain. If a GEMM then costs ~2-3 us (release + input + dots) instead of the layer
// kernels' 3-7.75, the walk's 103 layers lose ~0.7 ms and batch 1 nears issue 4's 2.0 ms.
//
// Model: L layers of the 0.6B code predictor / talker shapes at one row, bf16 weights and
// activations, four GEMMs a layer, each reading the previous one's output (a real data chain):
//   qkv 1024 -> 4096, o 2048 -> 1024 (qkv's first 2048 outputs stand in for the attention),
//   gate/up 1024 -> 2 x 3072 with SwiGLU, down 3072 -> 1024 (the next layer's input).
// No norms and no attention: the chain of `benchmarks/kernel_trace.py --rows 1 --no-norms`
// (Triton: 18.8 us a layer on the H200, #93). Every GEMM uses 128 CTAs (n / 128 output rows each).
//
// Build and run (on the H200; `bash benchmarks/h200.sh pdlchain94`):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/pdl_chain benchmarks/cuda/pdl_chain.cu
//   /tmp/pdl_chain [layers=24] [reps=30] [json=FILE]
// Variants (mode bits below): the copy before or after the wait, trigger first or wait first,
// without weights (the chain alone), without waits (the weight stream alone), without PDL, with
// L2-resident weights (every layer the same), evict-first copies. Each variant is timed as a CUDA
// graph of 4 x layers launches, then run once more with clock stamps (globaltimer) per CTA. Every
// GEMM of a checked variant is compared with a plain reference kernel fed the same input.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../cadence/kernels/cuda/sm90.cuh"

#include "check.cuh"

constexpr int THREADS = 256;
constexpr int CTAS = 128;  // every GEMM: n / 128 output rows a CTA (<= the H200's 132 SMs)
constexpr int STAMPS = 6;  // start, copy issued, wait returned, input in, weights in, end
// Mode bits. AHEAD: the weight copy before the PDL wait (else after it). TRIGGER_FIRST: let the next
// kernel launch at once (else after the wait). NOWEIGHTS: no copy (the chain alone). NOWAIT: no wait
// (the weight stream alone; outputs garbage). EVICT: the copy marked evict-first in L2.
// NORM: the residual add and RMSNorm before qkv and gate/up done by every CTA of those GEMMs on its
// input row (no norm kernel between them and the GEMM before).
constexpr int AHEAD = 1, TRIGGER_FIRST = 2, NOWEIGHTS = 4, NOWAIT = 8, EVICT = 16, NORM = 32;
constexpr float EPS = 1e-6f;

struct Gemm {
  const __nv_bfloat16* x;  // [k]
  const __nv_bfloat16* w;  // [n, k] row-major; swiglu: [gate; up], 2n rows
  __nv_bfloat16* y;        // [n]
  int k, n, rows, swiglu;  // rows: outputs a CTA
  // The norm folded in (mode NORM; qkv and gate/up): the input is rms_norm(x + res) * norm_w, and
  // CTA 0 stores the sum x + res to res_out (the next residual). Null for o and down.
  const __nv_bfloat16* res;
  const __nv_bfloat16* norm_w;
  __nv_bfloat16* res_out;
};

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16(v)); }

// Eight bf16 products of a weight chunk and an input chunk (16 bytes each), in fp32.
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 fa = __bfloat1622float2(a[e]), fb = __bfloat1622float2(b[e]);
    s += fa.x * fb.x + fa.y * fb.y;
  }
  return s;
}

// NR weight rows against the input row (both in shared memory; a lane takes the chunks
// k = 8 * (lane + 32 j)), each summed over the warp. The rows go together so that their loads and
// reductions overlap and each input chunk is read once for all of them: a CTA's dots then read its
// slab from shared memory and little else. Row q is at
// base + (q / PAIR) * step + (q % PAIR) * up (PAIR 2: a SwiGLU gate row and its up row).
template <int KC, int NR, int PAIR>
__device__ __forceinline__ void dot_rows(const uint4* xs, const __nv_bfloat16* base, size_t step, size_t up,
                                         float (&out)[NR], int lane) {
  float acc[NR][2] = {};
#pragma unroll
  for (int j = 0; j < KC; ++j) {
    const uint4 x = xs[lane + 32 * j];
#pragma unroll
    for (int q = 0; q < NR; ++q) {
      const uint4* row = reinterpret_cast<const uint4*>(base + (q / PAIR) * step + (q % PAIR) * up);
      acc[q][j & 1] += dot8(row[lane + 32 * j], x);
    }
  }
#pragma unroll
  for (int q = 0; q < NR; ++q) out[q] = acc[q][0] + acc[q][1];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int q = 0; q < NR; ++q) out[q] += __shfl_xor_sync(0xffffffffu, out[q], o);
}

// Lane 0 stores the NR / PAIR outputs of rows r, r + 8, ... (SwiGLU rounded where the unfused
// GEMM and silu_mul round).
template <int NR, int PAIR>
__device__ __forceinline__ void store_rows(const float (&v)[NR], __nv_bfloat16* y, int first, int n, int lane) {
  if (lane) return;
#pragma unroll
  for (int i = 0; i < NR / PAIR; ++i) {
    float out = v[i * PAIR];
    if (PAIR == 2) {
      const float gb = bf16_round(v[2 * i]);
      out = bf16_round(gb / (1.f + __expf(-gb))) * bf16_round(v[2 * i + 1]);
    }
    if (first + 8 * i < n) y[first + 8 * i] = __float2bfloat16(out);
  }
}

// xs = rms_norm(x + res) * norm_w, rounded where the norm kernel rounds (the sum, the normalised
// row, the product); the CTA's threads each take at most two 8-element chunks. store_sum: also
// write the sum (the next residual).
template <int K>
__device__ __forceinline__ void normed_input(const Gemm& g, uint4* xs, bool store_sum) {
  constexpr int CHUNKS = K / 8, PER = (CHUNKS + THREADS - 1) / THREADS;
  static_assert(PER <= 2, "at most two chunks a thread");
  __shared__ float partial[THREADS / 32];
  const int tid = threadIdx.x;
  float v[PER][8];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < PER; ++c) {
    const int i = tid + c * THREADS;
    if (i >= CHUNKS) break;
    const uint4 a = reinterpret_cast<const uint4*>(g.x)[i], b = reinterpret_cast<const uint4*>(g.res)[i];
    const __nv_bfloat16* ha = reinterpret_cast<const __nv_bfloat16*>(&a);
    const __nv_bfloat16* hb = reinterpret_cast<const __nv_bfloat16*>(&b);
    uint4 sum;
    __nv_bfloat16* hs = reinterpret_cast<__nv_bfloat16*>(&sum);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      hs[e] = __float2bfloat16(__bfloat162float(ha[e]) + __bfloat162float(hb[e]));
      v[c][e] = __bfloat162float(hs[e]);
      ss += v[c][e] * v[c][e];
    }
    if (store_sum) reinterpret_cast<uint4*>(g.res_out)[i] = sum;
  }
  ss = warp_sum(ss);
  if (tid % 32 == 0) partial[tid / 32] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w) total += partial[w];
  const float inv = 1.f / sqrtf(total / K + EPS);
#pragma unroll
  for (int c = 0; c < PER; ++c) {
    const int i = tid + c * THREADS;
    if (i >= CHUNKS) break;
    const uint4 wv = reinterpret_cast<const uint4*>(g.norm_w)[i];
    const __nv_bfloat16* hw = reinterpret_cast<const __nv_bfloat16*>(&wv);
    uint4 out;
    __nv_bfloat16* ho = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
    for (int e = 0; e < 8; ++e) ho[e] = __float2bfloat16(__bfloat162float(hw[e]) * bf16_round(v[c][e] * inv));
    xs[i] = out;
  }
}

// KC: K / 256. PAIR 2: SwiGLU (gate and up slabs). At most 128 registers, so that the next
// kernel's CTA fits on the SM beside this one (perf-notes #89).
template <int KC, int PAIR>
__global__ void __launch_bounds__(THREADS, 2) gemv_kernel(Gemm g, int mode, unsigned long long* stamps) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int K = KC * 256;
  const int slab_rows = g.rows * (g.swiglu ? 2 : 1);
  const unsigned slab_bytes = (unsigned)g.rows * K * 2;
  __nv_bfloat16* ws = reinterpret_cast<__nv_bfloat16*>(smem);
  uint4* xs = reinterpret_cast<uint4*>(smem + (size_t)slab_rows * K * 2);
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(xs + K / 8);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n0 = blockIdx.x * g.rows;
  unsigned long long t[STAMPS] = {};
  if (stamps) t[0] = globaltimer();
  if (mode & TRIGGER_FIRST) pdl_trigger();
  const bool weights = !(mode & NOWEIGHTS);
  auto issue = [&] {  // one thread: the whole slab (the gate and up slabs for SwiGLU) on one mbarrier
    if (tid != 0 || !weights) return;
    mbar_init(bar, 1);
    mbar_init_fence();
    mbar_expect_tx(bar, slab_bytes * (g.swiglu ? 2 : 1));
    const __nv_bfloat16* src = g.w + (size_t)n0 * K;
    if (mode & EVICT) bulk_load_once(ws, src, slab_bytes, bar);
    else bulk_load(ws, src, slab_bytes, bar);
    if (g.swiglu) {
      const __nv_bfloat16* up = g.w + (size_t)(g.n + n0) * K;
      if (mode & EVICT) bulk_load_once(ws + (size_t)g.rows * K, up, slab_bytes, bar);
      else bulk_load(ws + (size_t)g.rows * K, up, slab_bytes, bar);
    }
  };
  if (mode & AHEAD) issue();
  if (stamps) t[1] = globaltimer();
  if (!(mode & NOWAIT)) pdl_wait();
  if (!(mode & TRIGGER_FIRST)) pdl_trigger();
  if (stamps) t[2] = globaltimer();
  if (!(mode & AHEAD)) issue();
  // The input row: written by the kernel before, so only after the wait; into shared memory once.
  if ((mode & NORM) && g.norm_w) normed_input<K>(g, xs, blockIdx.x == 0);
  else
    for (int i = tid; i < K / 8; i += THREADS) xs[i] = reinterpret_cast<const uint4*>(g.x)[i];
  __syncthreads();
  if (stamps) t[3] = globaltimer();
  if (weights) mbar_wait(bar, 0);
  if (stamps) t[4] = globaltimer();
  // This warp's rows: r = warp, warp + 8, ...; four at a time (two SwiGLU pairs) where K is short
  // enough for the registers (the long-K shapes have one row a warp), then one by one.
  constexpr int NR = KC <= 4 ? 4 : PAIR;
  const int count = g.rows > warp ? (g.rows - warp + 7) / 8 : 0;
  const size_t step = (size_t)8 * K, up = (size_t)g.rows * K;
  int i = 0;
  for (; i + NR / PAIR <= count; i += NR / PAIR) {
    float v[NR];
    dot_rows<KC, NR, PAIR>(xs, ws + (size_t)(warp + 8 * i) * K, step, up, v, lane);
    store_rows<NR, PAIR>(v, g.y, n0 + warp + 8 * i, g.n, lane);
  }
  for (; i < count; ++i) {
    float v[PAIR];
    dot_rows<KC, PAIR, PAIR>(xs, ws + (size_t)(warp + 8 * i) * K, step, up, v, lane);
    store_rows<PAIR, PAIR>(v, g.y, n0 + warp + 8 * i, g.n, lane);
  }
  if (stamps) {
    __syncthreads();
    t[5] = globaltimer();
    if (tid == 0)
      for (int s = 0; s < STAMPS; ++s) stamps[(size_t)blockIdx.x * STAMPS + s] = t[s];
  }
}

using KernelFn = void (*)(Gemm, int, unsigned long long*);
static KernelFn kernel_for(int k, bool swiglu) {
  switch (k) {
    case 1024: return swiglu ? gemv_kernel<4, 2> : gemv_kernel<4, 1>;
    case 2048: if (!swiglu) return gemv_kernel<8, 1>; break;
    case 3072: if (!swiglu) return gemv_kernel<12, 1>; break;
  }
  std::fprintf(stderr, "no kernel for k = %d, swiglu %d\n", k, swiglu);
  std::exit(1);
}

// The check's norm: one block writes rms_norm(x + res) * norm_w for the reference GEMM to read.
__global__ void reference_norm_kernel(Gemm g, __nv_bfloat16* normed) {
  __shared__ float total;
  if (threadIdx.x == 0) {
    float ss = 0.f;
    for (int i = 0; i < g.k; ++i) {
      const float v = bf16_round(__bfloat162float(g.x[i]) + __bfloat162float(g.res[i]));
      ss += v * v;
    }
    total = ss;
  }
  __syncthreads();
  const float inv = 1.f / sqrtf(total / g.k + EPS);
  for (int i = threadIdx.x; i < g.k; i += blockDim.x) {
    const float v = bf16_round(__bfloat162float(g.x[i]) + __bfloat162float(g.res[i]));
    normed[i] = __float2bfloat16(__bfloat162float(g.norm_w[i]) * bf16_round(v * inv));
  }
}

// The check: one warp an output, fp32 sums, the same roundings.
__global__ void reference_kernel(Gemm g, float* out) {
  const int o = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (o >= g.n) return;
  float gate = 0.f, up = 0.f;
  for (int i = lane; i < g.k; i += 32) {
    const float x = __bfloat162float(g.x[i]);
    gate += x * __bfloat162float(g.w[(size_t)o * g.k + i]);
    if (g.swiglu) up += x * __bfloat162float(g.w[(size_t)(g.n + o) * g.k + i]);
  }
  gate = warp_sum(gate), up = warp_sum(up);
  if (lane) return;
  if (!g.swiglu) {
    out[o] = gate;
    return;
  }
  const float gb = bf16_round(gate);
  out[o] = bf16_round(gb / (1.f + __expf(-gb))) * bf16_round(up);
}

__global__ void fill_kernel(__nv_bfloat16* p, size_t n, float scale, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    p[i] = __float2bfloat16(scale * ((h & 0xffffff) / 8388608.f - 1.f));
  }
}

struct Chain {
  std::vector<Gemm> gemms;  // 4 a layer: qkv, o, gate/up, down
  double weight_bytes = 0;
};

static __nv_bfloat16* alloc_bf16(size_t n) {
  __nv_bfloat16* p;
  CHECK(cudaMalloc(&p, n * 2));
  return p;
}

// shared_weights: every layer reads the same weights (30 MB: they stay in the 50 MB L2).
static Chain build_chain(int layers, bool shared_weights) {
  const int hidden = 1024, q = 2048, qkv = 4096, inter = 3072;
  Chain c;
  __nv_bfloat16* h = alloc_bf16(hidden);
  fill_kernel<<<4, 256>>>(h, hidden, 1.f, 7);
  struct Shape { int k, n, swiglu; };
  const Shape shapes[4] = {{hidden, qkv, 0}, {q, hidden, 0}, {hidden, inter, 1}, {inter, hidden, 0}};
  std::vector<__nv_bfloat16*> weights(4);
  __nv_bfloat16* residual = alloc_bf16(hidden);  // the residual stream: qkv and gate/up add to it
  fill_kernel<<<4, 256>>>(residual, hidden, 1.f, 11);
  for (int l = 0; l < layers; ++l) {
    __nv_bfloat16* out[4];
    for (int j = 0; j < 4; ++j) {
      const Shape s = shapes[j];
      const size_t count = (size_t)s.n * (s.swiglu ? 2 : 1) * s.k;
      if (l == 0 || !shared_weights) {
        weights[j] = alloc_bf16(count);
        fill_kernel<<<512, 256>>>(weights[j], count, std::sqrt(3.f / s.k) * (j == 3 ? 3.f : 1.f), 1000 * l + j);
      }
      if (l == 0 || !shared_weights) c.weight_bytes += count * 2.0;
      out[j] = alloc_bf16(s.n);
    }
    const __nv_bfloat16* ins[4] = {h, out[0], out[1], out[2]};
    for (int j = 0; j < 4; ++j) {
      Gemm g = {ins[j], weights[j], out[j], shapes[j].k, shapes[j].n, shapes[j].n / CTAS, shapes[j].swiglu};
      if (j == 0 || j == 2) {  // the norms before qkv and gate/up
        __nv_bfloat16* norm_w = alloc_bf16(hidden);
        fill_kernel<<<4, 256>>>(norm_w, hidden, 1.f, 5000 + 10 * l + j);
        g.res = residual, g.norm_w = norm_w, g.res_out = residual = alloc_bf16(hidden);
      }
      c.gemms.push_back(g);
    }
    h = out[3];
  }
  if (shared_weights) c.weight_bytes *= layers;  // bytes the chain reads, from L2 or not
  CHECK(cudaDeviceSynchronize());
  return c;
}

static size_t smem_bytes(const Gemm& g) {
  return (size_t)g.rows * (g.swiglu ? 2 : 1) * g.k * 2 + (size_t)g.k * 2 + 16;
}

static void launch(const Gemm& g, int mode, bool pdl, unsigned long long* stamps, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((g.n + g.rows - 1) / g.rows);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = smem_bytes(g);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&cfg, kernel_for(g.k, g.swiglu), g, mode, stamps));
}

static cudaGraphExec_t capture(const Chain& c, int mode, bool pdl, unsigned long long* stamps, cudaStream_t stream) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (size_t i = 0; i < c.gemms.size(); ++i)
    launch(c.gemms[i], mode, pdl, stamps ? stamps + i * CTAS * STAMPS : nullptr, stream);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphDestroy(graph));
  return exec;
}

// The largest |y - ref| / max |ref| over the chain's GEMMs, each against its own input.
static double max_error(const Chain& c, bool norm) {
  float* ref;
  __nv_bfloat16* normed = alloc_bf16(4096);
  CHECK(cudaMalloc(&ref, 4096 * sizeof(float)));
  std::vector<float> r(4096);
  std::vector<__nv_bfloat16> y(4096);
  double err = 0;
  for (const Gemm& c_g : c.gemms) {
    Gemm g = c_g;
    if (norm && g.norm_w) {  // the reference of the folded norm, and the sum CTA 0 stored
      reference_norm_kernel<<<1, 256>>>(g, normed);
      std::vector<__nv_bfloat16> x(g.k), res(g.k), sum(g.k);
      CHECK(cudaMemcpy(x.data(), g.x, g.k * 2, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(res.data(), g.res, g.k * 2, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(sum.data(), g.res_out, g.k * 2, cudaMemcpyDeviceToHost));
      for (int i = 0; i < g.k; ++i) {
        const float want = __bfloat162float(__float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(res[i])));
        if (__bfloat162float(sum[i]) != want) err = INFINITY;
      }
      g.x = normed;
    }
    reference_kernel<<<(g.n + 7) / 8, 256>>>(g, ref);
    CHECK(cudaMemcpy(r.data(), ref, g.n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(y.data(), g.y, g.n * 2, cudaMemcpyDeviceToHost));
    double ref_max = 1e-30, diff = 0;
    for (int i = 0; i < g.n; ++i) {
      ref_max = std::max(ref_max, (double)std::fabs(r[i]));
      const double d = std::fabs((double)__bfloat162float(y[i]) - r[i]);
      diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    }
    err = std::max(err, diff / ref_max);
  }
  CHECK(cudaFree(ref));
  CHECK(cudaFree(normed));
  return err;
}

struct Variant {
  const char* name;
  int mode;
  bool pdl, shared_weights, checked;
};

static const char* KINDS[4] = {"qkv", "o", "gate_up", "down"};

// Per GEMM kind, averaged over the layers after the first two (us): span (this kernel's last CTA
// end - the one before's), release (its first wait return - the one before's last end), lead (a
// CTA's start to its wait's return), input (wait -> input row in shared memory), weights (input in
// -> weights in: 0 when they came ahead), dots (weights in -> end).
static void print_stamps(const std::vector<unsigned long long>& s, int layers, FILE* json, const char* name) {
  auto at = [&](int gemm, int cta, int k) { return (double)s[((size_t)gemm * CTAS + cta) * STAMPS + k]; };
  auto last_end = [&](int gemm) {
    double m = 0;
    for (int b = 0; b < CTAS; ++b) m = std::max(m, at(gemm, b, 5));
    return m;
  };
  std::printf("  %-8s %7s %8s %7s %7s %8s %7s\n", "gemm", "span", "release", "lead", "input", "weights", "dots");
  for (int kind = 0; kind < 4; ++kind) {
    double span = 0, release = 0, lead = 0, input = 0, wait_w = 0, dots = 0;
    int count = 0;
    for (int l = 2; l < layers; ++l, ++count) {
      const int gi = 4 * l + kind;
      double first_wait = 1e300;
      for (int b = 0; b < CTAS; ++b) {
        first_wait = std::min(first_wait, at(gi, b, 2));
        lead += (at(gi, b, 2) - at(gi, b, 0)) / CTAS;
        input += (at(gi, b, 3) - at(gi, b, 2)) / CTAS;
        wait_w += (at(gi, b, 4) - at(gi, b, 3)) / CTAS;
        dots += (at(gi, b, 5) - at(gi, b, 4)) / CTAS;
      }
      span += last_end(gi) - last_end(gi - 1);
      release += first_wait - last_end(gi - 1);
    }
    const double k = 1e-3 / count;  // ns -> us, averaged
    std::printf("  %-8s %7.2f %8.2f %7.2f %7.2f %8.2f %7.2f\n", KINDS[kind], span * k, release * k, lead * k,
                input * k, wait_w * k, dots * k);
    if (json)
      std::fprintf(json,
                   ",\n  {\"variant\": \"%s\", \"gemm\": \"%s\", \"span_us\": %.3f, \"release_us\": %.3f, "
                   "\"lead_us\": %.3f, \"input_us\": %.3f, \"weights_us\": %.3f, \"dots_us\": %.3f}",
                   name, KINDS[kind], span * k, release * k, lead * k, input * k, wait_w * k, dots * k);
  }
}

int main(int argc, char** argv) {
  int layers = 24, reps = 30;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "layers=", 7)) layers = std::atoi(argv[i] + 7);
    else if (!std::strncmp(argv[i], "reps=", 5)) reps = std::atoi(argv[i] + 5);
    else if (!std::strncmp(argv[i], "json=", 5)) json = argv[i] + 5;
    else {
      std::fprintf(stderr, "usage: %s [layers=24] [reps=30] [json=FILE]\n", argv[0]);
      return 2;
    }
  }
  if (layers < 3) layers = 3;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  for (auto [k, swiglu] : {std::pair{1024, false}, {1024, true}, {2048, false}, {3072, false}})
    CHECK(cudaFuncSetAttribute(kernel_for(k, swiglu), cudaFuncAttributeMaxDynamicSharedMemorySize, 120 * 1024));
  const Chain chains[2] = {build_chain(layers, false), build_chain(layers, true)};
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned long long* stamps;
  const size_t stamp_words = (size_t)4 * layers * CTAS * STAMPS;
  CHECK(cudaMalloc(&stamps, stamp_words * 8));

  const Variant variants[] = {
      {"ahead", AHEAD, true, false, true},
      {"ahead_tf", AHEAD | TRIGGER_FIRST, true, false, true},
      {"ahead_evict", AHEAD | EVICT, true, false, true},
      {"after", 0, true, false, true},
      {"after_nopdl", 0, false, false, true},
      {"noweights", NOWEIGHTS, true, false, false},
      {"noweights_tf", NOWEIGHTS | TRIGGER_FIRST, true, false, false},
      {"stream", AHEAD | TRIGGER_FIRST | NOWAIT, true, false, false},
      {"ahead_norm", AHEAD | NORM, true, false, true},
      {"noweights_norm", NOWEIGHTS | NORM, true, false, false},
      {"ahead_l2", AHEAD, true, true, true},
      {"ahead_tf_l2", AHEAD | TRIGGER_FIRST, true, true, true},
  };
  std::printf("%s, %d SMs; %d layers of qkv, o, gate/up (SwiGLU), down at one row, %d CTAs a GEMM\n", prop.name,
              prop.multiProcessorCount, layers, CTAS);
  FILE* out = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  if (out) std::fprintf(out, "[\n  {\"device\": \"%s\", \"layers\": %d}", prop.name, layers);
  for (const Variant& v : variants) {
    const Chain& c = chains[v.shared_weights];
    cudaGraphExec_t exec = capture(c, v.mode, v.pdl, nullptr, stream);
    const double med = graph_median_ms(exec, stream, reps, 5), per_layer = med * 1e3 / layers;
    for (const Gemm& g : c.gemms) CHECK(cudaMemsetAsync(g.y, 0xff, g.n * 2, stream));  // NaN: unwritten shows
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    const double err = v.checked ? max_error(c, v.mode & NORM) : -1;
    std::printf("%-12s %8.3f ms  %7.2f us/layer  %7.0f GB/s  max_err %9.2e\n", v.name, med, per_layer,
                c.weight_bytes / (med * 1e-3) / 1e9, err);
    if (out)
      std::fprintf(out,
                   ",\n  {\"variant\": \"%s\", \"ms\": %.4f, \"us_per_layer\": %.3f, \"gb_per_s\": %.1f, "
                   "\"max_rel_err\": %.3e}",
                   v.name, med, per_layer, c.weight_bytes / (med * 1e-3) / 1e9, err);
    CHECK(cudaGraphExecDestroy(exec));
    // The same chain once more with clock stamps in every CTA (a few % slower: a look, not the time).
    exec = capture(c, v.mode, v.pdl, stamps, stream);
    for (int r = 0; r < 3; ++r) CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<unsigned long long> s(stamp_words);
    CHECK(cudaMemcpy(s.data(), stamps, stamp_words * 8, cudaMemcpyDeviceToHost));
    print_stamps(s, layers, out, v.name);
    CHECK(cudaGraphExecDestroy(exec));
  }
  if (out) {
    std::fprintf(out, "\n]\n");
    std::fclose(out);
  }
  return 0;
}
