"""Sampling a token per logits row: the batched logits processing and counter-based noise (the
PyTorch definition), and its Triton and CUDA kernels."""
