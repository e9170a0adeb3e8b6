"""RMSNorm with the residual add before it, alone or adding a split-K GEMM's partials (the o and
down projections' norms), and the L2 prefetch of the next layer's cached keys and values that the
norm kernel issues before its wait."""
