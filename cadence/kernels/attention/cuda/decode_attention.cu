// Decode attention for many rows (attention/cuda_decode_attention.py; the code predictor's steps at
// 64 rows, whose one or two pages a row arrive before the wait): each
// row is its stream's new token, and one CTA takes a row and HC of its kv heads (a warp a kv head
// and its G query heads, and one more warp that copies the pages). What the Triton kernel
// (triton_paged_attention.fused_qk_norm_rope_attention) does, with the cached keys and values streamed by the
// copy engine:
// - Before the PDL wait, the first STAGES pages of the row's cached tokens are on their way into
//   shared memory (cp.async.bulk, a token's HC heads of keys, then of values, a copy each). The
//   row's context length, page table, position and slot are written before the walk's layers start
//   (the frame graph, or constants of the code predictor's index), never by a kernel of the chain.
//   The cached cells were written by this layer's attention at earlier steps: where kernels wait
//   first, two or more kernels back, so complete; where they trigger first (the batch-64 graphs) at
//   least ~30 kernels back (a decode step of the code predictor's 5 layers, its head and sampler),
//   and for this kernel to start before that one ends every kernel between would have to hold its
//   CTAs on the SMs at once beside this one's ~139 KB a CTA: a few can, 30 cannot.
// - After it: the row's q, k and v from qkv, QK-norm and RoPE (head_rope.cuh), the new key and value
//   to the cache slot; then the pages in turn as they land. The copies are the last warp's whole job:
//   it reissues a stage STAGES pages ahead as soon as every head's warp has arrived on the stage's
//   "empty" mbarrier, so no head's warp waits on a CTA barrier or on the copy engine's queue between
//   two pages, and the copies' time overlaps the arithmetic's instead of adding to it.
// - Per page and warp, scores S^T (16 tokens x the G heads) = K . Q^T and the weighted values
//   O^T += V^T . P^T on the tensor cores (m16n8k16, bf16 in, fp32 sums; the G <= 8 heads are B's 8
//   columns), online softmax in fp32 with the probabilities rounded to bf16 for the second product
//   (as the Triton kernel does); lane (g, c) holds heads 2c, 2c + 1 of D, so each lane keeps its
//   own heads' running max and sum. The new token is one more softmax step from registers at the
//   end, as the Triton kernel's _attend_one.
// Token rows in shared memory are padded by 16 bytes, so the fragments' 32-bit loads (8 tokens at
// one offset) fall in different banks.
//
// NEW > 1 (the code predictor's first pass): every NEW consecutive rows are one
// sequence's NEW new tokens at consecutive positions, the last at its context - 1; a CTA takes the
// sequence, each warp its kv head's G query heads of all NEW rows (NEW x G columns of B), and a row
// attends over the cached pages and the sequence's new tokens up to its own, from registers.
//
// Macros: HQ, HKV (query and kv heads), HD (128), PS (page size, 16), HC (kv heads a CTA, a warp
// each), NEW (rows a sequence, default 1), STAGES (pages in flight a CTA),
// TRIGGER_FIRST (1: let the next kernel launch before the wait), MAX_PAGES (the longest page table
// it takes), SMEM_BYTES (the dynamic shared memory it is launched with).

#include "prelude.cuh"    // types, bf16 rounding, PDL, bulk copies, mma.sync
#include "head_rope.cuh"  // norm_rope, rope_at, unpack4, pack4

#ifndef NEW
#define NEW 1
#endif
constexpr int G = HQ / HKV;                 // query heads a kv head
constexpr int NQ = NEW * G;                 // a warp's query columns: row j's head h is column j * G + h
constexpr int HEAD_WARPS = HC;             // warp w takes kv head w
constexpr int THREADS = 32 * (HEAD_WARPS + 1);  // the heads' warps, then the copying warp
constexpr int PRODUCER = HEAD_WARPS;        // the copying warp
constexpr int QKV = (HQ + 2 * HKV) * HD;    // a qkv row
constexpr int TOKEN = HKV * HD;             // a token's keys (or values) in the cache, elements
constexpr int ROW = HC * HD + 8;            // a token's HC heads in shared memory, padded 16 bytes
constexpr int STAGE = 2 * PS * ROW;         // a page's keys, then its values
constexpr u32 STAGE_BYTES = 2u * PS * HC * HD * 2;
static_assert(PS == 16 && G >= 1 && NQ <= 8 && HQ % HKV == 0 && HKV % HC == 0, "the kernel's fragment layout");

