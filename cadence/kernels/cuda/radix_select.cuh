// One pass of a radix select's bin search, shared by the samplers' top-k (sampler.cu, and the
// persistent code predictor's sampling.cuh): `count` holds 256 bins of key counts for the pass's
// digit. One warp (lane 0-31 calling) reads them from the top (lane l: bins 255 - 8l down to
// 248 - 8l), scans its lanes' sums, and the lane where the count from the top reaches k writes the
// bin to choice[0] and the k left within it to choice[1]. The caller's barriers order the counts
// before and the choice after.
#pragma once

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
