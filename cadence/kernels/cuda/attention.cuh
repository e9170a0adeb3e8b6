// The code predictor's attention phase (code_predictor.cu includes this after gemm.cuh): per
// (stream, kv head) the QK-norm and RoPE of the row's key and query heads, the cache write, the
// scores over at most CTX positions, softmax and values.
#pragma once

// ---- attention: per (stream, kv head), QK-norm + RoPE, the cache write, GROUP query heads ----------

// QK-norm then RoPE of element d of one head, computed by a team of HEAD_DIM consecutive threads
// (a power of two), rounded as the qk_norm_rope_store kernel rounds. In two halves so that a thread
// issues every load it needs (two heads, the cache) before it waits for any: rope_loads issues the
// element, its rotation partner, the norm weights and the RoPE tables; rope_finish waits and
// computes. `red` [CONSUMER_WARPS] is scratch for the norm's sum. Every consumer thread calls
// rope_finish (it holds two CTA barriers).
struct RopeLoads {
  slot_t x, partner;
  float w, w_partner, cs, sn;
};
__device__ __forceinline__ RopeLoads rope_loads(const slot_t* head, const act_t* w, const act_t* cos_t,
                                                const act_t* sin_t, int pos, int d) {
  constexpr int HALF = HEAD_DIM / 2;
  const int pd = d < HALF ? d + HALF : d - HALF;
  return {load_slot(head + d), load_slot(head + pd), to_f(w[d]), to_f(w[pd]), to_f(cos_t[pos * HEAD_DIM + d]),
          to_f(sin_t[pos * HEAD_DIM + d])};
}
__device__ float rope_finish(const RopeLoads& l, const slot_t* head, u32 tag, int d, float* red, float eps) {
  constexpr int HALF = HEAD_DIM / 2;
  const int pd = d < HALF ? d + HALF : d - HALF;
  const float x = to_f(wait_slot(head + d, l.x, tag)), xp = to_f(wait_slot(head + pd, l.partner, tag));
  float sq = x * x;
  if (HEAD_DIM <= 32) {  // a team within a warp: xor offsets below HEAD_DIM stay inside it
    for (int o = HEAD_DIM / 2; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    consumers_sync();
  } else {  // a team of whole warps
    sq = warp_sum(sq);
    const int warp = threadIdx.x / 32, team_warp0 = (threadIdx.x / HEAD_DIM) * (HEAD_DIM / 32);
    if (threadIdx.x % 32 == 0) red[warp] = sq;
    consumers_sync();
    sq = 0.f;
    for (int i = 0; i < HEAD_DIM / 32; ++i) sq += red[team_warp0 + i];
  }
  consumers_sync();  // `red` is free again
  const float inv = 1.f / sqrtf(sq / HEAD_DIM + eps);
  const float normed = round_act(l.w * round_act(x * inv));
  const float partner = round_act(l.w_partner * round_act(xp * inv));
  const float rotated = d < HALF ? -partner : partner;
  const float a = round_act(normed * l.cs);
  const float b = round_act(round_act(rotated) * l.sn);
  return round_act(a + b);
}

// One (stream, kv head) per CTA: QK-norm + RoPE of the row's key and GROUP query heads, the key and
// value into the cache, scores, softmax, values. The cache's earlier positions were written by this
// CTA (an item always falls to the same CTA), so it reads them with plain loads, issued with the
// row's own before any wait: one memory round trip per row, not one per dependent step. This
// row's key and value come from shared memory.
__device__ __noinline__ void attend(const slot_t* qkv, u32 qkv_tag, slot_t* attn, u32 tag, act_t* kc, act_t* vc,
                                    const act_t* q_norm, const act_t* k_norm, const act_t* cos_t, const act_t* sin_t,
                                    int streams, int rows_per, int pos0, float eps, float scale, float* scratch,
                                    u64* mark) {  // the trace's stamp once the last row's q is ready, or null
  constexpr int PAIRS = (GROUP * CTX + CONSUMER_WARPS - 1) / CONSUMER_WARPS;  // (query head, position) per warp
  constexpr int PER_LANE = (HEAD_DIM + 31) / 32;
  float* q = scratch;                   // [GROUP, HEAD_DIM]
  float* key = q + GROUP * HEAD_DIM;    // [HEAD_DIM]: this row's key and value
  float* value = key + HEAD_DIM;        // [HEAD_DIM]
  float* prob = value + HEAD_DIM;       // [GROUP, CTX]
  float* red = prob + GROUP * CTX;      // [CONSUMER_WARPS]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = tid / HEAD_DIM, d = tid % HEAD_DIM;  // GROUP * HEAD_DIM <= CONSUMERS (checked by the host)
  for (int item = blockIdx.x; item < streams * KV_HEADS; item += gridDim.x) {
    const int n = item / KV_HEADS, kvh = item % KV_HEADS;
    auto cache_at = [&](int t) { return ((size_t)(n * CTX + t) * KV_HEADS + kvh) * HEAD_DIM; };
    for (int i = 0; i < rows_per; ++i) {
      const int pos = pos0 + i;
      const slot_t* row = qkv + (size_t)(n * rows_per + i) * QKV_WIDTH;
      const slot_t* k_head = row + (HEADS + kvh) * HEAD_DIM;
      const slot_t* v_head = row + (HEADS + KV_HEADS + kvh) * HEAD_DIM;
      const slot_t* q_head = row + (kvh * GROUP + min(g, GROUP - 1)) * HEAD_DIM;  // idle teams: any head
      // every load of this row first: the key, the query head, the value, the cache's earlier positions
      const RopeLoads kl = rope_loads(k_head, k_norm, cos_t, sin_t, pos, d);
      const RopeLoads ql = rope_loads(q_head, q_norm, cos_t, sin_t, pos, d);
      const slot_t v_raw = load_slot(v_head + d);
      float k_old[PAIRS][PER_LANE], v_old[CTX];
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {
        const int t = (warp + j * CONSUMER_WARPS) % CTX;
#pragma unroll
        for (int e = 0; e < PER_LANE; ++e)
          k_old[j][e] = t < pos && lane + 32 * e < HEAD_DIM ? to_f(kc[cache_at(t) + lane + 32 * e]) : 0.f;
      }
#pragma unroll
      for (int t = 0; t < CTX; ++t) v_old[t] = t < pos && g < GROUP ? to_f(vc[cache_at(t) + d]) : 0.f;
      // this row's key (the first team) and value into the cache and shared memory, its query heads
      const float k_new = rope_finish(kl, k_head, qkv_tag, d, red, eps);
      if (g == 0) {
        const act_t v_new = wait_slot(v_head + d, v_raw, qkv_tag);
        kc[cache_at(pos) + d] = from_f(k_new), vc[cache_at(pos) + d] = v_new;
        key[d] = round_act(k_new), value[d] = to_f(v_new);
      }
      const float q_new = rope_finish(ql, q_head, qkv_tag, d, red, eps);  // every team meets its barriers
      if (g < GROUP) q[g * HEAD_DIM + d] = q_new;
      consumers_sync();
      if (mark && i == rows_per - 1) *mark = sm_clock();
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {  // scores
        const int p = warp + j * CONSUMER_WARPS, qg = p / CTX, t = p % CTX;
        float s = neg_inf();
        if (p < GROUP * CTX && t <= pos) {
          float dot = 0.f;
#pragma unroll
          for (int e = 0; e < PER_LANE; ++e) {
            const int c = lane + 32 * e;
            if (c < HEAD_DIM) dot += q[qg * HEAD_DIM + c] * (t < pos ? k_old[j][e] : key[c]);
          }
          s = warp_sum(dot) * scale;
        }
        if (lane == 0 && p < GROUP * CTX) prob[p] = s;
      }
      consumers_sync();
      if (tid < GROUP) {  // softmax over positions 0..pos; probabilities rounded to the cache's dtype
        float m = neg_inf(), total = 0.f;
        for (int t = 0; t <= pos; ++t) m = fmaxf(m, prob[tid * CTX + t]);
        for (int t = 0; t < CTX; ++t) {
          const float e = t <= pos ? __expf(prob[tid * CTX + t] - m) : 0.f;
          total += e;
          prob[tid * CTX + t] = round_act(e);
        }
        red[tid] = total;
      }
      consumers_sync();
      if (g < GROUP) {
        float acc = 0.f;
#pragma unroll
        for (int t = 0; t < CTX; ++t)
          if (t <= pos) acc += prob[g * CTX + t] * (t < pos ? v_old[t] : value[d]);
        put(attn + (size_t)(n * rows_per + i) * HEADS * HEAD_DIM + (kvh * GROUP + g) * HEAD_DIM + d, acc / red[g], tag);
      }
      consumers_sync();
    }
  }
}
