// Runs cadence/kernels/cuda/code_predictor.cu on the CPU through emulate.h, for
// tests/test_cuda_code_predictor_emulated.py (which builds it: g++ -std=c++20 -DCADENCE_EMULATE,
// the kernel's macros and KERNEL_SOURCE as -D flags). Usage: driver ARGS_FILE CODES_FILE GRID [FRAMES]
// FRAMES > 1 (SYNC_LL) runs the kernel FRAMES times on the same buffers, as consecutive frames would:
// the epoch advanced each time, every word left as the previous frame wrote it. The frames before
// the last run on other input rows (the given ones shifted by one element), so a word of an earlier
// frame taken for the last one's would change its codes.
// ARGS_FILE holds the kernel's arguments in its order: each buffer as (u64 byte count, bytes), each
// int as an i64, each double as 8 bytes (the order is the kernel's signature; see the test).
// The codes buffer's bytes are written back to CODES_FILE after the run, the trace's (TRACE) to
// CODES_FILE.trace.

#include "emulate.h"
#include KERNEL_SOURCE  // -DKERNEL_SOURCE='"path/to/code_predictor.cu"'

#include <fstream>
#include <iostream>

static std::ifstream in;
static std::vector<std::vector<unsigned char>> buffers;

template <class T>
static T* buffer() {
  unsigned long long n;
  in.read(reinterpret_cast<char*>(&n), 8);
  buffers.emplace_back(n + 16);
  in.read(reinterpret_cast<char*>(buffers.back().data()), n);
  return reinterpret_cast<T*>(buffers.back().data());
}
static long long integer() {
  long long v;
  in.read(reinterpret_cast<char*>(&v), 8);
  return v;
}
static double real() {
  double v;
  in.read(reinterpret_cast<char*>(&v), 8);
  return v;
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: driver ARGS_FILE CODES_FILE GRID [FRAMES]\n";
    return 2;
  }
  in.open(argv[1], std::ios::binary);
  buffers.reserve(64);  // pointers into the vectors stay valid
  auto d = buffer<slot_t>(), ra = buffer<slot_t>(), rb = buffer<slot_t>(), qkv = buffer<slot_t>();
  auto attn = buffer<slot_t>(), o = buffer<slot_t>(), act = buffer<slot_t>(), logits = buffer<slot_t>();
  auto codes = buffer<i64>();
  const size_t codes_index = buffers.size() - 1;
  auto counter = buffer<u32>();
  auto epoch = buffer<u32>();
  auto trace = buffer<u64>();
  const size_t trace_index = buffers.size() - 1;
  auto ln1 = buffer<act_t>(), wqkv = buffer<act_t>(), q_norm = buffer<act_t>(), k_norm = buffer<act_t>();
  auto wo = buffer<act_t>(), ln2 = buffer<act_t>(), wgu = buffer<act_t>(), wdown = buffer<act_t>();
  auto final_norm = buffer<act_t>(), heads = buffer<act_t>(), emb = buffer<act_t>();
  auto cos_t = buffer<act_t>(), sin_t = buffer<act_t>(), k_cache = buffer<act_t>(), v_cache = buffer<act_t>();
  auto do_sample = buffer<bool>();
  auto temperature = buffer<float>();
  auto top_k = buffer<i64>();
  auto top_p = buffer<float>();
  auto seed = buffer<i64>(), frame = buffer<i64>();
  const int streams = (int)integer(), cache_stride = (int)integer();
  const double eps = real(), scale = real();
  const int stages = (int)integer(), stage_bytes = (int)integer();
  const size_t smem = (size_t)integer();
  if (!in) {
    std::cerr << "short arguments file\n";
    return 2;
  }
  const int frames = argc == 5 ? std::atoi(argv[4]) : 1;
  const std::vector<slot_t> input(d, d + (size_t)2 * streams * HIDDEN);  // the given input rows
  for (int f = 0; f < frames; ++f) {
    const size_t shift = f + 1 < frames ? 1 : 0;  // earlier frames: other inputs
    *epoch += f > 0;
    *counter = 0;
    for (size_t i = 0; i < input.size(); ++i) {
      const slot_t v = input[(i + shift) % input.size()];
#if SYNC_LL
      d[i] = (v & 0xffffffffull) | (unsigned long long)(*epoch * 1024u) << 32;
#else
      d[i] = v;
#endif
    }
    emu::launch(std::atoi(argv[3]), (CONSUMER_WARPS + 1) * 32, CONSUMER_WARPS * 32, smem, [&] {
      code_predictor_kernel(d, ra, rb, qkv, attn, o, act, logits, codes, counter, epoch, trace, ln1, wqkv, q_norm,
                            k_norm, wo, ln2, wgu, wdown, final_norm, heads, emb, cos_t, sin_t, k_cache, v_cache,
                            do_sample, temperature, top_k, top_p, seed, frame, streams, cache_stride, eps, scale,
                            stages, stage_bytes);
    });
  }
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char*>(buffers[codes_index].data()), buffers[codes_index].size() - 16);
  std::ofstream(std::string(argv[2]) + ".trace", std::ios::binary)
      .write(reinterpret_cast<const char*>(buffers[trace_index].data()), buffers[trace_index].size() - 16);
  std::cerr << "emulation: " << emu::switches << " fiber switches\n";
  return 0;
}
