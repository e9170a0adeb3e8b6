// Runs CUDA kernel source on the CPU, for tests: every CUDA thread a cooperative fiber (ucontext)
// in one OS thread, switching at each barrier, shuffle and spin. Enough of CUDA for the kernels of
// cadence/kernels/cuda (their PTX sections are replaced below): thread and block indices,
// __syncthreads, a named barrier over the consumer warps, warp shuffles, mbarriers with transaction
// counts, bulk copies (done at once), global counters.
//
// One OS thread, so memory is sequentially consistent: this checks the kernel's logic (indexing,
// phase order, the copies' protocol, arithmetic), not its memory ordering on a GPU. Fibers run round
// robin, so CTAs keep nearly in step: a read racing ahead of its writer is unlikely to show here.
//
// Included before the kernel source (the drivers include it first), after the kernel's own macros
// given as -D flags.

#pragma once
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)

struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

template <class To, class From>
inline To bit_cast_(From v) {
  To out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}
inline float __uint_as_float(unsigned v) { return bit_cast_<float>(v); }
inline float __int_as_float(int v) { return bit_cast_<float>(v); }
inline unsigned __float_as_uint(float v) { return bit_cast_<unsigned>(v); }
inline int __float_as_int(float v) { return bit_cast_<int>(v); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
template <class T>
inline T min(T a, T b) { return b < a ? b : a; }
template <class T>
inline T max(T a, T b) { return a < b ? b : a; }

namespace emu {

struct Barrier {
  int count = 0, arrived = 0;
  unsigned generation = 0;
};

struct Fiber;
struct Cta {
  std::vector<unsigned char> smem;
  Barrier all, consumers;
  std::vector<Barrier> warps;
  std::vector<unsigned long long> exchange;  // a slot per thread for shuffles
  std::vector<std::array<unsigned, 6>> fragments;  // a thread's A and B registers for an mma
};

struct Fiber {
  ucontext_t context;
  std::vector<char> stack;
  dim3 thread_idx, block_idx;
  Cta* cta = nullptr;
  bool done = false;
};

inline ucontext_t scheduler;
inline Fiber* current = nullptr;
inline dim3 grid_dim, block_dim;
inline long long progress = 0;  // barriers passed, copies landed

inline void yield() {
  swapcontext(&current->context, &scheduler);
}

inline void wait(Barrier& b) {
  const unsigned gen = b.generation;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    ++b.generation;
    ++progress;
    return;
  }
  while (b.generation == gen) yield();
}

}  // namespace emu

#define threadIdx (emu::current->thread_idx)
#define blockIdx (emu::current->block_idx)
#define gridDim (emu::grid_dim)
#define blockDim (emu::block_dim)

inline void __syncthreads() { emu::wait(emu::current->cta->all); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::wait(emu::current->cta->warps[threadIdx.x / 32]); }

namespace emu {
// A warp shuffle: every lane leaves its value, then reads lane source(lane)'s (its own where the
// source is outside the warp, as __shfl_up_sync leaves the lanes below its offset).
template <class T, class Source>
inline T shuffle(T v, Source source) {
  static_assert(sizeof(T) <= 8, "shuffles of up to 8 bytes");
  Cta* cta = current->cta;
  const unsigned tid = threadIdx.x;
  const int from = source((int)(tid & 31u));
  unsigned long long raw = 0;
  std::memcpy(&raw, &v, sizeof v);
  cta->exchange[tid] = raw;
  __syncwarp();
  if (0 <= from && from < 32) raw = cta->exchange[(tid & ~31u) | (unsigned)from];
  __syncwarp();  // every lane has read before any lane writes its next value
  T out;
  std::memcpy(&out, &raw, sizeof out);
  return out;
}
}  // namespace emu

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int offset) {
  return emu::shuffle(v, [&](int lane) { return lane ^ offset; });
}
template <class T>
inline T __shfl_sync(unsigned, T v, int source) {  // every lane reads lane `source`'s value
  return emu::shuffle(v, [&](int) { return source & 31; });
}
template <class T>
inline T __shfl_up_sync(unsigned, T v, unsigned offset) {  // lanes below `offset` keep their own
  return emu::shuffle(v, [&](int lane) { return lane - (int)offset; });
}

// ---- the kernel's PTX section, on the CPU -------------------------------------------------------

