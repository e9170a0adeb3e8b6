// How fast 128 CTAs can each get a 64-row GEMM's whole input (64 rows x 1024 bf16, 128 KB, in L2)
// (perf-notes #124). At 33-64 rows every program of the b64 walk's GEMMs reads all of x: qkv's 128
// programs read 16 MB of x from L2 for 8 MB of weights, gate/up's 96 read 12 MB for 12 MB, and
// the GEMMs alone take ~1.8 us longer at 64 rows than at 16 (benchmarks/skinny_linear.py), as if
// L2's ~6 TB/s, not HBM, bounded their loops. Clusters can share x instead: each CTA of a cluster
// of C copies 64 / C rows into every CTA of the cluster at once (cp.async.bulk ... multicast),
// so L2 serves x once a cluster.
//
// Each launch: every CTA receives x, by one of
//   ldg      16-byte loads by every thread straight into registers (the Triton tiles' way, and #115's)
//   bulk     a 2 KB bulk copy a row into its shared memory (64 copies, issued by the lanes of warp 0)
//   mcC      clusters of C (2, 4, 8): CTA rank r copies rows r * 64 / C ... with .multicast::cluster
// and, with `w`, also its own 64 KB weight slab (32 rows of 2 KB, bulk copies) from a different
// 8 MB of a 1 GB buffer every launch, so from HBM, as a GEMM's weights are. No arithmetic: what is
// timed is the data's arrival. Each variant is a CUDA graph of 50 launches (ms a launch), then one
// launch with per-CTA clock stamps (start -> all data in shared memory or registers: median and
// slowest CTA).
//
// Build and run (on the H200; `bash benchmarks/h200.sh xmulticast124`):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/x_multicast benchmarks/cuda/x_multicast.cu
//   /tmp/x_multicast [ctas=128] [json=FILE]

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../../cadence/kernels/cuda/sm90.cuh"  // global_ns, mbarriers, bulk copies
#include "check.cuh"

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

constexpr int ROWS = 64, K = 1024, ROW_BYTES = K * 2, X_BYTES = ROWS * ROW_BYTES;  // 128 KB
constexpr int W_ROWS = 32, W_BYTES = W_ROWS * ROW_BYTES;                             // 64 KB a CTA
constexpr int THREADS = 256;
constexpr size_t W_POOL = size_t(1) << 30;  // weights cycled through 1 GB: every launch from HBM
enum XMode { X_NONE, X_LDG, X_BULK, X_MULTICAST };

__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The same copy landing at the same offset in every CTA of the cluster that `mask` names, each
// completing the bytes on its own mbarrier at `bar`'s offset.
__device__ __forceinline__ void bulk_load_multicast(void* dst, const void* src, u32 bytes, u64* bar, u16 mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "h"(mask)
      : "memory");
}

// One launch: CTA b receives x (by `mode`) and, with `with_w`, its weight slab at w + b * W_BYTES.
// `sink` keeps the ldg loads; `stamps` (2 a CTA) the clock at the start and once everything landed.
template <int MODE, int CLUSTER>
__global__ void __launch_bounds__(THREADS) receive_kernel(const u16* x, const u16* w, int with_w, u32* sink,
                                                          u64* stamps) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) u64 bar;
  const u64 t0 = global_ns();
  unsigned char* x_smem = smem;
  unsigned char* w_smem = smem + X_BYTES;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  u32 bytes = with_w ? W_BYTES : 0;
  if (MODE == X_BULK || MODE == X_MULTICAST) bytes += X_BYTES;  // a multicast CTA receives every row
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    mbar_init_fence();
  }
  if (CLUSTER > 1) cluster_sync();  // every CTA's barrier is ready before any copy lands in it
  else __syncthreads();
  if (threadIdx.x == 0 && bytes) mbar_expect_tx(&bar, bytes);
  if (CLUSTER > 1) cluster_sync();  // and expects its bytes before a peer's copy completes any
  else __syncthreads();
  if (warp == 0) {
    if (with_w)
      for (int r = lane; r < W_ROWS; r += 32)
        bulk_load(w_smem + r * ROW_BYTES, (const unsigned char*)w + (size_t)blockIdx.x * W_BYTES + r * ROW_BYTES,
                  ROW_BYTES, &bar);
    if (MODE == X_BULK)
      for (int r = lane; r < ROWS; r += 32)
        bulk_load(x_smem + r * ROW_BYTES, (const unsigned char*)x + r * ROW_BYTES, ROW_BYTES, &bar);
    if (MODE == X_MULTICAST) {
      const int per = ROWS / CLUSTER, first = cluster_rank() * per;
      for (int r = first + lane; r < first + per; r += 32)
        bulk_load_multicast(x_smem + r * ROW_BYTES, (const unsigned char*)x + r * ROW_BYTES, ROW_BYTES, &bar,
                            (u16)((1u << CLUSTER) - 1));
    }
  }
  u32 acc = 0;
  if (MODE == X_LDG) {
    const uint4* src = reinterpret_cast<const uint4*>(x);
#pragma unroll 8
    for (int i = threadIdx.x; i < X_BYTES / 16; i += THREADS) {
      const uint4 v = src[i];
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (bytes) mbar_wait(&bar, 0);
  __syncthreads();
  const u64 t1 = global_ns();
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;  // keeps the loads
  if (threadIdx.x == 0) stamps[2 * blockIdx.x] = t0, stamps[2 * blockIdx.x + 1] = t1;
  if (CLUSTER > 1) cluster_sync();  // no CTA leaves while a peer's copy may still be writing into it
}

struct Variant {
  std::string name;
  void (*kernel)(const u16*, const u16*, int, u32*, u64*);
  int cluster;
  int with_w;
  int smem;
};

static void launch(const Variant& v, int ctas, const u16* x, const u16* w, u32* sink, u64* stamps,
                   cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(THREADS);
  config.dynamicSmemBytes = v.smem;
  config.stream = stream;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = v.cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, v.kernel, x, w, v.with_w, sink, stamps));
}

