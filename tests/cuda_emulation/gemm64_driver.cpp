// Runs cadence/kernels/cuda/slab_gemm64.cu on the CPU through emulate.h, for tests/test_gemm64.py
// (which builds it: g++ -std=c++20 -DCADENCE_EMULATE, the kernel's macros and KERNEL_SOURCE as -D
// flags). Usage: gemm64_driver ARGS_FILE OUT_FILE
// ARGS_FILE: x, w as (u64 byte count, bytes); then n, grid, shared memory as i64; with NORM_PARTS
// then parts, res, norm_w as buffers and eps as a double.
// OUT_FILE gets y's bytes (M x n bf16); with NORM_PARTS then the sum and the normed rows (M x K bf16
// each) and the 3 + M sync words as the kernel left them (u32); then the CTAs' clock stamps (grid x 6
// i64; zeros unless the kernel is built with STAMP=1).

#include "emulate.h"
#include "driver_io.h"
#include KERNEL_SOURCE  // -DKERNEL_SOURCE='"path/to/slab_gemm64.cu"'

#include <fstream>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: gemm64_driver ARGS_FILE OUT_FILE\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  auto x = read_buffer(in), w = read_buffer(in);
  const long long n = read_scalar<long long>(in);
  const long long grid = read_scalar<long long>(in), smem = read_scalar<long long>(in);
  std::vector<u16> y((size_t)M * n, 0xffff);  // NaN: what is never written shows
  auto p = [](std::vector<unsigned char>& b) { return reinterpret_cast<const u16*>(b.data()); };
  std::vector<i64> stamps((size_t)grid * 6, 0);
#if NORM_PARTS
  auto parts = read_buffer(in), res = read_buffer(in), norm_w = read_buffer(in);
  const double eps = read_scalar<double>(in);
  std::vector<u16> total((size_t)M * K, 0xffff), xn((size_t)M * K, 0xffff);
  std::vector<u32> sync(3 + M, 0);
#define NORM_ARGS , reinterpret_cast<const float*>(parts.data()), p(res), p(norm_w), (float)eps, total.data(), \
                    xn.data(), sync.data()
#define X_IN xn.data()
#else
#define NORM_ARGS
#define X_IN p(x)
#endif
  emu::launch((unsigned)grid, THREADS, THREADS, (size_t)smem, [&] {
#if STAMP
    slab_gemm64_kernel(X_IN, p(w), y.data(), (int)n, stamps.data(), 0 NORM_ARGS);
#else
    slab_gemm64_kernel(X_IN, p(w), y.data(), (int)n NORM_ARGS);
#endif
  });
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char*>(y.data()), y.size() * 2);
#if NORM_PARTS
  out.write(reinterpret_cast<const char*>(total.data()), total.size() * 2);
  out.write(reinterpret_cast<const char*>(xn.data()), xn.size() * 2);
  out.write(reinterpret_cast<const char*>(sync.data()), sync.size() * 4);
#endif
  out.write(reinterpret_cast<const char*>(stamps.data()), stamps.size() * 8);
  return 0;
}
