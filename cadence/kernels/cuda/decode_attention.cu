// Decode attention for many rows (kernels/cuda_attention.py, perf-notes #104; by default the code
// predictor's steps at 64 rows, whose one or two pages a row arrive before the wait): each
// row is its stream's new token, and one CTA takes a row and HC of its kv heads (a warp a kv head
// and its G query heads, and one more warp that copies the pages). What the Triton kernel
// (triton_attention.qk_norm_rope_attention) does, with the cached keys and values streamed by the
// copy engine:
// - Before the PDL wait, the first SLOTS / 2 pages of the row's cached tokens are on their way into
//   shared memory (cp.async.bulk, a token's HC heads of keys, then of values, a copy each). The
//   row's context length, page table, position and slot are written before the walk's layers start
//   (the frame graph, or constants of the code predictor's index), never by a kernel of the chain.
//   The cached cells were written by this layer's attention at earlier steps: where kernels wait
//   first, two or more kernels back, so complete; where they trigger first (the b64 graphs) at
//   least ~30 kernels back (a decode step of the code predictor's 5 layers, its head and sampler),
//   and for this kernel to start before that one ends every kernel between would have to hold its
//   CTAs on the SMs at once beside this one's ~139 KB a CTA: a few can, 30 cannot.
// - After it: the row's q, k and v from qkv, QK-norm and RoPE (head_rope.cuh), the new key and value
//   to the cache slot; then the pages in turn as they land. The copies are the last warp's whole job
//   (#106): it reissues a slot SLOTS entries ahead as soon as every head's warp has arrived on the
//   slot's "empty" mbarrier, so no head's warp waits on a CTA barrier or on the copy engine's
//   queue between two pages. (With warp 0 issuing them after a CTA barrier, the copies' and the
//   arithmetic's times added up, #105: 1.08 + 0.67 = 1.76 ms for the talker's b64 layers; now 1.18.)
// - Per page and warp, scores S^T (16 tokens x the G heads) = K . Q^T and the weighted values
//   O^T += V^T . P^T on the tensor cores (m16n8k16, bf16 in, fp32 sums; the G <= 8 heads are B's 8
//   columns), online softmax in fp32 with the probabilities rounded to bf16 for the second product
//   (as the Triton kernel does); lane (g, c) holds heads 2c, 2c + 1 of D, so each lane keeps its
//   own heads' running max and sum. The new token is one more softmax step from registers at the
//   end, as the Triton kernel's _attend_one.
// Token rows in shared memory are padded by 16 bytes, so the fragments' 32-bit loads (8 tokens at
// one offset) fall in different banks. The ring's SLOTS slots each hold a page's keys or its values
// (entry 2i is page i's keys, 2i + 1 its values), so an odd count holds half pages in flight: with 8
// heads a CTA a page's keys are 32 KB, and 3 slots keep a CTA under ~115 KB.
//
// SPLITS > 1 (#117, the talker's long contexts): SPLITS CTAs share a row's kv heads, each taking
// its share of the pages. Each writes its heads' running max, sum and output (fp32) to `part_ml`
// and `part_o`, then takes a ticket from the row's counter in `tickets`; the last to arrive merges
// the splits in split order (so the result does not depend on which CTA is last), adds the new
// token and writes the output, and sets the counter back to 0 for the next launch. Split 0 writes
// the new key and value to the cache.
//
// WPH > 1 (an experiment for the talker's long contexts, #109): WPH warps a kv head, warp `sub`
// of a head taking pages sub, sub + WPH, ...; each keeps its own running max, sum and output, and
// after the pages the head's first warp merges them (as a context split is merged) before the new
// token.
//
// Macros: HQ, HKV (query and kv heads), HD (128), PS (page size, 16), HC (kv heads a CTA), WPH
// (warps a kv head, default 1), SPLITS (CTAs a row's kv heads, default 1), SLOTS (a page's keys or
// values in flight a CTA, at least 2), TRIGGER_FIRST (1: let the next kernel launch before the
// wait), MAX_PAGES (the longest page table it takes), SMEM_BYTES (the dynamic shared memory it is
// launched with), STAMP (1: thread 0 writes its CTA's clock stamps to row stamp_row + CTA of
// `stamps`, prelude.cuh's write_stamps: its start, the page table loaded, the wait's return, warp
// 0's pages done, warp 0's end; the heads' warps go through the same pages alike).

