// Activations that cross CTAs, for the code predictor (code_predictor.cu includes this after its
// act_t, to_f, from_f, load_cg, load16_cg, load16_volatile, load_word, store_word, poll_pause and
// grid_sync).
#pragma once

// SYNC_LL 0: act_t arrays, ordered by the grid barrier between phases. SYNC_LL 1 (NCCL's LL
// protocol, perf-notes #43): each element one 64-bit word, the act_t's bits below the tag of the
// phase that wrote it (the frame's epoch * 1024 + the phase's index), written and read relaxed as
// one access (single-copy atomic). A reader polls a word until it carries the tag it expects: the
// data and its readiness in one round trip, and no barrier at all. Reuse is safe without one: every
// phase reads all of the previous phase's outputs (attention: its heads', and the next phase all
// of attention's), so whoever rewrites a buffer has waited, through that chain, for its last readers;
// a CTA with nothing to compute in a phase reads nothing in it.
#if SYNC_LL
typedef u64 slot_t;
__device__ __forceinline__ slot_t load_slot(const slot_t* p) { return load_word(p); }
__device__ __forceinline__ act_t act_of(slot_t w) {
#if ACT_BF16
  return (act_t)(w & 0xffffu);
#else
  return __uint_as_float((u32)w);
#endif
}
__device__ __forceinline__ act_t wait_slot(const slot_t* p, slot_t w, u32 tag) {
  while ((u32)(w >> 32) != tag) poll_pause(), w = load_word(p);
  return act_of(w);
}
__device__ __forceinline__ void put_raw(slot_t* p, act_t v, u32 tag) {
#if ACT_BF16
  store_word(p, (u64)tag << 32 | (u64)v);
#else
  store_word(p, (u64)tag << 32 | (u64)__float_as_uint(v));
#endif
}
#else
typedef act_t slot_t;
__device__ __forceinline__ slot_t load_slot(const slot_t* p) { return load_cg(p); }
__device__ __forceinline__ act_t wait_slot(const slot_t*, slot_t w, u32) { return w; }
__device__ __forceinline__ void put_raw(slot_t* p, act_t v, u32) { *p = v; }
#endif
// 16 bytes of consecutive elements (a "pack": 8 bf16 or 4 fp32 values, or 2 SYNC_LL words), the
// unit in which load_rows reads activation rows: load_pack issues the load, wait_pack waits for its
// elements' tag (SYNC_LL) and returns them as floats.
typedef uint4 Pack;
constexpr int PACK = 16 / sizeof(slot_t);
#if SYNC_LL
__device__ __forceinline__ Pack load_pack(const slot_t* p) { return load16_volatile(p); }
__device__ __forceinline__ void wait_pack(const slot_t* p, Pack w, u32 tag, float (&out)[PACK]) {
  out[0] = to_f(wait_slot(p, (u64)w.y << 32 | w.x, tag));
  out[1] = to_f(wait_slot(p + 1, (u64)w.w << 32 | w.z, tag));
}
#else
__device__ __forceinline__ Pack load_pack(const slot_t* p) { return load16_cg(p); }
__device__ __forceinline__ void wait_pack(const slot_t*, Pack w, u32, float (&out)[PACK]) {
#if ACT_BF16
  out[0] = __uint_as_float(w.x << 16), out[1] = __uint_as_float(w.x & 0xffff0000u);
  out[2] = __uint_as_float(w.y << 16), out[3] = __uint_as_float(w.y & 0xffff0000u);
  out[4] = __uint_as_float(w.z << 16), out[5] = __uint_as_float(w.z & 0xffff0000u);
  out[6] = __uint_as_float(w.w << 16), out[7] = __uint_as_float(w.w & 0xffff0000u);
#else
  out[0] = __uint_as_float(w.x), out[1] = __uint_as_float(w.y);
  out[2] = __uint_as_float(w.z), out[3] = __uint_as_float(w.w);
#endif
}
#endif
__device__ __forceinline__ void put(slot_t* p, float v, u32 tag) { put_raw(p, from_f(v), tag); }
// A pack's values (already rounded to act_t) stored at p (16-byte aligned): one 16-byte store.
__device__ __forceinline__ void store_pack(slot_t* p, const float (&v)[PACK], u32 tag) {
#if SYNC_LL
  put(p, v[0], tag), put(p + 1, v[1], tag);
#elif ACT_BF16
  *reinterpret_cast<uint4*>(p) = make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]),
                                            pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
#else
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
#endif
}

// The end of a phase: every CTA's outputs written before any CTA reads them (the grid barrier), or
// with SYNC_LL only this CTA's warps done with its shared memory.
__device__ __forceinline__ void phase_end(u32* counter, u32& passed) {
#if SYNC_LL
  consumers_sync();
#else
  grid_sync(counter, passed);
#endif
}

