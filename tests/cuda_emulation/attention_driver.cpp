// Runs cadence/kernels/attention/cuda/decode_attention.cu on the CPU through emulate.h, for
// tests/test_cuda_attention.py (which builds it: g++ -std=c++20 -DCADENCE_EMULATE -DACT_BF16=1, the
// kernel's macros and KERNEL_SOURCE as -D flags). Usage: attention_driver ARGS_FILE OUT_FILE
// ARGS_FILE: qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, positions, slots, contexts,
// block_table as (u64 byte count, bytes); then table_stride, grid, shared memory as i64 and scale,
// eps as f64. OUT_FILE gets the output (bf16), then the two caches.

#include "emulate.h"
#include "driver_io.h"
#include KERNEL_SOURCE  // -DKERNEL_SOURCE='"path/to/decode_attention.cu"'

#include <fstream>
#include <iostream>

static std::ifstream in;
static std::vector<unsigned char> buffer() { return read_buffer(in); }

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: attention_driver ARGS_FILE OUT_FILE\n";
    return 2;
  }
  in.open(argv[1], std::ios::binary);
  auto qkv = buffer(), q_norm = buffer(), k_norm = buffer(), cos = buffer(), sin = buffer();
  auto k_cache = buffer(), v_cache = buffer(), positions = buffer(), slots = buffer(), contexts = buffer();
  auto table = buffer();
  const long long stride = read_scalar<long long>(in), grid = read_scalar<long long>(in);
  const long long smem = read_scalar<long long>(in);
  const double scale = read_scalar<double>(in), eps = read_scalar<double>(in);
  const size_t rows = (positions.size() - 16) / 8;
  std::vector<u16> out(rows * HQ * HD, 0xffff);  // NaN: what is never written shows
  auto p = [](std::vector<unsigned char>& b) { return reinterpret_cast<const u16*>(b.data()); };
  auto i = [](std::vector<unsigned char>& b) { return reinterpret_cast<const i64*>(b.data()); };
  auto w = [](std::vector<unsigned char>& b) { return reinterpret_cast<u16*>(b.data()); };
  emu::launch((unsigned)grid, THREADS, THREADS - 32, (size_t)smem, [&] {  // the consumers: all but the copying warp
    decode_attention_kernel(p(qkv), p(q_norm), p(k_norm), p(cos), p(sin), i(positions), i(slots), i(contexts),
                            i(table), (int)stride, w(k_cache), w(v_cache), out.data(), (float)scale, (float)eps);
  });
  std::ofstream o(argv[2], std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()), out.size() * 2);
  o.write(reinterpret_cast<const char*>(k_cache.data()), k_cache.size() - 16);
  o.write(reinterpret_cast<const char*>(v_cache.data()), v_cache.size() - 16);
  return 0;
}
