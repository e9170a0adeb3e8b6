// What the standalone CUDA benchmarks share: CHECK(call) ends the program with the CUDA error's
// name and place when a runtime call fails; graph_median_ms times a CUDA graph's launches.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

// Median ms of one launch of `exec` on `stream`, over `reps` launches after `warmup` untimed ones
// (CUDA events around each).
inline float graph_median_ms(cudaGraphExec_t exec, cudaStream_t stream, int reps, int warmup) {
  cudaEvent_t start, end;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&end));
  std::vector<float> ms;
  for (int r = 0; r < warmup + reps; ++r) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(end, stream));
    CHECK(cudaEventSynchronize(end));
    float t;
    CHECK(cudaEventElapsedTime(&t, start, end));
    if (r >= warmup) ms.push_back(t);
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(end));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
