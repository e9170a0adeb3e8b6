// Runs cadence/kernels/linear/cuda/slab_swiglu_gemm.cu on the CPU through emulate.h, for tests/test_slab_swiglu_gemm.py
// (which builds it: g++ -std=c++20 -DCADENCE_EMULATE, the kernel's macros and KERNEL_SOURCE as -D
// flags). Usage: slab_swiglu_driver ARGS_FILE OUT_FILE
// ARGS_FILE: x, w as (u64 byte count, bytes); then n, grid, shared memory as i64.
// OUT_FILE gets y's bytes (M x n bf16).

#include "emulate.h"
#include "driver_io.h"
#include KERNEL_SOURCE  // -DKERNEL_SOURCE='"path/to/slab_swiglu_gemm.cu"'

#include <fstream>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: slab_swiglu_driver ARGS_FILE OUT_FILE\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  auto x = read_buffer(in), w = read_buffer(in);
  const long long n = read_scalar<long long>(in);
  const long long grid = read_scalar<long long>(in), smem = read_scalar<long long>(in);
  std::vector<u16> y((size_t)M * n, 0xffff);  // NaN: what is never written shows
  auto p = [](std::vector<unsigned char>& b) { return reinterpret_cast<const u16*>(b.data()); };
  emu::launch((unsigned)grid, THREADS, THREADS, (size_t)smem, [&] {
    slab_swiglu_gemm_kernel(p(x), p(w), y.data(), (int)n);
  });
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char*>(y.data()), y.size() * 2);
  return 0;
}
