// The decode step's sampler as one CTA a row (sampling/cuda_sampler.py; sampling/reference.py's
// sample_tokens is its definition, triton_sampler the same arithmetic in Triton): the repetition
// penalty and the control-token mask, then the argmax or, sampling, the Gumbel-max over the
// temperature-scaled, top-k / top-p filtered logits with counter-based noise (sampling/rng.py); the
// token goes to `out`, optionally into the row's code history and its embedding row into `emb` (the
// next step's input).
//
// What makes it shorter than the Triton kernel:
// - Everything but the logits is read *before* the PDL wait: the row's slot, parameters, seed,
//   frame counter and code history, and the Gumbel noise is computed from them there. The engine
//   writes those tables with host copies and PyTorch kernels between walks, never from the kernel
//   this one waits for (which writes the logits), so the reads need not wait.
// - The top-k threshold is a radix select, 8 bits a pass (two CTA barriers a pass), not a search of
//   16 reductions; and on bf16 logits without a penalty only over the 16 bits a bf16 has: dividing
//   by a positive temperature keeps distinct bf16 values distinct and in order in fp32, so the k-th
//   largest of x is the k-th largest of x / T (tests/test_cuda_sampler.py checks every bf16 value).
//
// Compiled at run time by NVRTC with these macros prepended:
//   V          the vocabulary (columns a row)       THREADS   threads a CTA (a multiple of 32)
//   LOGITS_BF16  1: bf16 logits, 0: fp32             KEY_BITS  16 (bf16 x, no penalty) or 32 (y's)
//   HAS_ROWS   1: the per-row tables are read at rows[row] (a walk's slots)
//   HAS_SEEN   1: the repetition penalty over seen   MARK_SEEN 1: the token joins `seen`
//   HAS_BAN    1: the control-token mask (EOS banned where ban[] or frame < eos_min_frames)
//   EMBED_WORDS  the embedding row in 4-byte words (0: none)
//   TRIGGER_FIRST  1: let the next kernel launch before this one's wait
//   SMEM_BYTES the dynamic shared memory it is launched with
// IEEE division and logf as PyTorch computes them (no fast math), so the noise and the scaled
// logits have the definition's bits.

#include "prelude.cuh"  // types, PDL (and the bf16 helpers and PTX the other kernels use)

#ifndef CADENCE_EMULATE  // (tests/cuda_emulation/emulate.h has a CPU stand-in for this section)
__device__ __forceinline__ void smem_add(u32* p, u32 v) {
  asm volatile("red.shared.add.u32 [%0], %1;" ::"r"((u32)__cvta_generic_to_shared(p)), "r"(v) : "memory");
}
#endif

#include "sample_math.cuh"  // stream_key, uniform, ordered, sortable, radix_find_bin

constexpr int PER = (V + THREADS - 1) / THREADS;  // a thread's columns: c = threadIdx.x + j * THREADS
constexpr int WARPS = THREADS / 32;
constexpr int PASSES = KEY_BITS / 8;
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: whole warps");
static_assert(KEY_BITS == 32 || (KEY_BITS == 16 && LOGITS_BF16 && !HAS_SEEN),
              "16-bit keys only where every value is a bf16 one (no penalty's products)");

// Shared memory: the radix select's bins (one set a pass, zeroed before the wait) and its choice,
// the warps' partial results.
struct Shared {
  u32 bins[PASSES][256];
  u32 choice[2];  // the pass's digit and the k left within it
  float best[WARPS];
  int at[WARPS];
  double sum[WARPS];  // top-p's block sums; also its min / max keys (as i64 bits)
};
static_assert(sizeof(Shared) <= SMEM_BYTES, "cuda_sampler.SamplerPlan.smem must hold struct Shared");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
// The first column of the largest value over the CTA (torch.argmax's tie rule); every thread gets it.
__device__ int block_argmax(const float (&v)[PER], Shared& sh) {
  float best = neg_inf();
  int at = V;
  for (int j = 0; j < PER; ++j) {  // a thread's columns ascend with j
    const int c = threadIdx.x + j * THREADS;
    if (c < V && (v[j] > best || at == V)) best = v[j], at = c;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oa = __shfl_xor_sync(0xffffffffu, at, o);
    if (ob > best || (ob == best && oa < at)) best = ob, at = oa;
  }
  if (threadIdx.x % 32 == 0) sh.best[threadIdx.x / 32] = best, sh.at[threadIdx.x / 32] = at;
  __syncthreads();
  best = sh.best[0], at = sh.at[0];
  for (int w = 1; w < WARPS; ++w)
    if (sh.best[w] > best || (sh.best[w] == best && sh.at[w] < at)) best = sh.best[w], at = sh.at[w];
  return at;
}

