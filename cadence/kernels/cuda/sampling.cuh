// The code predictor's sampler: sample_tokens' arithmetic, as triton_ops._sample_choice computes
// it, by one CTA per stream with block-wide reductions. code_predictor.cu includes it after its own
// definitions (act_t, slot_t, load_slot, wait_slot, to_f, neg_inf, warp_sum, consumers_sync, ...).
#pragma once
#include "sample_math.cuh"  // stream_key, uniform, ordered, sortable, radix_find_bin

constexpr int PER_THREAD = (VOCAB + CONSUMERS - 1) / CONSUMERS;

// Block-wide reductions over the consumers (`red` holds CONSUMER_WARPS values of 8 bytes).
__device__ float block_sum(float v, double* red) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  consumers_sync();
  float t = 0.f;
  for (int w = 0; w < CONSUMER_WARPS; ++w) t += (float)red[w];
  consumers_sync();
  return t;
}
__device__ i64 block_min_max(i64 v, bool want_max, double* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const i64 other = __shfl_xor_sync(0xffffffffu, v, o);
    v = want_max ? max(v, other) : min(v, other);
  }
  i64* r = reinterpret_cast<i64*>(red);
  if (threadIdx.x % 32 == 0) r[threadIdx.x / 32] = v;
  consumers_sync();
  i64 t = r[0];
  for (int w = 1; w < CONSUMER_WARPS; ++w) t = want_max ? max(t, r[w]) : min(t, r[w]);
  consumers_sync();
  return t;
}
// The first index of the largest value over the block (values[j] is column threadIdx.x + j * CONSUMERS).
__device__ int block_argmax(const float (&values)[PER_THREAD], double* red) {
  float best = neg_inf();
  int at = VOCAB;
  for (int j = 0; j < PER_THREAD; ++j) {
    const int c = threadIdx.x + j * CONSUMERS;
    if (c < VOCAB && (values[j] > best || at == VOCAB)) best = values[j], at = c;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oa = __shfl_xor_sync(0xffffffffu, at, o);
    if (ob > best || (ob == best && oa < at)) best = ob, at = oa;
  }
  float* rb = reinterpret_cast<float*>(red);
  int* ra = reinterpret_cast<int*>(rb + CONSUMER_WARPS);
  if (threadIdx.x % 32 == 0) rb[threadIdx.x / 32] = best, ra[threadIdx.x / 32] = at;
  consumers_sync();
  best = rb[0], at = ra[0];
  for (int w = 1; w < CONSUMER_WARPS; ++w)
    if (rb[w] > best || (rb[w] == best && ra[w] < at)) best = rb[w], at = ra[w];
  consumers_sync();
  return at;
}

// The k-th largest of the block's keys (key[j]: column threadIdx.x + j * CONSUMERS, valid below
// VOCAB), exactly, ties counted: a radix select, 8 bits a pass from the top, each pass counting
// the keys that match the digits chosen so far into 256 bins (`bins`: SAMPLER_WORDS of shared
// memory). 9 CTA barriers, where a bisection over the keys' range took 66 (perf-notes #52).
constexpr int SAMPLER_WORDS = 4 * 256 + 2;  // (cuda_code_predictor.KernelPlan reserves them)
__device__ u32 block_kth_largest(const u32 (&key)[PER_THREAD], u32 k, u32* bins) {
  u32* choice = bins + 4 * 256;  // the pass's digit and the k left within it
  for (int i = threadIdx.x; i < 4 * 256; i += CONSUMERS) bins[i] = 0;
  consumers_sync();
  u32 prefix = 0, mask = 0;  // the digits chosen so far, and the bits they cover
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    u32* count = bins + pass * 256;
    for (int j = 0; j < PER_THREAD; ++j)
      if (threadIdx.x + j * CONSUMERS < VOCAB && (key[j] & mask) == prefix)
        smem_add(&count[(key[j] >> shift) & 255u], 1);
    consumers_sync();
    if (threadIdx.x < 32) radix_find_bin(count, k, threadIdx.x, choice);  // one warp: the bin reaching k
    consumers_sync();  // (the next pass writes `choice` only after its own counting barrier)
    prefix |= choice[0] << shift, mask |= 255u << shift, k = choice[1];
  }
  return prefix;
}