int main(int argc, char** argv) {
  int ctas = 128;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("ctas=", 0) == 0) ctas = std::stoi(a.substr(5));
    if (a.rfind("json=", 0) == 0) json = a.substr(5);
  }
  u16 *x, *w;
  u32* sink;
  u64* stamps;
  CHECK(cudaMalloc(&x, X_BYTES));
  CHECK(cudaMalloc(&w, W_POOL));
  CHECK(cudaMalloc(&sink, ctas * sizeof(u32)));
  CHECK(cudaMalloc(&stamps, 2 * ctas * sizeof(u64)));
  CHECK(cudaMemset(x, 1, X_BYTES));
  CHECK(cudaMemset(w, 1, W_POOL));
  std::vector<Variant> variants;
  for (int with_w = 0; with_w < 2; ++with_w) {
    const std::string tail = with_w ? " + w" : "";
    const int smem = X_BYTES + W_BYTES;
    if (with_w) variants.push_back({"w only", receive_kernel<X_NONE, 1>, 1, 1, smem});
    variants.push_back({"ldg" + tail, receive_kernel<X_LDG, 1>, 1, with_w, smem});
    variants.push_back({"bulk" + tail, receive_kernel<X_BULK, 1>, 1, with_w, smem});
    variants.push_back({"mc2" + tail, receive_kernel<X_MULTICAST, 2>, 2, with_w, smem});
    variants.push_back({"mc4" + tail, receive_kernel<X_MULTICAST, 4>, 4, with_w, smem});
    variants.push_back({"mc8" + tail, receive_kernel<X_MULTICAST, 8>, 8, with_w, smem});
  }
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  const int launches = 50, reps = 20;
  const size_t per_launch = (size_t)ctas * W_BYTES;
  FILE* out = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  if (out) std::fprintf(out, "[\n");
  std::printf("%d CTAs, x %d KB in L2, weights %d KB a CTA from HBM\n", ctas, X_BYTES / 1024, W_BYTES / 1024);
  std::printf("%-12s %12s %14s %14s\n", "variant", "us a launch", "CTA median us", "slowest CTA us");
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    CHECK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
    if (ctas % v.cluster) continue;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < launches; ++l) {
      const u16* wl = w + (l * per_launch % (W_POOL - per_launch)) / 2;
      launch(v, ctas, x, wl, sink, stamps, stream);
    }
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const double launch_us = graph_median_ms(exec, stream, reps, 2) * 1000.0 / launches;
    launch(v, ctas, x, w + (W_POOL / 2) / 2, sink, stamps, stream);  // stamped, weights not touched above
    CHECK(cudaStreamSynchronize(stream));
    std::vector<u64> host(2 * ctas);
    CHECK(cudaMemcpy(host.data(), stamps, host.size() * sizeof(u64), cudaMemcpyDeviceToHost));
    std::vector<double> spans;
    for (int b = 0; b < ctas; ++b) spans.push_back((host[2 * b + 1] - host[2 * b]) / 1000.0);
    std::sort(spans.begin(), spans.end());
    const double median = spans[ctas / 2], slowest = spans.back();
    std::printf("%-12s %12.2f %14.2f %14.2f\n", v.name.c_str(), launch_us, median, slowest);
    if (out)
      std::fprintf(out, "  {\"variant\": \"%s\", \"ctas\": %d, \"us_a_launch\": %.3f, \"cta_median_us\": %.3f, "
                        "\"slowest_cta_us\": %.3f}%s\n",
                   v.name.c_str(), ctas, launch_us, median, slowest, i + 1 < variants.size() ? "," : "");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }
  if (out) std::fprintf(out, "]\n"), std::fclose(out);
  return 0;
}
