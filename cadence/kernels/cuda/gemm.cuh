// The code predictor's GEMM phases (code_predictor.cu includes this after its own definitions:
// act_t, slot_t, to_f, round_act, put, warp_sum, consumers_sync, the mbarriers, the bulk copies):
// which weight rows each CTA streams into its shared-memory ring, the producer that streams them,
// a phase's input rows into shared memory (with the residual add and RMSNorm), and the dots.
#pragma once

// ---- the GEMM phases: which weight rows each CTA streams, and how ----------------------------------

enum Gemm { QKV = 0, OUT = 1, GATE_UP = 2, DOWN = 3, HEAD = 4 };

struct Weights {
  const act_t *wqkv, *wo, *wgu, *wdown, *heads;
};

struct GemmShape {
  const act_t* w;  // [n (x2: gate rows then up rows for SWIGLU), k]
  int n, k;        // outputs, inputs
  bool swiglu;
};

__device__ __forceinline__ GemmShape gemm_shape(const Weights& W, int kind, int layer, int step) {
  switch (kind) {
    case QKV: return {W.wqkv + (size_t)layer * QKV_WIDTH * HIDDEN, QKV_WIDTH, HIDDEN, false};
    case OUT: return {W.wo + (size_t)layer * HIDDEN * HEADS * HEAD_DIM, HIDDEN, HEADS * HEAD_DIM, false};
    case GATE_UP: return {W.wgu + (size_t)layer * 2 * INTER * HIDDEN, INTER, HIDDEN, true};
    case DOWN: return {W.wdown + (size_t)layer * HIDDEN * INTER, HIDDEN, INTER, false};
    default: return {W.heads + (size_t)step * VOCAB * HIDDEN, VOCAB, HIDDEN, false};
  }
}

// This CTA's outputs [first, last) of a GEMM and how many go in one ring stage.
struct Slab {
  int first, last, per_chunk;
};
__device__ __forceinline__ Slab slab_of(const GemmShape& g, int stage_bytes) {
  const int per_cta = (g.n + gridDim.x - 1) / gridDim.x;
  const int first = min((int)blockIdx.x * per_cta, g.n);
  const int row_bytes = g.k * (int)sizeof(act_t) * (g.swiglu ? 2 : 1);
  return {first, min(first + per_cta, g.n), max(1, stage_bytes / row_bytes)};
}

// The ring's producer: this CTA's rows of every GEMM of the frame, in the consumers' order.
__device__ void produce(const Weights& W, unsigned char* ring, u64* full, u64* empty, int stages, int stage_bytes) {
  int it = 0;
  for (int step = 0; step < STEPS; ++step) {
    for (int layer = 0; layer <= LAYERS; ++layer) {
      for (int kind = QKV; kind <= DOWN; ++kind) {
        if (layer == LAYERS && kind != QKV) break;  // after the layers: the head alone
        const GemmShape g = gemm_shape(W, layer == LAYERS ? HEAD : kind, layer, step);
        const Slab s = slab_of(g, stage_bytes);
        for (int o = s.first; o < s.last; o += s.per_chunk, ++it) {
          const int stage = it % stages, outs = min(s.per_chunk, s.last - o);
          mbar_wait(&empty[stage], ((it / stages) & 1) ^ 1);  // a fresh barrier passes parity 1 at once
          const u32 part = (u32)outs * g.k * sizeof(act_t);
          unsigned char* dst = ring + (size_t)stage * stage_bytes;
          mbar_expect_tx(&full[stage], g.swiglu ? 2 * part : part);
          // weights are read once a frame: evict-first, so that they do not push activations and
          // the attention cache (read again within microseconds) out of L2
          bulk_load_once(dst, g.w + (size_t)o * g.k, part, &full[stage]);
          if (g.swiglu) bulk_load_once(dst + part, g.w + (size_t)(g.n + o) * g.k, part, &full[stage]);
        }
      }
    }
  }
}

