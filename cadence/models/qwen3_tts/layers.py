"""Qwen3 decoder building blocks shared by the talker and the code predictor.

Parameter names equal the checkpoint keys. Attention is split in two: the layer computes q/k/v (with
QK-norm and RoPE); *where the keys live and how they are attended* is the caller's business, passed
in as an `Attend` callable. The reference loop attends over a contiguous cache, the engine over
paged KV, and both run the very same layer code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import DecoderStackConfig

# attend(layer_index, q [B,L,Hq,D], k [B,L,Hkv,D], v [B,L,Hkv,D]) -> [B,L,Hq,D]
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32, cast back, then scale: the official order, which matters in bf16.
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [..., head_dim] for integer positions, computed in fp32 (rotate-half layout).

    The talker's config describes an interleaved 3-D mRoPE, but text-only prompts give the three
    position streams identical values, which makes it exactly this 1-D RoPE.
    """
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).float() / head_dim)
    )
    freqs = positions.float().unsqueeze(-1) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B,L,H,D]; cos/sin [B,L,D]."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Scaled dot-product attention with GQA. q [B,Lq,Hq,D], k/v [B,S,Hkv,D], mask bool [B,Lq,S]."""
    groups = q.shape[2] // k.shape[2]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.unsqueeze(1))
    return out.transpose(1, 2)


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: DecoderStackConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int, attend: Attend
    ) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, n, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(b, n, self.num_kv_heads, self.head_dim))
        v = self.v_proj(x).view(b, n, self.num_kv_heads, self.head_dim)
        out = attend(layer, apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        return self.o_proj(out.reshape(b, n, -1))


class Qwen3MLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderStackConfig, index: int):
        super().__init__()
        self.index = index
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Qwen3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Qwen3MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: Attend) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, self.index, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Stack(nn.Module):
    """Layers + final norm, run over embeddings at given positions. Subclasses add the embeddings."""

    def __init__(self, cfg: DecoderStackConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(Qwen3DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """embeds [B,L,H], positions [B,L] -> post-norm hidden states [B,L,H]."""
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, embeds.dtype)
        x = embeds
        for layer in self.layers:
            x = layer(x, cos, sin, attend)
        return self.norm(x)


class ContiguousKVCache:
    """Per-layer K/V concatenated over time, with a key-validity mask for left padding."""

    def __init__(self, num_layers: int):
        self.k: list[torch.Tensor | None] = [None] * num_layers
        self.v: list[torch.Tensor | None] = [None] * num_layers
        self.valid: torch.Tensor | None = None  # bool [B, S]
        self.mask: torch.Tensor | None = None

    def step(self, valid_new: torch.Tensor) -> ContiguousKVCache:
        """Announce the next forward's tokens ([B, L] validity); build its causal + padding mask."""
        old = 0 if self.valid is None else self.valid.shape[1]
        self.valid = valid_new if self.valid is None else torch.cat([self.valid, valid_new], dim=1)
        total, new = self.valid.shape[1], valid_new.shape[1]
        q_idx = torch.arange(old, total, device=valid_new.device)[:, None]
        k_idx = torch.arange(total, device=valid_new.device)[None, :]
        causal = k_idx <= q_idx
        # A padded query row still sees itself, so no row is all-masked (which would make NaNs
        # that leak through 0-weighted values into real rows).
        self.mask = (causal[None] & self.valid[:, None, :]) | (k_idx == q_idx)[None]
        assert self.mask.shape[1] == new
        return self

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=1)
            v = torch.cat([self.v[layer], v], dim=1)
        self.k[layer], self.v[layer] = k, v
        return attention(q, k, v, self.mask)
