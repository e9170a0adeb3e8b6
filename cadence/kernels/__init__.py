"""The fused operations of the fast decode step and the streaming codec: Triton and CUDA kernels on
GPUs, their PyTorch definitions elsewhere, organised by operation (linear/, attention/, norm/,
sampling/, embedding/, codec/), each with its reference definition, its kernels and, where more than
one kernel serves it, its dispatch. ops.py is the interface the model calls (`load_ops`, `ops_for`);
launch/ and cuda_common/ hold what every kernel shares."""
