"""Sampling a token per logits row: the batched logits processing and counter-based noise (the
PyTorch definition, reference.py), its Triton and CUDA kernels, and the call's argument types
(spec.py, re-exported here)."""

from .spec import CodeHistory, EosRule, RowParams, TokenOutputs, TokenSampling

__all__ = ["CodeHistory", "EosRule", "RowParams", "TokenOutputs", "TokenSampling"]
