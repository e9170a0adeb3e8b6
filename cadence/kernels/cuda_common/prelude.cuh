// What the bf16 kernels share (slab_gemm.cu, slab_swiglu_gemm.cu, decode_attention.cu): the integer types, bf16
// rounding, programmatic dependent launch, the copy engine (sm90.cuh) and mma.sync. The PTX section
// has CPU stand-ins in tests/cuda_emulation/emulate.h.
#pragma once

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
#define ACT_BF16 1

#ifndef CADENCE_EMULATE
#define DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
__device__ __forceinline__ u16 from_f(float f) {  // round to nearest even, as PyTorch's casts
  u16 v;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f));
  return v;
}
// Programmatic dependent launch: wait for the kernel before (and its memory), then let the next in.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
#include "sm90.cuh"  // mbarriers and bulk copies
// d += a . b on the tensor cores for the warp: A 16 x 16 (row-major), B 16 x 8 (column-major), bf16
// in, fp32 sums; each lane holds its fragments as the PTX ISA lays them out for m16n8k16: lane
// (g, c) = (lane / 4, lane % 4) holds A's rows g and g + 8 at k = 2c, 2c + 1 (a[0], a[1]) and
// k + 8 (a[2], a[3]), B's column g at k = 2c, 2c + 1 (b[0]) and k + 8 (b[1]), and D's rows g, g + 8
// at columns 2c, 2c + 1 (d[0], d[1]; d[2], d[3]).
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif  // CADENCE_EMULATE

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ float to_f(u16 v) { return __uint_as_float((u32)v << 16); }
__device__ __forceinline__ float round_bf16(float f) { return to_f(from_f(f)); }
__device__ __forceinline__ float lo(u32 v) { return __uint_as_float(v << 16); }  // a bf16 pair's halves
__device__ __forceinline__ float hi(u32 v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ u32 pack2(float a, float b) { return (u32)from_f(a) | (u32)from_f(b) << 16; }
// The SwiGLU GEMMs' epilogue (slab_gemm.cu, slab_swiglu_gemm.cu): silu(gate) * up from the fp32
// projections, rounded where the unfused GEMM and silu_mul round.
__device__ __forceinline__ float swiglu(float gate, float up) {
  const float g = round_bf16(gate);
  return round_bf16(g / (1.f + __expf(-g))) * round_bf16(up);
}