__device__ __noinline__ int sample_row(const slot_t* logits, u32 logits_tag, int n, const bool* do_sample,
                                      const float* temperature, const i64* top_k, const float* top_p, const i64* seed,
                                      const i64* frame, u32 codebook_key, double* red, u32* bins) {
  slot_t raw[PER_THREAD];
  float y[PER_THREAD];
  for (int j = 0; j < PER_THREAD; ++j) {  // every load in flight before the first wait
    const int c = threadIdx.x + j * CONSUMERS;
    if (c < VOCAB) raw[j] = load_slot(logits + (size_t)n * VOCAB + c);
  }
  for (int j = 0; j < PER_THREAD; ++j) {
    const int c = threadIdx.x + j * CONSUMERS;
    y[j] = c < VOCAB ? to_f(wait_slot(logits + (size_t)n * VOCAB + c, raw[j], logits_tag)) : neg_inf();
  }
  if (!do_sample[n]) return block_argmax(y, red);
  i64 key[PER_THREAD];
  const float temp = temperature[n];
  for (int j = 0; j < PER_THREAD; ++j) y[j] = y[j] / temp, key[j] = sortable(y[j]);
  const i64 k = top_k[n];
  if (k > 0 && k < VOCAB) {  // the k-th largest value; ties at it kept
    u32 ukey[PER_THREAD];
    for (int j = 0; j < PER_THREAD; ++j) ukey[j] = ordered(y[j]);
    const u32 kth = block_kth_largest(ukey, (u32)k, bins);
    for (int j = 0; j < PER_THREAD; ++j) y[j] = ukey[j] >= kth ? y[j] : neg_inf(), key[j] = sortable(y[j]);
  }
  const float p = top_p[n];
  if (p < 1.f) {  // the smallest key whose cumulative mass from below exceeds 1 - top_p
    i64 lo = I64_MAX, hi = I64_MIN;
    for (int j = 0; j < PER_THREAD; ++j)
      if (threadIdx.x + j * CONSUMERS < VOCAB) lo = min(lo, key[j]), hi = max(hi, key[j]);
    lo = block_min_max(lo, false, red) - 1;
    hi = block_min_max(hi, true, red);
    const float m = __int_as_float((int)(hi >= 0 ? hi : hi ^ 0x7FFFFFFF));  // the largest y: its key undone
    float probs[PER_THREAD], part = 0.f;
    for (int j = 0; j < PER_THREAD; ++j) probs[j] = threadIdx.x + j * CONSUMERS < VOCAB ? __expf(y[j] - m) : 0.f;
    for (int j = 0; j < PER_THREAD; ++j) part += probs[j];
    const float total = block_sum(part, red);
    for (int j = 0; j < PER_THREAD; ++j) probs[j] = probs[j] / total;
    for (int it = 0; it < 33; ++it) {
      const i64 mid = lo + (hi - lo) / 2;
      float mass = 0.f;
      for (int j = 0; j < PER_THREAD; ++j) mass += key[j] <= mid ? probs[j] : 0.f;
      const bool ok = block_sum(mass, red) > 1.f - p;
      hi = ok ? mid : hi;
      lo = ok ? lo : mid;
    }
    for (int j = 0; j < PER_THREAD; ++j) y[j] = key[j] >= hi ? y[j] : neg_inf();
  }
  const u32 noise_key = stream_key((u64)seed[n], (u64)frame[n], codebook_key);
  for (int j = 0; j < PER_THREAD; ++j) {
    const u32 c = threadIdx.x + j * CONSUMERS;
    y[j] = c < VOCAB ? y[j] - __logf(-__logf(uniform(noise_key, c))) : neg_inf();
  }
  return block_argmax(y, red);
}

