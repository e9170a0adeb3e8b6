// The code predictor's attention inside the slab GEMM of its o projection (slab_gemm.cu with
// ATTN 1): rows whose context fits one cache page (<= PS tokens), so every CTA
// attends over the whole of it itself (16 heads x <= 16 tokens: ~70 K multiply-adds a row) and no
// attention kernel sits between the qkv and o GEMMs. Either one decode row (M = 1), or M
// consecutive tokens of one stream in one page (the code predictor's first pass: positions 0 and
// 1, each row attending over the rows before it and itself). The definition is attention/reference.py's
// qk_norm_rope_store + paged_attention, rounded where they round: the QK-norm's normalised value and
// its product with the weight, RoPE's two products and their sum in bf16; scores, softmax and the
// weighted sum of values in fp32, the output rounded to bf16.
//
// Before the PDL wait (attend_prefetch): the page's tokens before the first row's, copied from the
// cache into shared memory on the slab's mbarrier. They were written by the earlier steps'
// kernels, which have completed: the qkv GEMM before this one lets it launch only after its own
// wait (LayerPlans keeps o_attention off where qkv triggers first), so every kernel before that
// GEMM has ended. The index tensors (positions, contexts, slots, page) are the engine's constants.
// After the wait (attend): each row's q, k and v from qkv (x), QK-norm and RoPE, the new keys and
// values into shared memory beside the others and (CTA 0) into the cache, then the attention,
// written to xs as the GEMM's input rows (over the queries, which xs holds until then).
//
// Macros: HQ, HKV query and key/value heads (HKV = WARPS: warp w takes kv head w and its HQ / HKV
// query heads), HD head dim (128), PS page size (the longest context; HQ / HKV * PS = 32 lanes).
#pragma once

#include "head_rope.cuh"  // norm_rope, rope_at, unpack4, pack4

constexpr int G = HQ / HKV;  // query heads a kv head
static_assert(HKV == WARPS && HD == 128 && G * PS == 32 && K == HQ * HD,
              "the fused attention's lane layout: a warp a kv head, a lane a (query head, token)");
constexpr int TOKEN = HKV * HD;           // a token's keys (or values) in the cache, elements
constexpr int KV_ELEMS = 2 * PS * TOKEN;  // shared memory: the page's keys, then its values
constexpr int QKV = (HQ + 2 * HKV) * HD;  // a qkv row

// Thread 0, before the wait: the page's tokens before the first row's into kv, completing on `bar`.
// Returns their bytes (both copies), for the barrier's expected count.
__device__ __forceinline__ unsigned attend_prefetch_bytes(const Attention& at) {
  return 2u * (unsigned)(at.context[0] - 1) * TOKEN * 2;
}
__device__ __forceinline__ void attend_prefetch(const Attention& at, u16* kv, u64* bar) {
  const unsigned bytes = (unsigned)(at.context[0] - 1) * TOKEN * 2;
  if (bytes == 0) return;
  const size_t first = (size_t)at.page[0] * PS * TOKEN;
  bulk_load(kv, at.k_cache + first, bytes, bar);
  bulk_load(kv + PS * TOKEN, at.v_cache + first, bytes, bar);
}

// The rows' attention into xs (each row's HQ x HD outputs, bf16): warp w takes kv head w.
__device__ __forceinline__ void attend(const u16* qkv, const Attention& at, u16* kv, uint4* xs, u64* bar, int warp,
                                       int lane, float eps) {
  u16* rows = reinterpret_cast<u16*>(xs);  // M x K: the queries, then the attention's outputs
  for (int m = 0; m < M; ++m) {
    float c[4], s[4];
    rope_at(at.cos, at.sin, at.position[m], lane, c, s);
    auto head = [&](int h) { return *reinterpret_cast<const uint2*>(qkv + (size_t)m * QKV + h * HD + 4 * lane); };
    const uint2 k = norm_rope(head(HQ + warp), at.k_norm, c, s, lane, eps), v = head(HQ + HKV + warp);
    const size_t mine = (size_t)(at.context[m] - 1) * TOKEN + warp * HD + 4 * lane;  // the token's place in kv
    *reinterpret_cast<uint2*>(kv + mine) = k;
    *reinterpret_cast<uint2*>(kv + PS * TOKEN + mine) = v;
    if (blockIdx.x == 0) {  // the cache's copy, for the steps after this one
      const size_t slot = (size_t)at.slot[m] * TOKEN + warp * HD + 4 * lane;
      *reinterpret_cast<uint2*>(at.k_cache + slot) = k;
      *reinterpret_cast<uint2*>(at.v_cache + slot) = v;
    }
    for (int h = 0; h < G; ++h)
      *reinterpret_cast<uint2*>(rows + m * K + (G * warp + h) * HD + 4 * lane) =
          norm_rope(head(G * warp + h), at.q_norm, c, s, lane, eps);
  }
  mbar_wait(bar, 0);  // the earlier tokens (and the slab)
  __syncwarp();       // the warp's own queries, keys and values
  const int h = lane / PS, t = lane % PS;
  for (int m = 0; m < M; ++m) {
    const int ctx = (int)at.context[m];
    // Scores: lane (h, t) = query head G w + h against token t, its 16-byte chunks in an order
    // that starts at t (the tokens' rows share banks).
    const uint4* qrow = reinterpret_cast<const uint4*>(rows + m * K + (G * warp + h) * HD);
    const uint4* krow = reinterpret_cast<const uint4*>(kv + (size_t)t * TOKEN + warp * HD);
    float score = 0.f;
    for (int j = 0; j < HD / 8; ++j) {
      const int chunk = (j + t) % (HD / 8);
      const uint4 a = qrow[chunk], b = krow[chunk];
      score += lo(a.x) * lo(b.x) + hi(a.x) * hi(b.x) + lo(a.y) * lo(b.y) + hi(a.y) * hi(b.y) + lo(a.z) * lo(b.z) +
               hi(a.z) * hi(b.z) + lo(a.w) * lo(b.w) + hi(a.w) * hi(b.w);
    }
    score = t < ctx ? score * at.scale : __uint_as_float(0xff800000u);  // -inf past the context
    float top = score;  // softmax over the PS lanes of one query head
    for (int o = PS / 2; o > 0; o >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
    const float e = expf(score - top);
    float sum = e;
    for (int o = PS / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float p = e / sum;
    // The weighted values: lane holds d = 4 lane .. 4 lane + 3 of each query head.
    float acc[G][4] = {};
    for (int u = 0; u < ctx; ++u) {
      float val[4];
      unpack4(*reinterpret_cast<const uint2*>(kv + PS * TOKEN + (size_t)u * TOKEN + warp * HD + 4 * lane), val);
      for (int g = 0; g < G; ++g) {
        const float pg = __shfl_sync(0xffffffffu, p, g * PS + u);
        for (int i = 0; i < 4; ++i) acc[g][i] += pg * val[i];
      }
    }
    __syncwarp();  // every lane's scores have read the queries the outputs now replace
    for (int g = 0; g < G; ++g)
      *reinterpret_cast<uint2*>(rows + m * K + (G * warp + g) * HD + 4 * lane) = pack4(acc[g]);
  }
}