// The dot products of UNITS weight rows (w0, and w1 where UNITS is 2: SwiGLU's gate and up, or two
// output rows) with ROWS activation rows in shared memory (floats, row stride K_MAX), summed over
// the warp; acc[u][r] on every lane. Two units share each activation load and give the warp two
// independent chains of FMAs and shuffles: the dots are bound by issue and latency, not bandwidth.
template <int UNITS, int ROWS>
__device__ __forceinline__ void unit_dots(const act_t* w0, const act_t* w1, const float* xs, int k, int lane,
                                          float (&acc)[2][ROWS]) {
  constexpr int VEC = 16 / sizeof(act_t);  // weights per 16-byte load
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[0][r] = acc[1][r] = 0.f;
#pragma unroll 1  // smaller code, and faster than nvcc's own unrolling or 4 (perf-notes #51)
  for (int i = lane * VEC; i < k; i += 32 * VEC) {
    float wa[VEC], wb[VEC];
    const uint4 va = *reinterpret_cast<const uint4*>(w0 + i);
    const act_t* ha = reinterpret_cast<const act_t*>(&va);
#pragma unroll
    for (int e = 0; e < VEC; ++e) wa[e] = to_f(ha[e]);
    if (UNITS == 2) {
      const uint4 vb = *reinterpret_cast<const uint4*>(w1 + i);
      const act_t* hb = reinterpret_cast<const act_t*>(&vb);
#pragma unroll
      for (int e = 0; e < VEC; ++e) wb[e] = to_f(hb[e]);
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float* x = xs + r * K_MAX + i;
#pragma unroll
      for (int e = 0; e < VEC; e += 4) {
        const float4 xv = *reinterpret_cast<const float4*>(x + e);
        acc[0][r] += wa[e] * xv.x + wa[e + 1] * xv.y + wa[e + 2] * xv.z + wa[e + 3] * xv.w;
        if (UNITS == 2) acc[1][r] += wb[e] * xv.x + wb[e + 1] * xv.y + wb[e + 2] * xv.z + wb[e + 3] * xv.w;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    acc[0][r] = warp_sum(acc[0][r]);
    if (UNITS == 2) acc[1][r] = warp_sum(acc[1][r]);
  }
}

struct Scratch {
  float* xs;       // [MAX_ROWS, K_MAX]: the phase's input rows
  float* partial;  // [CONSUMER_WARPS, MAX_ROWS]
  float* inv;      // [MAX_ROWS]
};

constexpr int IN_FLIGHT = 4;  // packs a thread has in flight per array (load_rows)

// The loads of packs base + j * CONSUMERS (j < IN_FLIGHT, below `packs`) of rows `first + i *
// stride` of x, and of r where given, all issued before any is used.
__device__ __forceinline__ void issue_packs(const slot_t* x, const slot_t* r, Pack (&xp)[IN_FLIGHT],
                                            Pack (&rp)[IN_FLIGHT], int base, int packs, int per_row, int first,
                                            int stride, int k) {
#pragma unroll
  for (int j = 0; j < IN_FLIGHT; ++j) {
    const int p = base + j * CONSUMERS;
    if (p < packs) {
      const size_t at = (size_t)(first + p / per_row * stride) * k + p % per_row * PACK;
      xp[j] = load_pack(x + at);
      if (r) rp[j] = load_pack(r + at);
    }
  }
}

// The activation rows of a GEMM into shared memory: rows `first + i * stride` of x (+ r, rounded as
// the unfused add is; each written by the phase tagged x_tag / r_tag), their residual sum stored
// (tagged `tag`) where `sum_out`, RMS-normalised with weight `norm_w` where given (rounded as the
// rms_norm kernel does). Every CTA computes the whole sum; CTA 0 stores it, in 16-byte stores
// (shared over all CTAs it was 0.04 ms a frame slower: every CTA's barrier release then waits for
// stores of its own, perf-notes #51). All rows at once in 16-byte packs, IN_FLIGHT of them per thread and
// array issued before the first is used: one L2 round trip for a phase's rows, not one per row.
__device__ __noinline__ void load_rows(const Scratch& s, const slot_t* x, u32 x_tag, const slot_t* r, u32 r_tag,
                                       slot_t* sum_out, u32 tag, const act_t* norm_w, int rows, int first, int stride,
                                       int k, float eps, u64* mark) {  // the trace's stamp: rows in, or null
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int per_row = k / PACK, packs = rows * per_row;
  // The norm's weights for this thread's columns (tid + j * CONSUMERS): loaded first, so that
  // their round trip overlaps the rows' (the norms are all over HIDDEN columns).
  constexpr int NORM_COLUMNS = (HIDDEN + CONSUMERS - 1) / CONSUMERS;
  float nw[NORM_COLUMNS];
  if (norm_w)
#pragma unroll
    for (int j = 0; j < NORM_COLUMNS; ++j) nw[j] = tid + j * CONSUMERS < k ? to_f(norm_w[tid + j * CONSUMERS]) : 0.f;
  for (int base = tid; base < packs; base += IN_FLIGHT * CONSUMERS) {
    Pack xp[IN_FLIGHT], rp[IN_FLIGHT];
    issue_packs(x, r, xp, rp, base, packs, per_row, first, stride, k);
#pragma unroll
    for (int j = 0; j < IN_FLIGHT; ++j) {
      const int p = base + j * CONSUMERS;
      if (p < packs) {
        const int i = p / per_row, c = p % per_row * PACK;
        const size_t at = (size_t)(first + i * stride) * k + c;
        float v[PACK];
        wait_pack(x + at, xp[j], x_tag, v);
        if (r) {
          float w[PACK];
          wait_pack(r + at, rp[j], r_tag, w);
#pragma unroll
          for (int e = 0; e < PACK; ++e) v[e] = round_act(v[e] + w[e]);
        }
        if (sum_out && blockIdx.x == 0) store_pack(sum_out + at, v, tag);
        float2* dst = reinterpret_cast<float2*>(s.xs + i * K_MAX + c);  // PACK is even (2, 4 or 8)
#pragma unroll
        for (int e = 0; e < PACK; e += 2) dst[e / 2] = make_float2(v[e], v[e + 1]);
      }
    }
  }
  consumers_sync();
  if (mark) *mark = sm_clock();
  if (!norm_w) return;
  for (int i = 0; i < rows; ++i) {  // each row's sum of squares: every thread a part of it
    float sq = 0.f;
    for (int c = tid; c < k; c += CONSUMERS) sq += s.xs[i * K_MAX + c] * s.xs[i * K_MAX + c];
    sq = warp_sum(sq);
    if (lane == 0) s.partial[warp * MAX_ROWS + i] = sq;
  }
  consumers_sync();
  if (tid < rows) {  // each row's inverse RMS
    float total = 0.f;
    for (int w = 0; w < CONSUMER_WARPS; ++w) total += s.partial[w * MAX_ROWS + tid];
    s.inv[tid] = 1.f / sqrtf(total / k + eps);
  }
  consumers_sync();
#pragma unroll
  for (int j = 0; j < NORM_COLUMNS; ++j) {
    const int c = tid + j * CONSUMERS;
    if (c < k)
      for (int i = 0; i < rows; ++i) {
        const float normed = round_act(s.xs[i * K_MAX + c] * s.inv[i]);
        s.xs[i * K_MAX + c] = round_act(nw[j] * normed);
      }
  }
  consumers_sync();
}

// Whether this CTA has outputs in a GEMM (one without reads nothing: see "activations").
__device__ __forceinline__ bool owns(const GemmShape& g, int stage_bytes) {
  const Slab sl = slab_of(g, stage_bytes);
  return sl.first < sl.last;
}

// One GEMM phase's dots for this CTA: out[i, n] for its ROWS rows and its outputs (tagged `tag`),
// the weights from the ring. `mark` (the trace's, or null): the clock once the first chunk is in.
template <int ROWS>
__device__ __noinline__ void gemm_rows(const GemmShape& g, const Scratch& s, slot_t* out, u32 tag, unsigned char* ring,
                                       u64* full, u64* empty, int stages, int stage_bytes, int& it, u64* mark) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Slab sl = slab_of(g, stage_bytes);
  for (int o = sl.first; o < sl.last; o += sl.per_chunk, ++it) {
    const int stage = it % stages, outs = min(sl.per_chunk, sl.last - o);
    const act_t* chunk = reinterpret_cast<const act_t*>(ring + (size_t)stage * stage_bytes);
    mbar_wait(&full[stage], (it / stages) & 1);
    if (mark && o == sl.first) *mark = sm_clock();
    for (int u = warp; u < outs; u += CONSUMER_WARPS) {
      float acc[2][ROWS];
      // two output rows at once where the chunk has a second for this warp (qkv's and the heads'
      // chunks hold 16 rows: two a warp; -0.06 ms a frame at batch 1, -0.21 at 4, perf-notes #51)
      const int pair = !g.swiglu && u + CONSUMER_WARPS < outs ? u + CONSUMER_WARPS : -1;
      if (g.swiglu || pair >= 0) {
        const act_t* second = chunk + (size_t)(g.swiglu ? outs + u : pair) * g.k;
        unit_dots<2, ROWS>(chunk + (size_t)u * g.k, second, s.xs, g.k, lane, acc);
        if (lane == 0)
#pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            if (g.swiglu) {  // rounded where linear_swiglu rounds: gate, up, silu
              const float gate = round_act(acc[0][r]), up = round_act(acc[1][r]);
              const float silu = round_act(gate / (1.f + __expf(-gate)));
              put(out + (size_t)r * g.n + o + u, silu * up, tag);
            } else {
              put(out + (size_t)r * g.n + o + u, acc[0][r], tag);
              put(out + (size_t)r * g.n + o + pair, acc[1][r], tag);
            }
          }
        if (pair >= 0) u += CONSUMER_WARPS;
      } else {
        unit_dots<1, ROWS>(chunk + (size_t)u * g.k, nullptr, s.xs, g.k, lane, acc);
        if (lane == 0)
#pragma unroll
          for (int r = 0; r < ROWS; ++r) put(out + (size_t)r * g.n + o + u, acc[0][r], tag);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[stage]);
  }
}

// gemm_rows for a run-time row count (1..MAX_ROWS): an instance per count, so that every loop over
// the rows is exact. A loop to MAX_ROWS under `r < rows` issued every row's instructions, predicated
// off, and the dots are bound by instruction issue (perf-notes #48).
template <int ROWS = MAX_ROWS>
__device__ void gemm(const GemmShape& g, const Scratch& s, slot_t* out, u32 tag, int rows, unsigned char* ring,
                     u64* full, u64* empty, int stages, int stage_bytes, int& it, u64* mark) {
  if constexpr (ROWS > 1) {
    if (rows < ROWS) return gemm<ROWS - 1>(g, s, out, tag, rows, ring, full, empty, stages, stage_bytes, it, mark);
  }
  gemm_rows<ROWS>(g, s, out, tag, ring, full, empty, stages, stage_bytes, it, mark);
}
