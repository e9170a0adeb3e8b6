"""The streaming codec's fused kernels: RoPE on its transformer's q and k, and SnakeBeta with the adds around it."""