// Shared memory after the stages: the pages' mbarriers, each warp's queries (bf16) and, after the
// pages, its sums (fp32) with each head's running max and sum.
struct Tail {
  u64 full[STAGES];   // a stage's page has landed (the copying warp's expected bytes)
  u64 empty[STAGES];  // every head's warp is done with the stage (HC arrivals)
  int page[MAX_PAGES];  // the row's page table, read once (not a global load a page)
  u16 q[HEAD_WARPS][NQ][HD];
  float o[HEAD_WARPS][NQ][HD];
  float m[HEAD_WARPS][NQ], l[HEAD_WARPS][NQ];
};
static_assert((size_t)STAGES * STAGE * 2 + sizeof(Tail) <= SMEM_BYTES, "SMEM_BYTES: the stages and the tail");

// The copying warp: page p's tokens (this CTA's heads) into stage p % STAGES, completing on its
// mbarrier.
__device__ __forceinline__ void fetch(int p, const u16* k_cache, const u16* v_cache, int head0, u16* stages,
                                      Tail& tail, int lane) {
  u64* bar = &tail.full[p % STAGES];
  if (lane == 0) mbar_expect_tx(bar, STAGE_BYTES);
  __syncwarp();
  if (lane < PS) {
    const size_t src = ((size_t)tail.page[p] * PS + lane) * TOKEN + (size_t)head0 * HD;
    u16* dst = stages + (size_t)(p % STAGES) * STAGE + lane * ROW;
    bulk_load(dst, k_cache + src, HC * HD * 2, bar);
    bulk_load(dst + PS * ROW, v_cache + src, HC * HD * 2, bar);
  }
}

// Every thread: the stages' mbarriers initialised and the row's page table in shared memory.
__device__ __forceinline__ void load_page_table(const i64* table, int pages, Tail& tail) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(&tail.full[s], 1), mbar_init(&tail.empty[s], HC);
    mbar_init_fence();
  }
  for (int p = threadIdx.x; p < pages; p += THREADS) tail.page[p] = (int)table[p];
  __syncthreads();
}

// The copying warp: the first STAGES pages before the wait, then each stage as soon as every head's
// warp has emptied it.
__device__ __forceinline__ void copy_pages(int pages, const u16* k_cache, const u16* v_cache, int head0, u16* stages,
                                           Tail& tail, int lane) {
  for (int p = 0; p < pages; ++p) {
    if (p == STAGES) pdl_wait();
    if (p >= STAGES) mbar_wait(&tail.empty[p % STAGES], (p / STAGES - 1) & 1);
    fetch(p, k_cache, v_cache, head0, stages, tail, lane);
  }
}

// After the wait, a head's warp: the rows' new keys and values of its kv head to the cache, and its
// query heads QK-normed and RoPEd, in registers and in shared memory (for the fragments).
__device__ __forceinline__ void new_tokens(const u16* qkv, int row0, int kvh, int warp, int lane, uint2 k_weights,
                                           uint2 q_weights, const float (&cs)[NEW][4], const float (&sn)[NEW][4],
                                           const size_t (&cell)[NEW], float eps, u16* k_cache, u16* v_cache,
                                           Tail& tail, uint2 (&k_new)[NEW], uint2 (&v_new)[NEW], uint2 (&q)[NQ]) {
  auto head = [&](int j, int h) {
    return *reinterpret_cast<const uint2*>(qkv + (size_t)(row0 + j) * QKV + h * HD + 4 * lane);
  };
  for (int j = 0; j < NEW; ++j) {
    k_new[j] = norm_rope(head(j, HQ + kvh), k_weights, cs[j], sn[j], lane, eps), v_new[j] = head(j, HQ + HKV + kvh);
    *reinterpret_cast<uint2*>(k_cache + cell[j]) = k_new[j];
    *reinterpret_cast<uint2*>(v_cache + cell[j]) = v_new[j];
    for (int h = 0; h < G; ++h) {
      q[j * G + h] = norm_rope(head(j, kvh * G + h), q_weights, cs[j], sn[j], lane, eps);
      *reinterpret_cast<uint2*>(&tail.q[warp][j * G + h][4 * lane]) = q[j * G + h];
    }
  }
  __syncwarp();
}

