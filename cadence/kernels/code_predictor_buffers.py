"""What a persistent code-predictor kernel works on (triton_code_predictor.py, cuda_code_predictor.py).

The layers' weights stacked one tensor per kind (indexed by layer), the 15 heads and the 14 input
tables, and the activation buffers for up to `max_streams` streams (a CUDA graph captures their
addresses). No Triton here: the CUDA kernel's class builds on it where Triton is absent.
"""

from __future__ import annotations

import torch


class CodePredictorBuffers:
    def __init__(self, stack, heads: list[torch.Tensor], embeddings: list[torch.Tensor], max_streams: int,
                 k_cache: torch.Tensor, v_cache: torch.Tensor, programs: int | None = None):  # fmt: skip
        layers = stack.layers
        self.stack = stack
        self.ln1 = torch.stack([L.ln1 for L in layers])
        self.wqkv = torch.stack([L.wqkv for L in layers])
        self.q_norm = torch.stack([L.q_norm for L in layers])
        self.k_norm = torch.stack([L.k_norm for L in layers])
        self.wo = torch.stack([L.wo for L in layers])
        self.ln2 = torch.stack([L.ln2 for L in layers])
        self.wgu = torch.stack([L.wgu for L in layers])
        self.wdown = torch.stack([L.wdown for L in layers])
        self.heads = torch.stack(heads)
        self.embeddings = torch.stack(embeddings)
        self.k_cache, self.v_cache = k_cache, v_cache
        hidden, dev, dtype = stack.norm.shape[0], stack.norm.device, stack.norm.dtype
        self.hidden, self.inter = hidden, self.wgu.shape[1] // 2
        self.vocab, self.steps = self.heads.shape[1], self.heads.shape[0]
        self.max_streams = max_streams
        rows = 2 * max_streams
        self.counter = torch.zeros(1, dtype=torch.int32, device=dev)
        self.epoch = torch.zeros(1, dtype=torch.int32, device=dev)  # frames run (the CUDA kernel's LL tags)
        self.d = torch.zeros(rows, hidden, dtype=dtype, device=dev)
        self.ra, self.rb, self.o = (torch.zeros_like(self.d) for _ in range(3))
        self.qkv = torch.zeros(rows, self.wqkv.shape[1], dtype=dtype, device=dev)
        self.attn = torch.zeros(rows, stack.heads * stack.head_dim, dtype=dtype, device=dev)
        self.act = torch.zeros(rows, self.inter, dtype=dtype, device=dev)
        self.logits = torch.zeros(max_streams, self.vocab, dtype=dtype, device=dev)
        self.codes = torch.zeros(max_streams, self.steps, dtype=torch.long, device=dev)
        if programs is None:  # one per SM; one under the Triton interpreter (CPU tensors)
            programs = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 1
        self.programs = programs
        # The CUDA kernel's timestamps when compiled with TRACE (code_predictor.cu: trace), per CTA
        self.trace = torch.zeros(programs, trace_words(self.steps, len(layers)), dtype=torch.long, device=dev)


STAMPS = 5  # the CUDA kernel's stamps a phase (code_predictor.cu: STAMPS)


def trace_words(steps: int, layers: int) -> int:
    """A CTA's share of the CUDA kernel's trace (code_predictor.cu: TRACE_WORDS): two global times,
    then STAMPS cycle counts per phase: the start, then 5 a layer and the head and sampling a step."""
    return 2 + STAMPS * phases(steps, layers)


def phases(steps: int, layers: int) -> int:
    """The CUDA kernel's phases a frame, the start included (code_predictor.cu: PHASES): 5 a layer,
    then head and sampling a step."""
    return 1 + steps * (5 * layers + 2)
