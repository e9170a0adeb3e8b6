"""A Qwen3 decoder stack (the talker's 28 layers, the code predictor's 5) run with the fused ops
over a paged KV cache, the layout the fast walk and prefill share.

A layer runs as: one QKV GEMM, QK-norm + RoPE + KV write (inside the decode attention kernel up
to 64 rows), paged attention, O GEMM and fused residual-add + RMSNorm, one gate/up GEMM with
SwiGLU, down GEMM and the next norm (the next layer's input norm or the final one); each GEMM +
norm pair is `linear_rms_norm`, where a split-K GEMM leaves its partials to the norm. `ops` is
kernels.ops' TritonOps on GPUs and TorchOps elsewhere.

With `slab_max_rows` (Hopper, bf16, up to 8 rows) the four GEMMs are the slab GEMM
(`cuda_slab_gemm.slab_linear`) instead: each CTA's weights copied into shared memory before the
kernel waits for the one before, and the norms before qkv and gate/up done inside those GEMMs, so a
layer is five kernels (four GEMMs and the attention) and only the stack's final norm is a kernel of
its own. At one decode row whose context is one cache page (the code predictor's steps) the
attention goes inside the o GEMM too (`slab_attention_linear`): four kernels a layer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ...kernels.linear.cuda_slab_gemm import (
    AttentionShape,
    DecodeAttention,
    LayerPlans,
    slab_attention_linear,
    slab_linear,
    slab_supported,
)
from ...kernels.norm.kv_prefetch import KvPrefetch, KvPrefetchPlan
from ...kernels.ops import Ops
from .layers import Qwen3DecoderLayer, Qwen3Stack, rope_cos_sin


@dataclass
class FusedLayer:
    """One decoder layer's weights in the fused layout (QKV and gate/up concatenated)."""

    ln1: torch.Tensor
    wqkv: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    wo: torch.Tensor
    ln2: torch.Tensor
    wgu: torch.Tensor
    wdown: torch.Tensor

    @classmethod
    def of(cls, layer: Qwen3DecoderLayer) -> FusedLayer:
        a, m = layer.self_attn, layer.mlp
        return cls(
            ln1=layer.input_layernorm.weight,
            wqkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
            q_norm=a.q_norm.weight,
            k_norm=a.k_norm.weight,
            wo=a.o_proj.weight,
            ln2=layer.post_attention_layernorm.weight,
            wgu=torch.cat([m.gate_proj.weight, m.up_proj.weight]),
            wdown=m.down_proj.weight,
        )


