"""The projections: x @ W^T with the weight streamed once (the streaming GEMM, Triton), copied into
shared memory before the kernel's wait (the slab GEMMs, CUDA) or by cuBLAS, and the MLP's SwiGLU."""
