"""Attention of decode and prefill rows over the paged KV cache: QK-norm, RoPE and the cache write,
then paged attention, or the two as one decode kernel (Triton, or CUDA for short contexts)."""