#include "prelude.cuh"    // types, bf16 rounding, PDL, bulk copies, mma.sync, clock stamps
#include "head_rope.cuh"  // norm_rope, rope_at, unpack4, pack4

#ifndef WPH
#define WPH 1
#endif
#ifndef SPLITS
#define SPLITS 1
#endif
constexpr int G = HQ / HKV;                 // query heads a kv head
constexpr int HEAD_WARPS = HC * WPH;        // warp w takes kv head w % HC, pages w / HC, + WPH, ...
constexpr int THREADS = 32 * (HEAD_WARPS + 1);  // the heads' warps, then the copying warp
constexpr int PRODUCER = HEAD_WARPS;        // the copying warp
constexpr int QKV = (HQ + 2 * HKV) * HD;    // a qkv row
constexpr int TOKEN = HKV * HD;             // a token's keys (or values) in the cache, elements
constexpr int ROW = HC * HD + 8;            // a token's HC heads in shared memory, padded 16 bytes
constexpr int GROUPS = HKV / HC;            // CTAs a row's kv heads take (times SPLITS)
constexpr int SLOT = PS * ROW;              // a page's keys, or its values
constexpr u32 SLOT_BYTES = PS * HC * HD * 2;
#ifndef ABLATE  // a look (benchmarks/cuda_attention_parts.py): 1 leaves out the pages' arithmetic, 2 their copies
#define ABLATE 0
#endif
static_assert(PS == 16 && G >= 1 && G <= 8 && HQ % HKV == 0 && HKV % HC == 0, "the kernel's fragment layout");
static_assert(SLOTS >= 2 && (SPLITS == 1 || WPH == 1), "two slots at least; a context split or warps a head");

// Shared memory after the slots: their mbarriers, each warp's queries (bf16) and, after the
// pages, its sums (fp32) with each head's running max and sum.
struct Tail {
  u64 full[SLOTS];   // a slot's keys or values have landed (the copying warp's expected bytes)
  u64 empty[SLOTS];  // every head's warp is done with the slot (HC arrivals)
  int page[MAX_PAGES];  // the row's page table, read once (a global load a page cost ~1 us each, #104)
  u16 q[HEAD_WARPS][G][HD];
  float o[HEAD_WARPS][G][HD];
  float m[HEAD_WARPS][G], l[HEAD_WARPS][G];
  int last;  // SPLITS > 1: this CTA took the row's last ticket, so it merges
};
static_assert((size_t)SLOTS * SLOT * 2 + sizeof(Tail) <= SMEM_BYTES, "SMEM_BYTES: the slots and the tail");

// The heads' warps only (the copying warp may have left): before a head's first warp merges its
// other warps' sums (WPH > 1).
#ifdef CADENCE_EMULATE
__device__ __forceinline__ void heads_sync() { consumers_sync(); }
#else
__device__ __forceinline__ void heads_sync() { asm volatile("bar.sync 1, %0;" ::"r"(32 * HEAD_WARPS) : "memory"); }
#endif

// The copying warp: entry e of the ring (local page e / 2's keys, or its values where e is odd; this
// CTA's heads of each token) into slot e % SLOTS, completing on its mbarrier.
__device__ __forceinline__ void fetch(int e, const u16* k_cache, const u16* v_cache, int head0, u16* slots,
                                      Tail& tail, int lane) {
  u64* bar = &tail.full[e % SLOTS];
  if (ABLATE == 2) return;
  if (lane == 0) mbar_expect_tx(bar, SLOT_BYTES);
  __syncwarp();
  if (lane < PS) {
    const size_t src = ((size_t)tail.page[e / 2] * PS + lane) * TOKEN + (size_t)head0 * HD;
    bulk_load(slots + (size_t)(e % SLOTS) * SLOT + lane * ROW, (e % 2 ? v_cache : k_cache) + src, HC * HD * 2, bar);
  }
}

// Entry e's slot is free once every head's warp has arrived (after its last read of the slot).
__device__ __forceinline__ void release(Tail& tail, int e, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(&tail.empty[e % SLOTS]);
}

