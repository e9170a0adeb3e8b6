// One attention head's QK-norm and RoPE held by a warp, 4 elements a lane (d = 4 lane .. 4 lane + 3),
// rounded as attention/reference.py's qk_norm_rope_store rounds: the normalised value and its product with the
// weight, RoPE's two products and their sum in bf16. For slab_attention.cuh and
// decode_attention.cu; HD (the head dim) must be 128, so that rotate-half's partner d +- 64 is
// lane ^ 16.
#pragma once

static_assert(HD == 128, "a warp holds a head of 128, 4 elements a lane");

__device__ __forceinline__ void unpack4(uint2 v, float (&f)[4]) {
  f[0] = lo(v.x), f[1] = hi(v.x), f[2] = lo(v.y), f[3] = hi(v.y);
}
__device__ __forceinline__ uint2 pack4(const float (&f)[4]) {
  uint2 v;
  v.x = pack2(f[0], f[1]);
  v.y = pack2(f[2], f[3]);
  return v;
}

// The lane's 4 elements of the head `raw`, normalised (times the lane's 4 norm weights `weight`, as
// loaded by norm_weights) and rotated by cos, sin.
__device__ __forceinline__ uint2 norm_rope(uint2 raw, uint2 weight, const float (&c)[4], const float (&s)[4], int lane,
                                           float eps) {
  float x[4], w[4];
  unpack4(raw, x);
  unpack4(weight, w);
  float ss = x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = 1.f / sqrtf(ss / HD + eps);
  float out[4];
  for (int e = 0; e < 4; ++e) x[e] = round_bf16(w[e] * round_bf16(x[e] * inv));
  for (int e = 0; e < 4; ++e) {
    const float partner = __shfl_xor_sync(0xffffffffu, x[e], 16);
    const float rotated = lane < 16 ? -partner : partner;
    out[e] = round_bf16(round_bf16(x[e] * c[e]) + round_bf16(rotated * s[e]));
  }
  return pack4(out);
}

// The lane's 4 weights of a norm [HD].
__device__ __forceinline__ uint2 norm_weights(const u16* weight, int lane) {
  return *reinterpret_cast<const uint2*>(weight + 4 * lane);
}
__device__ __forceinline__ uint2 norm_rope(uint2 raw, const u16* weight, const float (&c)[4], const float (&s)[4],
                                           int lane, float eps) {
  return norm_rope(raw, norm_weights(weight, lane), c, s, lane, eps);
}

// The lane's cos and sin at position `pos` (tables [positions, HD]).
__device__ __forceinline__ void rope_at(const u16* cos, const u16* sin, i64 pos, int lane, float (&c)[4],
                                        float (&s)[4]) {
  unpack4(*reinterpret_cast<const uint2*>(cos + (size_t)pos * HD + 4 * lane), c);
  unpack4(*reinterpret_cast<const uint2*>(sin + (size_t)pos * HD + 4 * lane), s);
}
