"""The streaming codec's transformer and codebook lookups, rearranged for fewer, larger kernels.

A one-frame chunk of the streaming decoder is launch-bound: its transformer and its 16 codebook
lookups issued ~280 of its ~560 kernels, most of them elementwise ops on a few KB (the RMSNorm's
pow/mean/rsqrt/mul, RoPE's cat/neg/mul/add, LayerScale muls, 15 table divisions). Here:

- `FusedCodecTransformer`: q/k/v and gate/up as one GEMM each; the LayerScales folded into the
  weights of o_proj and down_proj (scale * (W x) = (scale * W) x); RMSNorm with the residual add in
  one op; q and k rotated by one RoPE op (`rope_qk`); SwiGLU in one (`silu_mul`). The ops come from
  `kernels.ops.ops_for(x)`: Triton kernels on a GPU, their PyTorch definitions elsewhere.
- `CodebookTables`: each codebook's table (embedding_sum / usage) computed once, the tables of a
  quantizer half stacked, and each half's 1 or 15 lookups done as one gather and one sum.

Same arithmetic as `codec.CodecTransformer` and `SplitResidualVectorQuantizer.decode` up to fp32
summation order (the folded scale, the concatenated GEMMs, the codebook sum): ~1e-7 relative. Built
from the decoder's modules when the streaming decoder allocates; the weights are copied then, so a
later change to the modules is not seen (they are inference weights, loaded once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ...kernels.ops import ops_for
from .codec import CodecTransformer, CodecTransformerLayer, SplitResidualVectorQuantizer

# attend(layer_index, q [B,F,Hq,D], k [B,F,Hkv,D], v [B,F,Hkv,D]) -> [B,F,Hq,D]
CodecAttend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _scaled(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """LayerScale folded into the linear before it: rows scaled in fp32, rounded once to the weight's dtype."""
    return (scale.float()[:, None] * weight.float()).to(weight.dtype)


@dataclass
class FusedCodecLayer:
    """One `CodecTransformerLayer`'s weights, concatenated and scaled for the fused walk."""

    input_norm: torch.Tensor
    post_norm: torch.Tensor
    wqkv: torch.Tensor  # [(Hq + 2 Hkv) * D, hidden]
    wo: torch.Tensor  # [hidden, Hq * D], self_attn_layer_scale folded in
    wgu: torch.Tensor  # [2 * intermediate, hidden]: gate rows, then up rows
    wdown: torch.Tensor  # [hidden, intermediate], mlp_layer_scale folded in
    eps: float

    @classmethod
    def of(cls, layer: CodecTransformerLayer) -> FusedCodecLayer:
        attn, mlp = layer.self_attn, layer.mlp
        return cls(
            input_norm=layer.input_layernorm.weight.detach(),
            post_norm=layer.post_attention_layernorm.weight.detach(),
            wqkv=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach(),
            wo=_scaled(attn.o_proj.weight.detach(), layer.self_attn_layer_scale.scale.detach()),
            wgu=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach(),
            wdown=_scaled(mlp.down_proj.weight.detach(), layer.mlp_layer_scale.scale.detach()),
            eps=layer.input_layernorm.eps,
        )


class FusedCodecTransformer:
    """`CodecTransformer.forward` in ~10 kernels per layer; attention is the caller's (`attend`)."""

    def __init__(self, transformer: CodecTransformer):
        cfg = transformer.cfg
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.input_proj = transformer.input_proj
        self.output_proj = transformer.output_proj
        self.norm = transformer.norm
        self.layers = [FusedCodecLayer.of(layer) for layer in transformer.layers]

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: CodecAttend) -> torch.Tensor:
        """x [B, F, latent]; cos/sin [B, F, head_dim] (fp32) at each frame's position -> [B, F, latent]."""
        b, n, _ = x.shape
        ops = ops_for(x)
        cos, sin = cos.reshape(b * n, -1), sin.reshape(b * n, -1)
        h = self.input_proj(x).reshape(b * n, -1)  # the residual stream, one row per frame
        pending = None  # the last MLP output, added to h by the next norm
        for i, layer in enumerate(self.layers):
            normed, h = ops.rms_norm(h, layer.input_norm, layer.eps, pending)
            qkv = F.linear(normed, layer.wqkv)
            q, k = ops.rope_qk(qkv, cos, sin, self.heads, self.kv_heads)
            v = qkv.view(b, n, -1, self.head_dim)[:, :, self.heads + self.kv_heads :]
            out = attend(i, q.view(b, n, self.heads, -1), k.view(b, n, self.kv_heads, -1), v)
            normed, h = ops.rms_norm(F.linear(out.reshape(b * n, -1), layer.wo), layer.post_norm, layer.eps, h)
            pending = F.linear(ops.silu_mul(F.linear(normed, layer.wgu)), layer.wdown)
        normed, _ = ops.rms_norm(h, self.norm.weight, self.norm.eps, pending)
        return self.output_proj(normed).view(b, n, -1)


class CodebookTables:
    """`SplitResidualVectorQuantizer.decode` with its tables precomputed: per half (semantic,
    acoustic) the stacked tables [n * size, dim], looked up by code + n * size offsets at once."""

    def __init__(self, quantizer: SplitResidualVectorQuantizer):
        self.n_semantic = quantizer.n_semantic
        self.halves = []
        for rvq in (quantizer.rvq_first, quantizer.rvq_rest):
            with torch.no_grad():
                tables = [layer._codebook.table() for layer in rvq.vq.layers]
            size = tables[0].shape[0]
            offsets = torch.arange(len(tables), device=tables[0].device) * size
            self.halves.append((torch.cat(tables), offsets, rvq.output_proj))

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, 16, F] -> [B, io_dim, F]."""
        out = None
        for (table, offsets, proj), part in zip(
            self.halves, (codes[:, : self.n_semantic], codes[:, self.n_semantic :]), strict=True
        ):
            summed = F.embedding(part + offsets[:, None], table).sum(1)  # [B, F, dim]
            y = proj(summed.transpose(1, 2))
            out = y if out is None else out + y
        return out
