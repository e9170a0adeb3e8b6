// Runs cadence/kernels/linear/cuda/slab_gemm.cu on the CPU through emulate.h, for tests/test_slab_gemm.py
// (which builds it: g++ -std=c++20 -DCADENCE_EMULATE -DACT_BF16=1, the kernel's macros and
// KERNEL_SOURCE as -D flags). Usage: slab_driver ARGS_FILE OUT_FILE
// ARGS_FILE: x, w, res, norm_w as (u64 byte count, bytes); then n, rows a CTA, grid, shared memory
// as i64 and eps as f64; with ATTN the attention's (see below). OUT_FILE gets y's bytes (M x n
// bf16), then res_out's (M x K bf16), with ATTN then the two caches.

#include "emulate.h"
#include "driver_io.h"
#include KERNEL_SOURCE  // -DKERNEL_SOURCE='"path/to/slab_gemm.cu"'

#include <fstream>
#include <iostream>

static std::ifstream in;
static std::vector<unsigned char> buffer() { return read_buffer(in); }
template <class T>
static T scalar() {
  return read_scalar<T>(in);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: slab_driver ARGS_FILE OUT_FILE\n";
    return 2;
  }
  in.open(argv[1], std::ios::binary);
  auto x = buffer(), w = buffer(), res = buffer(), norm_w = buffer();
  const long long n = scalar<long long>(), rows = scalar<long long>(), grid = scalar<long long>();
  const long long smem = scalar<long long>();
  const double eps = scalar<double>();
  std::vector<u16> y((size_t)M * n, 0xffff), res_out((size_t)M * K, 0xffff);  // NaN: what is never written shows
  auto p = [](std::vector<unsigned char>& b) { return reinterpret_cast<const u16*>(b.data()); };
  Attention at = {};
#if ATTN  // then: q_norm, k_norm, cos, sin, k_cache, v_cache; M positions, slots, contexts, pages (i64); scale (f64)
  auto q_norm = buffer(), k_norm = buffer(), cos = buffer(), sin = buffer(), k_cache = buffer(), v_cache = buffer();
  long long index[4][M];
  for (auto& row : index)
    for (auto& i : row) i = scalar<long long>();
  at = {p(q_norm), p(k_norm), p(cos), p(sin), index[0], index[1], index[2], index[3],
        reinterpret_cast<u16*>(k_cache.data()), reinterpret_cast<u16*>(v_cache.data()), (float)scalar<double>()};
#endif
  emu::launch((unsigned)grid, THREADS, THREADS, (size_t)smem, [&] {
    slab_gemm_kernel(p(x), p(w), y.data(), p(res), p(norm_w), res_out.data(), (int)n, (int)rows, (float)eps, at);
  });
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char*>(y.data()), y.size() * 2);
  out.write(reinterpret_cast<const char*>(res_out.data()), res_out.size() * 2);
#if ATTN  // the caches, the new token written
  out.write(reinterpret_cast<const char*>(k_cache.data()), k_cache.size() - 16);
  out.write(reinterpret_cast<const char*>(v_cache.data()), v_cache.size() - 16);
#endif
  return 0;
}
