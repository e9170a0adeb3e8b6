// The CUDA sampler's arithmetic (sampler.cu): the noise's hash and uniforms, the floats'
// order-preserving keys, a radix select's bin search.
#pragma once

__device__ __forceinline__ unsigned mix32(unsigned x) {  // rng._mix on 32-bit lanes
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 16;
  return x;
}
// rng.stream_key: one 32-bit key for a row's (seed, frame counter, codebook key).
__device__ __forceinline__ unsigned stream_key(unsigned long long seed, unsigned long long frame, unsigned codebook_key) {
  unsigned key = mix32((unsigned)seed ^ 0x1E3779B9u);
  key = mix32(key ^ (unsigned)(seed >> 32));
  key = mix32(key ^ (unsigned)frame);
  return mix32(key ^ codebook_key);
}
// rng.uniform of column c under a row's stream key: 24 random bits in (0, 1), clamped below 1.
__device__ __forceinline__ float uniform(unsigned key, unsigned c) {
  const unsigned h = mix32(mix32(key ^ (c * 0x1E3779B9u + 0x5BD1E995u)) ^ key);
  return fminf(((float)(h >> 8) + 0.5f) / 16777216.f, 0.99999994f);  // rng.U_MAX: the noise stays finite
}
// Keys whose unsigned order is the floats' order (-0 below +0, as triton_sampler's `_sortable`).
__device__ __forceinline__ unsigned ordered(float x) {
  const unsigned u = __float_as_uint(x);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}
// triton_sampler's signed keys (top-p's search compares them as it does).
__device__ __forceinline__ long long sortable(float x) {
  const long long bits = (long long)(int)__float_as_uint(x);
  return bits >= 0 ? bits : bits ^ 0x7FFFFFFF;
}

// One pass of a radix select's bin search: `count` holds 256 bins of key counts for the pass's
// digit. One warp (lane 0-31 calling) reads them from the top (lane l: bins 255 - 8l down to
// 248 - 8l), scans its lanes' sums, and the lane where the count from the top reaches k writes the
// bin to choice[0] and the k left within it to choice[1]. The caller's barriers order the counts
// before and the choice after.
__device__ __forceinline__ void radix_find_bin(const unsigned* count, unsigned k, int lane, unsigned* choice) {
  unsigned c[8], mine = 0;
  for (int e = 0; e < 8; ++e) c[e] = count[255 - 8 * lane - e], mine += c[e];
  unsigned through = mine;  // the count in the bins above this lane's, and its own
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned up = __shfl_up_sync(0xffffffffu, through, o);
    if (lane >= o) through += up;
  }
  unsigned run = through - mine;
  if (run < k && k <= through)
    for (int e = 0; e < 8; ++e) {
      if (run + c[e] >= k) {
        choice[0] = 255u - 8u * lane - e, choice[1] = k - run;
        break;
      }
      run += c[e];
    }
}