class FusedStack:
    """A Qwen3 stack (layers + final norm) run with the fused ops over a paged KV cache."""

    def __init__(self, stack: Qwen3Stack, ops: Ops, max_positions: int, attention_splits: int | None = None,
                 slab_max_rows: int = 0, kv_prefetch: KvPrefetchPlan | None = None):  # fmt: skip
        cfg = stack.cfg
        self.kv_prefetch = kv_prefetch or KvPrefetchPlan()  # decode only: a norm's program is then its row's sequence
        self.ops = ops
        self.splits = attention_splits  # None: the kernel picks by batch size
        self.max_positions = max_positions  # the longest context: the attention kernel's tiles follow it
        self.layers = [FusedLayer.of(layer) for layer in stack.layers]
        self.norm = stack.norm.weight
        self.eps = cfg.rms_norm_eps
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        dev, dtype = self.norm.device, self.norm.dtype
        # The eager model's own RoPE table, so the fused path rotates by exactly the same numbers.
        self.cos, self.sin = rope_cos_sin(torch.arange(max_positions, device=dev), cfg.head_dim, cfg.rope_theta, dtype)
        self.slab_max_rows = slab_max_rows if dtype == torch.bfloat16 and slab_supported(dev) else 0

    def __call__(
        self, x, positions, block_table, context_lens, slot_index, k_cache, v_cache, decode: bool = False,
        new_tokens: int = 1,
    ) -> torch.Tensor:  # fmt: skip
        """x [N, H] at `positions` [N]; keys written to flat slots `slot_index`; attention over the
        first context_lens[n] tokens of block_table[n]. k_cache/v_cache: per layer [pages, ps, Hkv, D].
        decode: every row is its own sequence's one new token (positions = context_lens - 1), or with
        new_tokens > 1 every that many consecutive rows are one sequence's new tokens (the code
        predictor's first pass: 2), so the attention kernel may take the rows' QK-norm, RoPE and cache
        write (one kernel a layer fewer); not for prefill, whose rows read each other's keys in any
        layout."""
        attend = functools.partial(self._attend, positions, block_table, context_lens, slot_index, k_cache, v_cache,
                                   decode, new_tokens)  # fmt: skip
        one_token = decode and new_tokens == 1
        if x.shape[0] <= self.slab_max_rows:
            # The code predictor's decode steps at one row (one page of context): the attention goes
            # inside o; not its first pass (two tokens of one stream), which is no faster that way.
            inside_o = one_token and x.shape[0] == 1
            one_page = inside_o and self.max_positions <= k_cache.shape[2]
            shape = AttentionShape(self.heads, self.kv_heads, self.head_dim, k_cache.shape[2]) if one_page else None
            if (plans := self._slab_plans(x.shape[0], shape)) is not None:
                inside = functools.partial(self._attention_inside, positions, block_table, context_lens, slot_index,
                                           k_cache, v_cache)  # fmt: skip
                return self._slab_layers(x, plans, attend, inside)
        ops, plan = self.ops, self.kv_prefetch
        tokens = plan.tokens(x.shape[0], k_cache[0]) if one_token else 0  # the budget's tokens a row; 0: off
        ahead = functools.partial(self._prefetch, block_table, context_lens, k_cache, v_cache, tokens)
        h, residual = ops.rms_norm(x, self.layers[0].ln1, self.eps, prefetch=ahead(0))
        qkv = ops.linear(h, self.layers[0].wqkv)
        for i, L in enumerate(self.layers):
            h, residual = ops.linear_rms_norm(attend(i, L, qkv), L.wo, L.ln2, self.eps, residual)
            act = ops.linear_swiglu(h, L.wgu)
            if i + 1 == len(self.layers):  # the stack's final norm
                h, _ = ops.linear_rms_norm(act, L.wdown, self.norm, self.eps, residual)
                break
            # The next layer's input norm, which pulls that layer's cache into L2 (kv_prefetch.py), and its qkv.
            nxt = self.layers[i + 1]
            h, residual = ops.linear_rms_norm(act, L.wdown, nxt.ln1, self.eps, residual, prefetch=ahead(i + 1))
            qkv = ops.linear(h, nxt.wqkv)
        return h

    def _prefetch(self, block_table, context_lens, k_cache, v_cache, tokens: int, i: int) -> KvPrefetch | None:
        """What a norm before layer i's attention pulls into L2 for it, `tokens` a row (kv_prefetch.py):
        none past the last layer, or with none a row."""
        if tokens <= 0 or i >= len(self.layers):
            return None
        return KvPrefetch(k_cache[i], v_cache[i], block_table, context_lens, tokens)

    def _attend(self, positions, block_table, context_lens, slot_index, k_cache, v_cache, decode: bool,
                new_tokens: int, i: int, L: FusedLayer, qkv: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """Layer i's attention of its qkv rows: QK-norm, RoPE, the cache write and paged attention."""
        ops = self.ops
        cache = (k_cache[i], v_cache[i], slot_index)
        norm_rope = (L.q_norm, L.k_norm, self.eps, self.cos, self.sin, positions, *cache)
        if decode:
            return ops.qk_norm_rope_attention(
                qkv, *norm_rope, block_table, context_lens, self.scale, self.heads, self.kv_heads, self.splits,
                max_context=self.max_positions, new_tokens=new_tokens,
            )  # fmt: skip
        q = ops.qk_norm_rope_store(qkv, *norm_rope, self.heads, self.kv_heads)
        return ops.paged_attention(
            q, k_cache[i], v_cache[i], block_table, context_lens, self.scale, self.splits,
            max_context=self.max_positions,
        )  # fmt: skip

    def _slab_plans(self, rows: int, attention: AttentionShape | None = None) -> LayerPlans | None:
        """The slab GEMM's plans for a layer at `rows` rows, or None if one of the four has none."""
        L = self.layers[0]
        return LayerPlans.of(L.wqkv.shape, L.wo.shape, L.wgu.shape, L.wdown.shape, rows, attention)

    def _attention_inside(self, positions, block_table, context_lens, slot_index, k_cache, v_cache, i: int,
                          L: FusedLayer) -> DecodeAttention:  # fmt: skip
        """Layer i's decode attention as the o projection's slab GEMM takes it in."""
        return DecodeAttention(L.q_norm, L.k_norm, self.cos, self.sin, positions, slot_index, context_lens, block_table,
                               k_cache[i], v_cache[i], self.scale)  # fmt: skip

    def _slab_layers(self, x: torch.Tensor, plans: LayerPlans, attend, inside) -> torch.Tensor:
        """The layers with the slab GEMM (norms folded into qkv and gate/up; with plans.o_attention the
        attention inside o), then the final norm."""
        h, residual, eps = x, None, self.eps
        for i, L in enumerate(self.layers):
            qkv, residual = slab_linear(h, L.wqkv, plans.qkv if i else plans.qkv_first, L.ln1, residual, eps)
            if plans.o_attention is not None:
                o = slab_attention_linear(qkv, L.wo, plans.o_attention, inside(i, L), eps)
            else:
                o, _ = slab_linear(attend(i, L, qkv), L.wo, plans.o)
            act, residual = slab_linear(o, L.wgu, plans.gate_up, L.ln2, residual, eps)
            h, _ = slab_linear(act, L.wdown, plans.down)
        return self.ops.rms_norm(h, self.norm, eps, residual)[0]