// B = Q^T for the scores' mma: lane (g, c) holds column g's k = 16j + 2c, +1 and + 8, + 9.
__device__ __forceinline__ void query_fragments(const Tail& tail, int warp, int g, int c, u32 (&qb)[HD / 16][2]) {
  if (g < NQ)
    for (int j = 0; j < HD / 16; ++j) {
      qb[j][0] = *reinterpret_cast<const u32*>(&tail.q[warp][g][16 * j + 2 * c]);
      qb[j][1] = *reinterpret_cast<const u32*>(&tail.q[warp][g][16 * j + 2 * c + 8]);
    }
}

// One page's scores S^T = K . Q^T: tokens g, g + 8 of heads 2c, 2c + 1 (two chains of mmas).
__device__ __forceinline__ void page_scores(const u16* keys, const u32 (&qb)[HD / 16][2], int g, int c,
                                            float (&sc)[4]) {
  float odd_j[4] = {};
  for (int j = 0; j < HD / 16; ++j) {
    const u16* k0 = keys + g * ROW + 16 * j + 2 * c;
    const u32 a[4] = {*reinterpret_cast<const u32*>(k0), *reinterpret_cast<const u32*>(k0 + 8 * ROW),
                      *reinterpret_cast<const u32*>(k0 + 8), *reinterpret_cast<const u32*>(k0 + 8 * ROW + 8)};
    mma_16816(j % 2 ? odd_j : sc, a, qb[j]);
  }
  for (int i = 0; i < 4; ++i) sc[i] += odd_j[i];
}