// One more set of sums (`theirs`: max, sum, a lane's 4 outputs) into a head's running ones, as a
// context split is merged.
__device__ __forceinline__ void merge_sums(float& before, float& sum, float (&acc)[4], float their_max,
                                           float their_sum, const float (&theirs)[4]) {
  const float top = fmaxf(before, their_max);
  if (top == __uint_as_float(0xff800000u)) return;  // neither has a token yet
  const float a = expf(before - top), b = expf(their_max - top);
  sum = sum * a + their_sum * b;
  for (int i = 0; i < 4; ++i) acc[i] = acc[i] * a + theirs[i] * b;
  before = top;
}

extern "C" __global__ void __launch_bounds__(THREADS)
    decode_attention_kernel(const u16* qkv, const u16* q_norm, const u16* k_norm, const u16* cos, const u16* sin,
                            const i64* position, const i64* slot, const i64* context, const i64* block_table,
                            int table_stride, u16* k_cache, u16* v_cache, u16* out, float scale, float eps,
                            float* part_o, float* part_ml, int* tickets STAMP_PARAMS) {
  DYNAMIC_SHARED(smem);
  [[maybe_unused]] i64 t_start = STAMP ? (i64)global_ns() : 0, t_ahead = 0, t_waited = 0, t_pages = 0;
  u16* slots = reinterpret_cast<u16*>(smem);
  Tail& tail = *reinterpret_cast<Tail*>(slots + (size_t)SLOTS * SLOT);
  const int split = blockIdx.x % SPLITS, group = blockIdx.x / SPLITS % GROUPS, row = blockIdx.x / (SPLITS * GROUPS);
  const int head0 = group * HC;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int ctx = (int)context[row];
  const int cached = ctx > 1 ? ctx - 1 : 0;  // the new token, at ctx - 1, comes from qkv
  const int row_pages = (cached + PS - 1) / PS, per_split = (row_pages + SPLITS - 1) / SPLITS;
  const int first = imin(split * per_split, row_pages), pages = imin(row_pages - first, per_split);  // this CTA's
  const i64* table = block_table + (size_t)row * table_stride + first;
  if (TRIGGER_FIRST) pdl_trigger();
  if (threadIdx.x == 0) {
    for (int s = 0; s < SLOTS; ++s) mbar_init(&tail.full[s], 1), mbar_init(&tail.empty[s], HC);
    mbar_init_fence();
  }
  for (int p = threadIdx.x; p < pages; p += THREADS) tail.page[p] = (int)table[p];
  __syncthreads();
  if (STAMP) t_ahead = (i64)global_ns();
  if (warp == PRODUCER) {  // the first SLOTS entries before the wait, then each slot as it empties
    for (int e = 0; e < 2 * pages; ++e) {
      if (e == SLOTS) pdl_wait();
      if (e >= SLOTS && ABLATE != 2) mbar_wait(&tail.empty[e % SLOTS], (e / SLOTS - 1) & 1);
      fetch(e, k_cache, v_cache, head0, slots, tail, lane);
    }
    return;  // no trigger here: the heads' warps let the next kernel in once they have waited
  }
  pdl_wait();
  if (!TRIGGER_FIRST) pdl_trigger();
  if (STAMP) t_waited = (i64)global_ns();

  // The row's new key and value for this warp's kv head, to the cache (by the head's first warp); its
  // queries.
  const int slot_in_cta = WPH == 1 ? warp : warp % HC, sub = WPH == 1 ? 0 : warp / HC;  // its kv head, pages
  const int kvh = head0 + slot_in_cta;
  const u16* src = qkv + (size_t)row * QKV;
  auto head = [&](int h) { return *reinterpret_cast<const uint2*>(src + h * HD + 4 * lane); };
  float cs[4], sn[4];
  rope_at(cos, sin, position[row], lane, cs, sn);
  const uint2 k_new = norm_rope(head(HQ + kvh), k_norm, cs, sn, lane, eps), v_new = head(HQ + HKV + kvh);
  const size_t cell = (size_t)slot[row] * TOKEN + (size_t)kvh * HD + 4 * lane;
  if (sub == 0 && split == 0) {
    *reinterpret_cast<uint2*>(k_cache + cell) = k_new;
    *reinterpret_cast<uint2*>(v_cache + cell) = v_new;
  }
  uint2 q[G];
  for (int h = 0; h < G; ++h) {
    q[h] = norm_rope(head(kvh * G + h), q_norm, cs, sn, lane, eps);
    *reinterpret_cast<uint2*>(&tail.q[warp][h][4 * lane]) = q[h];
  }
  __syncwarp();
  u32 qb[HD / 16][2] = {};  // B = Q^T: lane (g, c) holds head g's k = 16j + 2c, +1 and + 8, + 9
  if (g < G)
    for (int j = 0; j < HD / 16; ++j) {
      qb[j][0] = *reinterpret_cast<const u32*>(&tail.q[warp][g][16 * j + 2 * c]);
      qb[j][1] = *reinterpret_cast<const u32*>(&tail.q[warp][g][16 * j + 2 * c + 8]);
    }

  // The pages. Lane (g, c)'s heads are 2c and 2c + 1 (D's columns): their running max and sum.
  const float NEG_INF = __uint_as_float(0xff800000u);
  float run_max[2] = {NEG_INF, NEG_INF}, run_sum[2] = {0.f, 0.f};
  float acc[HD / 16][4] = {};  // O^T: tile t holds d = 16t + g (+ 8) of heads 2c, 2c + 1
  for (int i = sub; i < pages; i += WPH) {
    const int ek = 2 * i, ev = ek + 1;  // the page's keys' and values' entries
    const u16* keys = slots + (size_t)(ek % SLOTS) * SLOT + slot_in_cta * HD;  // token t at keys + t * ROW
    u16* values = slots + (size_t)(ev % SLOTS) * SLOT + slot_in_cta * HD;
    if (ABLATE != 2) mbar_wait(&tail.full[ek % SLOTS], (ek / SLOTS) & 1);
    if (ABLATE == 1) {
      release(tail, ek, lane);
      mbar_wait(&tail.full[ev % SLOTS], (ev / SLOTS) & 1);
      release(tail, ev, lane);
      continue;
    }
    const int valid = imin(cached - (first + i) * PS, PS);
    float sc[4] = {}, odd_j[4] = {};  // S^T: tokens g, g + 8 of heads 2c, 2c + 1 (two chains of mmas)
    for (int j = 0; j < HD / 16; ++j) {
      const u16* k0 = keys + g * ROW + 16 * j + 2 * c;
      const u32 a[4] = {*reinterpret_cast<const u32*>(k0), *reinterpret_cast<const u32*>(k0 + 8 * ROW),
                        *reinterpret_cast<const u32*>(k0 + 8), *reinterpret_cast<const u32*>(k0 + 8 * ROW + 8)};
      mma_16816(j % 2 ? odd_j : sc, a, qb[j]);
    }
    for (int i = 0; i < 4; ++i) sc[i] += odd_j[i];
    release(tail, ek, lane);  // the keys are read; the values next
    float pr[4];  // probabilities, same layout
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
    if (ABLATE != 2) mbar_wait(&tail.full[ev % SLOTS], (ev / SLOTS) & 1);
    if (valid < PS) {  // the last page: values past the context are zeros (0 x a stale NaN is NaN)
      const uint2 zero = {0u, 0u};
      for (int t = valid; t < PS; ++t) *reinterpret_cast<uint2*>(values + t * ROW + 4 * lane) = zero;
      __syncwarp();
    }
    // B = P^T: lane (g, c) needs head g's tokens 2c, 2c + 1 (b[0]) and 2c + 8, 2c + 9 (b[1]), which
    // lanes (2c, g / 2) and (2c + 1, g / 2) hold at index g % 2 (and 2 + g % 2).
    const int from = 8 * c + g / 2;
    float x[4], y[4];
    for (int i = 0; i < 4; ++i) x[i] = __shfl_sync(0xffffffffu, pr[i], from), y[i] = __shfl_sync(0xffffffffu, pr[i], from + 4);
    const bool odd = g % 2;  // selects, not an index: the arrays stay in registers
    const u32 pb[2] = {g < G ? pack2(odd ? x[1] : x[0], odd ? y[1] : y[0]) : 0u,
                       g < G ? pack2(odd ? x[3] : x[2], odd ? y[3] : y[2]) : 0u};
    for (int t = 0; t < HD / 16; ++t) {  // A = V^T: d = 16t + g (+ 8) at tokens 2c, 2c + 1 (+ 8)
      const u16* v0 = values + 2 * c * ROW + 16 * t + g;
      auto pair = [&](const u16* v) { return (u32)v[0] | (u32)v[ROW] << 16; };
      const u32 a[4] = {pair(v0), pair(v0 + 8), pair(v0 + 8 * ROW), pair(v0 + 8 * ROW + 8)};
      mma_16816(acc[t], a, pb);
    }
    release(tail, ev, lane);
  }

  if (STAMP) t_pages = (i64)global_ns();

  // The sums, 4 elements a lane again: to shared memory, or for a split to part_o and part_ml (at
  // [row, group, split, head's slot, query head]); then the new token and the outputs.
  const auto part = [&](int s, int h) { return ((((size_t)row * GROUPS + group) * SPLITS + s) * HC + slot_in_cta) * G + h; };
  for (int h = 0; h < 2; ++h) {
    const int n = 2 * c + h;
    if (n >= G) continue;
    float* o = SPLITS > 1 ? part_o + part(split, n) * HD : tail.o[warp][n];
    for (int t = 0; t < HD / 16; ++t) o[16 * t + g] = acc[t][h], o[16 * t + g + 8] = acc[t][2 + h];
    if (g == 0 && SPLITS > 1) part_ml[2 * part(split, n)] = run_max[h], part_ml[2 * part(split, n) + 1] = run_sum[h];
    if (g == 0 && SPLITS == 1) tail.m[warp][n] = run_max[h], tail.l[warp][n] = run_sum[h];
  }
  __syncwarp();
  if (WPH > 1) {
    heads_sync();  // every warp's sums are in shared memory
    if (sub != 0) return;
  }
  if (SPLITS > 1) {  // the row's ticket: the last of its SPLITS CTAs goes on
    heads_sync();  // every warp's sums written
    if (threadIdx.x == 0) {
      __threadfence();  // this CTA's sums visible before its ticket (as a grid barrier's arrival)
      tail.last = atomicAdd(&tickets[row * GROUPS + group], 1) == SPLITS - 1;
      if (tail.last) tickets[row * GROUPS + group] = 0, __threadfence();  // for the next launch; the others' sums
    }
    heads_sync();
  }
  float kf[4], vf[4];
  unpack4(k_new, kf);
  unpack4(v_new, vf);
  for (int h = 0; h < G && (SPLITS == 1 || tail.last); ++h) {
    float qf[4];
    unpack4(q[h], qf);
    float s = qf[0] * kf[0] + qf[1] * kf[1] + qf[2] * kf[2] + qf[3] * kf[3];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    s *= scale;
    float before = NEG_INF, sum = 0.f, acc_o[4] = {};
    if (SPLITS > 1) {
      for (int from = 0; from < SPLITS; ++from) {  // in split order, whichever CTA is last
        const size_t at = part(from, h);
        const float4 o4 = ld_cg_f32x4(part_o + at * HD + 4 * lane);
        const float theirs[4] = {o4.x, o4.y, o4.z, o4.w};
        merge_sums(before, sum, acc_o, ld_cg_f32(part_ml + 2 * at), ld_cg_f32(part_ml + 2 * at + 1), theirs);
      }
    } else {
      for (int w = 0; w < WPH; ++w) {  // the head's warps' pages (WPH > 1), merged as a context split is
        const int other = slot_in_cta + w * HC;
        const float theirs[4] = {tail.o[other][h][4 * lane], tail.o[other][h][4 * lane + 1],
                                 tail.o[other][h][4 * lane + 2], tail.o[other][h][4 * lane + 3]};
        merge_sums(before, sum, acc_o, tail.m[other][h], tail.l[other][h], theirs);
      }
    }
    const float now = fmaxf(before, s);
    const float alpha = expf(before - now), p = expf(s - now);
    const float total = sum * alpha + p, pv = round_bf16(p);
    float o[4];
    for (int i = 0; i < 4; ++i) o[i] = (acc_o[i] * alpha + pv * vf[i]) / total;
    *reinterpret_cast<uint2*>(out + (size_t)row * HQ * HD + (size_t)(kvh * G + h) * HD + 4 * lane) = pack4(o);
  }
#if STAMP
  if (threadIdx.x == 0) write_stamps(stamps, stamp_row + blockIdx.x, t_start, t_ahead, t_waited, t_pages);
#endif
}
