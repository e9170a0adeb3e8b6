// Runs cadence/kernels/sampling/cuda/sampler.cu on the CPU through emulate.h, for tests/test_cuda_sampler.py
// (which builds it: g++ -std=c++20 -DCADENCE_EMULATE, the kernel's macros and KERNEL_SOURCE as -D
// flags). Usage: sampler_driver ARGS_FILE OUT_FILE
// ARGS_FILE: logits, rows, seen, penalty, ban_eos, do_sample, temperature, top_k, top_p, seed,
// frame, table as (u64 byte count, bytes), an absent one as 0 bytes; then rows n, eos_id,
// suppress_start, eos_min_frames, codebook_key, out_stride, emb_stride, embedding rows written
// (n x emb_stride words) as i64. OUT_FILE gets out (n x out_stride i64), seen, then emb's words.

#include "emulate.h"
#include "driver_io.h"
#include KERNEL_SOURCE  // -DKERNEL_SOURCE='"path/to/sampler.cu"'

#include <fstream>
#include <iostream>

static std::ifstream in;
static std::vector<unsigned char> buffer() { return read_buffer(in); }
static long long integer() { return read_scalar<long long>(in); }

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: sampler_driver ARGS_FILE OUT_FILE\n";
    return 2;
  }
  in.open(argv[1], std::ios::binary);
  auto logits = buffer(), rows = buffer(), seen = buffer(), penalty = buffer(), ban = buffer(), sample = buffer();
  auto temperature = buffer(), top_k = buffer(), top_p = buffer(), seed = buffer(), frame = buffer();
  auto table = buffer();
  const long long n = integer(), eos_id = integer(), suppress_start = integer(), eos_min_frames = integer();
  const long long codebook_key = integer(), out_stride = integer(), emb_stride = integer();
  std::vector<i64> out((size_t)(n * out_stride), -1);
  std::vector<u32> emb((size_t)(n * emb_stride + 4), 0xffffffffu);
  auto p = [](std::vector<unsigned char>& b) { return static_cast<void*>(b.data()); };
  emu::launch((unsigned)n, THREADS, THREADS, SMEM_BYTES, [&] {
    sample_kernel(p(logits), static_cast<const i64*>(p(rows)), static_cast<bool*>(p(seen)),
                  static_cast<const float*>(p(penalty)), static_cast<const bool*>(p(ban)),
                  static_cast<const bool*>(p(sample)), static_cast<const float*>(p(temperature)),
                  static_cast<const i64*>(p(top_k)), static_cast<const float*>(p(top_p)),
                  static_cast<const i64*>(p(seed)), static_cast<const i64*>(p(frame)), out.data(),
                  static_cast<const u32*>(p(table)), emb.data(), (int)eos_id, (int)suppress_start,
                  (int)eos_min_frames, (u32)codebook_key, (int)out_stride, (int)emb_stride);
  });
  std::ofstream o(argv[2], std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()), out.size() * 8);
  o.write(reinterpret_cast<const char*>(seen.data()), seen.size() - 16);
  o.write(reinterpret_cast<const char*>(emb.data()), (size_t)(n * emb_stride) * 4);
  return 0;
}