// The online softmax over one page's `valid` tokens: lane (g, c)'s heads 2c, 2c + 1 get their new
// running max and sum, the sums so far rescaled, and `pr` the page's probabilities (S^T's layout).
__device__ __forceinline__ void page_softmax(const float (&sc)[4], int valid, int g, float scale,
                                             float (&run_max)[2], float (&run_sum)[2], float (&acc)[HD / 16][4],
                                             float (&pr)[4]) {
  const float NEG_INF = __uint_as_float(0xff800000u);
  for (int h = 0; h < 2; ++h) {
    const float s0 = g < valid ? sc[h] * scale : NEG_INF, s1 = g + 8 < valid ? sc[2 + h] * scale : NEG_INF;
    float top = fmaxf(s0, s1);  // over the page's tokens: the lanes of one c
    for (int o = 4; o < 32; o <<= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
    const float now = fmaxf(run_max[h], top);
    const float alpha = expf(run_max[h] - now);
    pr[h] = expf(s0 - now), pr[2 + h] = expf(s1 - now);
    float sum = pr[h] + pr[2 + h];
    for (int o = 4; o < 32; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    run_sum[h] = run_sum[h] * alpha + sum;
    run_max[h] = now;
    for (int t = 0; t < HD / 16; ++t) acc[t][h] *= alpha, acc[t][2 + h] *= alpha;
  }
}

// The weighted values O^T += V^T . P^T, the probabilities rounded to bf16 for the product.
__device__ __forceinline__ void page_values(const u16* values, const float (&pr)[4], int g, int c,
                                            float (&acc)[HD / 16][4]) {
  // B = P^T: lane (g, c) needs head g's tokens 2c, 2c + 1 (b[0]) and 2c + 8, 2c + 9 (b[1]), which
  // lanes (2c, g / 2) and (2c + 1, g / 2) hold at index g % 2 (and 2 + g % 2).
  const int from = 8 * c + g / 2;
  float x[4], y[4];
  for (int i = 0; i < 4; ++i) x[i] = __shfl_sync(0xffffffffu, pr[i], from), y[i] = __shfl_sync(0xffffffffu, pr[i], from + 4);
  const bool odd = g % 2;  // selects, not an index: the arrays stay in registers
  const u32 pb[2] = {g < NQ ? pack2(odd ? x[1] : x[0], odd ? y[1] : y[0]) : 0u,
                     g < NQ ? pack2(odd ? x[3] : x[2], odd ? y[3] : y[2]) : 0u};
  for (int t = 0; t < HD / 16; ++t) {  // A = V^T: d = 16t + g (+ 8) at tokens 2c, 2c + 1 (+ 8)
    const u16* v0 = values + 2 * c * ROW + 16 * t + g;
    auto pair = [&](const u16* v) { return (u32)v[0] | (u32)v[ROW] << 16; };
    const u32 a[4] = {pair(v0), pair(v0 + 8), pair(v0 + 8 * ROW), pair(v0 + 8 * ROW + 8)};
    mma_16816(acc[t], a, pb);
  }
}

// A head's warp over the cached pages as they land, each stage handed back once read. Lane (g, c)'s
// heads are 2c and 2c + 1 (D's columns): their running max and sum; acc is O^T, tile t holding
// d = 16t + g (+ 8) of heads 2c, 2c + 1.
__device__ __forceinline__ void attend_pages(int pages, int cached, u16* stages, Tail& tail, int warp, int lane,
                                             const u32 (&qb)[HD / 16][2], float scale, float (&run_max)[2],
                                             float (&run_sum)[2], float (&acc)[HD / 16][4]) {
  const int g = lane / 4, c = lane % 4;
  for (int p = 0; p < pages; ++p) {
    u16* keys = stages + (size_t)(p % STAGES) * STAGE + warp * HD;  // token t at keys + t * ROW
    u16* values = keys + PS * ROW;
    mbar_wait(&tail.full[p % STAGES], (p / STAGES) & 1);
    const int valid = imin(cached - p * PS, PS);
    if (valid < PS) {  // the last page: values past the context are zeros (0 x a stale NaN is NaN)
      const uint2 zero = {0u, 0u};
      for (int t = valid; t < PS; ++t) *reinterpret_cast<uint2*>(values + t * ROW + 4 * lane) = zero;
      __syncwarp();
    }
    float sc[4] = {}, pr[4];
    page_scores(keys, qb, g, c, sc);
    page_softmax(sc, valid, g, scale, run_max, run_sum, acc, pr);
    page_values(values, pr, g, c, acc);
    __syncwarp();  // the warp is done with this stage: once every head's is, it takes page p + STAGES
    if (lane == 0) mbar_arrive(&tail.empty[p % STAGES]);
  }
}

// The pages' sums to shared memory, 4 elements a lane again, with each head's running max and sum.
__device__ __forceinline__ void store_sums(const float (&acc)[HD / 16][4], const float (&run_max)[2],
                                           const float (&run_sum)[2], Tail& tail, int warp, int g, int c) {
  for (int h = 0; h < 2; ++h) {
    const int n = 2 * c + h;
    if (n >= NQ) continue;
    for (int t = 0; t < HD / 16; ++t) tail.o[warp][n][16 * t + g] = acc[t][h], tail.o[warp][n][16 * t + g + 8] = acc[t][2 + h];
    if (g == 0) tail.m[warp][n] = run_max[h], tail.l[warp][n] = run_sum[h];
  }
  __syncwarp();
}

// Row j's query head h: the pages' sums, then one more softmax step for each of new tokens 0..j (as
// the Triton kernel's _attend_one), and the output row.
__device__ __forceinline__ void attend_new_and_store(const Tail& tail, const uint2 (&q)[NQ], const uint2 (&k_new)[NEW],
                                                     const uint2 (&v_new)[NEW], int row0, int kvh, int warp, int lane,
                                                     float scale, u16* out) {
  float kf[NEW][4], vf[NEW][4];
  for (int j = 0; j < NEW; ++j) unpack4(k_new[j], kf[j]), unpack4(v_new[j], vf[j]);
  for (int n = 0; n < NQ; ++n) {
    const int j = n / G, h = n % G;
    float qf[4];
    unpack4(q[n], qf);
    float before = tail.m[warp][n], sum = tail.l[warp][n], acc_o[4];
    for (int i = 0; i < 4; ++i) acc_o[i] = tail.o[warp][n][4 * lane + i];
    for (int t = 0; t <= j; ++t) {
      float s = qf[0] * kf[t][0] + qf[1] * kf[t][1] + qf[2] * kf[t][2] + qf[3] * kf[t][3];
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      s *= scale;
      const float now = fmaxf(before, s);
      const float alpha = expf(before - now), p = expf(s - now), pv = round_bf16(p);
      sum = sum * alpha + p;
      for (int i = 0; i < 4; ++i) acc_o[i] = acc_o[i] * alpha + pv * vf[t][i];
      before = now;
    }
    float o[4];
    for (int i = 0; i < 4; ++i) o[i] = acc_o[i] / sum;
    *reinterpret_cast<uint2*>(out + (size_t)(row0 + j) * HQ * HD + (size_t)(kvh * G + h) * HD + 4 * lane) = pack4(o);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS)
    decode_attention_kernel(const u16* qkv, const u16* q_norm, const u16* k_norm, const u16* cos, const u16* sin,
                            const i64* position, const i64* slot, const i64* context, const i64* block_table,
                            int table_stride, u16* k_cache, u16* v_cache, u16* out, float scale,
                            float eps) {
  DYNAMIC_SHARED(smem);
  u16* stages = reinterpret_cast<u16*>(smem);
  Tail& tail = *reinterpret_cast<Tail*>(stages + (size_t)STAGES * STAGE);
  const int row0 = blockIdx.x / (HKV / HC) * NEW, head0 = blockIdx.x % (HKV / HC) * HC;  // its sequence's rows
  const int last = row0 + NEW - 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int ctx = (int)context[last];
  const int cached = ctx > NEW ? ctx - NEW : 0;  // the new tokens, at ctx - NEW .. ctx - 1, come from qkv
  const int pages = (cached + PS - 1) / PS;
  const i64* table = block_table + (size_t)last * table_stride;
  if (TRIGGER_FIRST) pdl_trigger();
  load_page_table(table, pages, tail);
  if (warp == PRODUCER) {
    copy_pages(pages, k_cache, v_cache, head0, stages, tail, lane);
    return;  // no trigger here: the heads' warps let the next kernel in once they have waited
  }
  // Before the wait, what no kernel of the chain writes (the row's position and slot, the RoPE tables,
  // the norm weights: see above), so that after it only qkv's loads are on the chain (not the
  // position's load and then the tables', two round trips).
  const int kvh = head0 + warp;  // its kv head
  float cs[NEW][4], sn[NEW][4];
  size_t cell[NEW];
  for (int j = 0; j < NEW; ++j) {
    rope_at(cos, sin, position[row0 + j], lane, cs[j], sn[j]);
    cell[j] = (size_t)slot[row0 + j] * TOKEN + (size_t)kvh * HD + 4 * lane;
  }
  const uint2 k_weights = norm_weights(k_norm, lane), q_weights = norm_weights(q_norm, lane);
  pdl_wait();
  if (!TRIGGER_FIRST) pdl_trigger();

  uint2 k_new[NEW], v_new[NEW], q[NQ];
  new_tokens(qkv, row0, kvh, warp, lane, k_weights, q_weights, cs, sn, cell, eps, k_cache, v_cache, tail, k_new, v_new,
             q);
  u32 qb[HD / 16][2] = {};
  query_fragments(tail, warp, g, c, qb);
  const float NEG_INF = __uint_as_float(0xff800000u);
  float run_max[2] = {NEG_INF, NEG_INF}, run_sum[2] = {0.f, 0.f};
  float acc[HD / 16][4] = {};
  attend_pages(pages, cached, stages, tail, warp, lane, qb, scale, run_max, run_sum, acc);
  store_sums(acc, run_max, run_sum, tail, warp, g, c);
  attend_new_and_store(tail, q, k_new, v_new, row0, kvh, warp, lane, scale, out);
}