__device__ double block_sum(double v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // the previous call's readers are done with sh.sum
  if (threadIdx.x % 32 == 0) sh.sum[threadIdx.x / 32] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < WARPS; ++w) t += sh.sum[w];
  return t;
}
__device__ i64 block_extreme(i64 v, bool want_max, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const i64 other = __shfl_xor_sync(0xffffffffu, v, o);
    v = want_max ? max(v, other) : min(v, other);
  }
  i64* r = reinterpret_cast<i64*>(sh.sum);
  __syncthreads();
  if (threadIdx.x % 32 == 0) r[threadIdx.x / 32] = v;
  __syncthreads();
  i64 t = r[0];
  for (int w = 1; w < WARPS; ++w) t = want_max ? max(t, r[w]) : min(t, r[w]);
  return t;
}

// The k-th largest of the keys (KEY_BITS wide, columns below V), ties counted: a radix select from
// the top, 8 bits a pass, each pass counting the keys that match the digits chosen so far into 256
// bins (zeroed by the caller), then one warp finding the bin where the count from the top reaches k.
__device__ u32 kth_largest(const u32 (&key)[PER], u32 k, Shared& sh) {
  u32 prefix = 0, mask = 0;  // the digits chosen so far, and the bits they cover
  for (int pass = 0; pass < PASSES; ++pass) {
    const int shift = KEY_BITS - 8 * (pass + 1);
    u32* count = sh.bins[pass];
    for (int j = 0; j < PER; ++j)
      if ((int)threadIdx.x + j * THREADS < V && (key[j] & mask) == prefix) smem_add(&count[(key[j] >> shift) & 255u], 1);
    __syncthreads();
    if (threadIdx.x < 32) radix_find_bin(count, k, threadIdx.x, sh.choice);
    __syncthreads();  // (the next pass writes `choice` only after its own counting barrier)
    prefix |= sh.choice[0] << shift, mask |= 255u << shift, k = sh.choice[1];
  }
  return prefix;
}