#if ACT_BF16
// cvt.rn.bf16.f32 / cvt.rn.bf16x2.f32: round to nearest even (a NaN stays a quiet NaN)
inline unsigned short from_f(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
inline unsigned pack_bf16x2(float lo, float hi) { return (unsigned)from_f(hi) << 16 | from_f(lo); }
#endif

#define DYNAMIC_SHARED(name) unsigned char* name = emu::current->cta->smem.data()

template <class T>
inline T load_cg(const T* p) { return *p; }
inline uint4 load16_cg(const void* p) {
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
}
inline uint4 load16_volatile(const void* p) { return load16_cg(p); }

// An mbarrier as the kernel uses one: a phase completes when its expected arrivals have arrived
// and its transaction bytes have landed; try_wait.parity(p) passes once the phase of parity p is over.
struct MbarState {
  unsigned expected, pending, phase;
  long long tx;
};

// Kept beside the kernel's 8-byte mbarrier words, by address (a GPU keeps it in the word itself).
inline std::map<const void*, MbarState> mbarriers;
inline MbarState* mbar(unsigned long long* bar) { return &mbarriers[bar]; }
inline void mbar_complete_if_done(MbarState* m) {
  if (m->pending == 0 && m->tx == 0) m->pending = m->expected, ++m->phase, ++emu::progress;
}
inline void mbar_init(unsigned long long* bar, unsigned count) { *mbar(bar) = {count, count, 0, 0}; }
inline void mbar_init_fence() {}
inline void mbar_arrive(unsigned long long* bar) {
  MbarState* m = mbar(bar);
  --m->pending;
  mbar_complete_if_done(m);
}
inline void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
  mbar(bar)->tx += bytes;
  mbar_arrive(bar);
}
inline void mbar_wait(unsigned long long* bar, unsigned parity) {
  while ((mbar(bar)->phase & 1u) == parity) emu::yield();
}
inline void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  std::memcpy(dst, src, bytes);
  mbar(bar)->tx -= bytes;
  mbar_complete_if_done(mbar(bar));
}
inline void bulk_load_once(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  bulk_load(dst, src, bytes, bar);  // the L2 hint means nothing here
}
inline void consumers_sync() { emu::wait(emu::current->cta->consumers); }
inline void smem_add(unsigned* p, unsigned v) { *p += v; }  // one OS thread: atomic as it stands
// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 for the warp (slab_gemm.cu): every lane leaves its
// fragments, then works out its own four D entries from all of them, in k order.
inline void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  emu::Cta* cta = emu::current->cta;
  const unsigned tid = threadIdx.x, base = tid & ~31u, lane = tid & 31u;
  cta->fragments[tid] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  __syncwarp();
  auto half = [](unsigned word, int high) { return __uint_as_float(high ? word & 0xffff0000u : word << 16); };
  auto A = [&](int r, int k) {  // lane (r % 8) * 4 + (k % 8) / 2, register (r >= 8) + 2 (k >= 8)
    return half(cta->fragments[base + (r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)], k & 1);
  };
  auto B = [&](int k, int col) { return half(cta->fragments[base + col * 4 + (k % 8) / 2][4 + (k >= 8)], k & 1); };
  for (int i = 0; i < 4; ++i) {
    const int r = (int)lane / 4 + 8 * (i / 2), col = 2 * (int)(lane % 4) + i % 2;
    for (int k = 0; k < 16; ++k) d[i] += A(r, k) * B(k, col);
  }
  __syncwarp();  // every lane has read before any lane leaves its next fragments
}
// Programmatic dependent launch (slab_gemm.cu): one grid at a time here, nothing to wait for.
inline void pdl_wait() {}
inline void pdl_trigger() {}

namespace emu {

// Bytes past each CTA's shared memory that must stay as they were: a write there is one past the
// kernel's allocation.
constexpr size_t SMEM_GUARD = 16 * 1024;
constexpr unsigned char GUARD_BYTE = 0xA5;

// Runs `body` as a grid of `grid` CTAs of `threads` threads with `smem` bytes of shared memory each.
template <class Body>
inline void launch(unsigned grid, unsigned threads, unsigned consumer_threads, size_t smem, Body body) {
  static Body* entry;
  entry = &body;
  grid_dim.x = grid;
  block_dim.x = threads;
  std::vector<Cta> ctas(grid);
  std::vector<Fiber> fibers(grid * threads);
  for (unsigned c = 0; c < grid; ++c) {
    ctas[c].smem.assign(smem + SMEM_GUARD, 0);
    std::fill(ctas[c].smem.begin() + smem, ctas[c].smem.end(), GUARD_BYTE);
    ctas[c].all.count = threads;
    ctas[c].consumers.count = consumer_threads;
    ctas[c].warps.resize((threads + 31) / 32);
    for (auto& w : ctas[c].warps) w.count = 32;
    ctas[c].exchange.assign(threads, 0);
    ctas[c].fragments.assign(threads, {});
  }
  for (unsigned i = 0; i < fibers.size(); ++i) {
    Fiber& f = fibers[i];
    f.block_idx.x = i / threads;
    f.thread_idx.x = i % threads;
    f.cta = &ctas[i / threads];
    f.stack.resize(256 * 1024);
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.data();
    f.context.uc_stack.ss_size = f.stack.size();
    f.context.uc_link = &scheduler;
    makecontext(&f.context, +[] {
      (*entry)();
      current->done = true;
    }, 0);
  }
  size_t alive = fibers.size();
  long long idle_rounds = 0, seen = progress;
  while (alive) {
    alive = 0;
    for (Fiber& f : fibers) {
      if (f.done) continue;
      current = &f;
      swapcontext(&scheduler, &f.context);
      alive += !f.done;
    }
    // every fiber ran once: if none got anywhere for this many rounds, all of them are waiting
    idle_rounds = progress == seen ? idle_rounds + 1 : 0;
    seen = progress;
    if (alive && idle_rounds > 100000) {
      std::fprintf(stderr, "emulation: deadlock (%zu threads waiting, nothing moved for %lld rounds)\n", alive,
                   idle_rounds);
      std::exit(3);
    }
  }
  for (unsigned c = 0; c < grid; ++c)  // a GPU faults (or corrupts another CTA) past the allocation
    if (std::any_of(ctas[c].smem.begin() + smem, ctas[c].smem.end(), [](unsigned char b) { return b != GUARD_BYTE; })) {
      std::fprintf(stderr, "emulation: CTA %u wrote shared memory past its %zu bytes\n", c, smem);
      std::exit(4);
    }
}

}  // namespace emu