// Keep the values whose mass from below exceeds 1 - top_p: the smallest such key by a bisection
// over the keys (triton_sampler's search, 33 block sums; only rows with top_p < 1 take it).
__device__ void top_p_filter(float (&y)[PER], float top_p, Shared& sh) {
  i64 key[PER], lo = 0x7FFFFFFFFFFFFFFFll, hi = -lo - 1;
  for (int j = 0; j < PER; ++j) {
    key[j] = sortable(y[j]);
    if ((int)threadIdx.x + j * THREADS < V) lo = min(lo, key[j]), hi = max(hi, key[j]);
  }
  lo = block_extreme(lo, false, sh) - 1;  // mass(<= lo) = 0
  hi = block_extreme(hi, true, sh);       // mass(<= hi) = 1
  const float m = __int_as_float((int)(hi >= 0 ? hi : hi ^ 0x7FFFFFFF));  // the largest y: its key undone
  float probs[PER];
  double part = 0.0;
  for (int j = 0; j < PER; ++j) {
    probs[j] = (int)threadIdx.x + j * THREADS < V ? expf(y[j] - m) : 0.f;
    part += probs[j];
  }
  const float total = (float)block_sum(part, sh);
  for (int j = 0; j < PER; ++j) probs[j] /= total;
  for (int it = 0; it < 33; ++it) {
    const i64 mid = lo + (hi - lo) / 2;
    double mass = 0.0;
    for (int j = 0; j < PER; ++j) mass += key[j] <= mid ? probs[j] : 0.f;
    const bool ok = (float)block_sum(mass, sh) > 1.f - top_p;
    hi = ok ? mid : hi;
    lo = ok ? lo : mid;
  }
  for (int j = 0; j < PER; ++j) y[j] = key[j] >= hi ? y[j] : neg_inf();
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    sample_kernel(const void* logits, const i64* rows, bool* seen, const float* penalty, const bool* ban_eos,
                  const bool* do_sample, const float* temperature, const i64* top_k, const float* top_p,
                  const i64* seed, const i64* frame, i64* out, const u32* table, u32* emb, int eos_id,
                  int suppress_start, int eos_min_frames, u32 codebook_key, int out_stride, int emb_stride) {
  DYNAMIC_SHARED(smem);
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  if (TRIGGER_FIRST) pdl_trigger();
  const int row = blockIdx.x, tid = threadIdx.x;
  // -- before the wait: the row's tables (never written by the kernel before) and its noise -------
  const i64 trow = HAS_ROWS ? rows[row] : row;
  const bool sampling = do_sample[trow];
  const float temp = temperature[trow], p = top_p[trow];
  const i64 k = top_k[trow];
  float noise[PER];
  if (sampling) {
    const u32 key = stream_key((u64)seed[trow], (u64)frame[trow], codebook_key);
    for (int j = 0; j < PER; ++j) noise[j] = -logf(-logf(uniform(key, tid + j * THREADS)));
  }
  bool was_seen[PER] = {};
  float pen = 1.f;
  if (HAS_SEEN) {
    pen = penalty[trow];
    for (int j = 0; j < PER; ++j)
      if (tid + j * THREADS < V) was_seen[j] = seen[trow * V + tid + j * THREADS];
  }
  const bool ban = HAS_BAN && (ban_eos[trow] || frame[trow] < eos_min_frames);
  for (int i = tid; i < PASSES * 256; i += THREADS) (&sh.bins[0][0])[i] = 0;
  __syncthreads();  // zeroed before any thread counts
  pdl_wait();
  if (!TRIGGER_FIRST) pdl_trigger();
  // -- the logits --------------------------------------------------------------------------------
  float x[PER];
  for (int j = 0; j < PER; ++j) {
    const int c = tid + j * THREADS;
#if LOGITS_BF16
    x[j] = c < V ? __uint_as_float((u32) static_cast<const u16*>(logits)[(i64)row * V + c] << 16) : neg_inf();
#else
    x[j] = c < V ? static_cast<const float*>(logits)[(i64)row * V + c] : neg_inf();
#endif
    if (HAS_SEEN && was_seen[j]) x[j] = x[j] < 0.f ? x[j] * pen : x[j] / pen;
    if (HAS_BAN && ((c >= suppress_start && c != eos_id) || (c == eos_id && ban))) x[j] = neg_inf();
  }
  int choice;
  if (!sampling) {
    choice = block_argmax(x, sh);
  } else {
    float y[PER];
    for (int j = 0; j < PER; ++j) y[j] = x[j] / temp;
    if (k > 0 && k < V) {  // the k-th largest value; ties at it kept (as HF)
      u32 key[PER];
      for (int j = 0; j < PER; ++j) key[j] = KEY_BITS == 16 ? ordered(x[j]) >> 16 : ordered(y[j]);
      const u32 kth = kth_largest(key, (u32)k, sh);
      for (int j = 0; j < PER; ++j) y[j] = key[j] >= kth ? y[j] : neg_inf();
    }
    if (p < 1.f) top_p_filter(y, p, sh);
    for (int j = 0; j < PER; ++j) y[j] = tid + j * THREADS < V ? y[j] + noise[j] : neg_inf();
    choice = block_argmax(y, sh);
  }
  // -- the token, its history, its embedding row ---------------------------------------------------
  if (tid == 0) {
    out[(i64)row * out_stride] = choice;
    if (MARK_SEEN) seen[trow * V + choice] = true;
  }
#if EMBED_WORDS
  const u32* src = table + (i64)choice * EMBED_WORDS;
  u32* dst = emb + (i64)row * emb_stride;
  if (EMBED_WORDS % 4 == 0)  // 16-byte copies (cuda_sampler checks the alignment)
    for (int i = tid; i < EMBED_WORDS / 4; i += THREADS)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  else
    for (int i = tid; i < EMBED_WORDS; i += THREADS) dst[i] = src[i];
#endif
}
