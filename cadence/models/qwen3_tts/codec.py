"""The Codec partition's modules: the 12 Hz speech-tokenizer decoder (16 codes/frame -> 1920 samples).

Module paths equal the keys of `speech_tokenizer/model.safetensors` under `decoder.`. Everything is
causal (left-padded convs, right-trimmed transposed convs, a causal sliding-window transformer), so
the samples of frame t depend only on codes <= t; the streaming decoder relies on that.

Precision: the checkpoint and the offline decode are fp32. `cast_decoder` makes a bf16/fp16 copy for
the streaming Codec partition (EngineConfig.codec_dtype); the modules below are written so that the
same code runs both, with SnakeBeta (a bf16 SnakeBeta has produced NaN/silence in other servers),
norm statistics, attention scores and softmax, the codebook sums and the output conv in fp32. On fp32
weights every cast below is a no-op, so the fp32 decode is unchanged.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ...kernels.ops import ops_for
from .config import CodecDecoderConfig
from .layers import RMSNorm, apply_rope, attention, rope_cos_sin

# The official decode re-decodes long outputs in 300-frame chunks with 25 frames of left context;
# reproducing it is what makes outputs longer than 24 s match sample for sample.
OFFICIAL_CHUNK_FRAMES = 300
OFFICIAL_LEFT_CONTEXT_FRAMES = 25


class CausalConv1d(nn.Module):
    """Conv1d with (k-1)*d zeros on the left and none on the right (stride 1). Key: `<name>.conv`."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation, groups=groups)
        self.history = (kernel - 1) * dilation  # input samples of left context each output needs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x.to(self.conv.weight.dtype), (self.history, 0)))


class CausalTransConv1d(nn.Module):
    """ConvTranspose1d(k=2s, stride s) with the last k-s samples trimmed: T inputs -> s*T outputs."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel, stride=stride)
        self.trim = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x.to(self.conv.weight.dtype))
        return y[..., : y.shape[-1] - self.trim] if self.trim else y


class SnakeBeta(nn.Module):
    """x + sin^2(x e^alpha) / (e^beta + 1e-9), per channel; alpha and beta stored in log space.

    Computed in fp32 whatever the input's dtype, the result cast back: in bf16, x e^alpha keeps 8
    significant bits, so sin() of a large argument loses its phase (the spacing is 0.25 at 50).
    """

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops_for(x).snake_beta(x, self.alpha, self.beta)


class EuclideanCodebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def table(self) -> torch.Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class VectorQuantization(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self._codebook = EuclideanCodebook(size, dim)


class ResidualVectorQuantization(nn.Module):
    def __init__(self, n: int, size: int, dim: int):
        super().__init__()
        self.layers = nn.ModuleList(VectorQuantization(size, dim) for _ in range(n))


class ResidualVectorQuantizer(nn.Module):
    def __init__(self, n: int, size: int, dim: int, io_dim: int):
        super().__init__()
        self.vq = ResidualVectorQuantization(n, size, dim)
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)  # encoder side only; loaded, unused here
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, T] -> [B, io_dim, T]; the n embeddings are summed before the shared projection."""
        total = torch.zeros((), device=codes.device)
        for q, layer in enumerate(self.vq.layers):
            total = total + F.embedding(codes[:, q], layer._codebook.table()).transpose(1, 2)
        return self.output_proj(total)


class SplitResidualVectorQuantizer(nn.Module):
    """Codebook 0 (semantic) and codebooks 1..15 (acoustic) with separate output projections."""

    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        dim = cfg.codebook_dim // 2
        self.n_semantic = cfg.num_semantic_quantizers
        self.rvq_first = ResidualVectorQuantizer(self.n_semantic, cfg.codebook_size, dim, cfg.codebook_dim)
        self.rvq_rest = ResidualVectorQuantizer(
            cfg.num_quantizers - self.n_semantic, cfg.codebook_size, dim, cfg.codebook_dim
        )

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return self.rvq_first.decode(codes[:, : self.n_semantic]) + self.rvq_rest.decode(codes[:, self.n_semantic :])


class CodecAttention(nn.Module):
    """Multi-head attention without QK-norm; the sliding window is applied by the caller's mask."""

    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q, k, v in x's dtype; RoPE (fp32 cos/sin) is applied in fp32 and rounded once after."""
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(b, n, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, n, self.num_kv_heads, self.head_dim)
        return apply_rope(q.float(), cos, sin).to(x.dtype), apply_rope(k.float(), cos, sin).to(x.dtype), v


def attention_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`attention` with scores, softmax and the weighted sum in fp32, the result in q's dtype: the
    codec's 8 narrow layers at 12.5 frames/s are cheap next to its convs at up to 24 kHz."""
    return attention(q.float(), k.float(), v.float(), mask).to(q.dtype)


class LayerScale(nn.Module):
    def __init__(self, channels: int, initial: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), initial))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.scale * x).to(x.dtype)  # the scale stays fp32 in a low-precision copy


class CodecMLP(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class CodecTransformerLayer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = CodecAttention(cfg)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = CodecMLP(cfg)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)

    def forward(self, x, cos, sin, attend) -> torch.Tensor:
        """`attend(q, k, v)` places k/v (a cache, or nothing) and applies the sliding-window mask."""
        q, k, v = self.self_attn.qkv(self.input_layernorm(x), cos, sin)
        out = self.self_attn.o_proj(attend(q, k, v).reshape(x.shape[0], x.shape[1], -1))
        x = x + self.self_attn_layer_scale(out)
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


def sliding_window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int) -> torch.Tensor:
    """bool [Lq, S]: query i sees key j iff i - window < j <= i (itself and window-1 before)."""
    d = q_pos[:, None] - k_pos[None, :]
    return (d >= 0) & (d < window)


class CodecTransformer(nn.Module):
    """`decoder.pre_transformer`: latent -> hidden, 8 sliding-window layers, -> latent."""

    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList(CodecTransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B,T,latent] at positions 0..T-1 -> [B,T,latent]."""
        t = x.shape[1]
        pos = torch.arange(t, device=x.device)
        cos, sin = rope_cos_sin(pos[None].expand(x.shape[0], -1), self.cfg.head_dim, self.cfg.rope_theta, torch.float32)
        mask = sliding_window_mask(pos, pos, self.cfg.sliding_window)[None].expand(x.shape[0], -1, -1)

        def attend(q, k, v):
            return attention_fp32(q, k, v, mask)

        h = self.input_proj(x)
        for layer in self.layers:
            h = layer(h, cos, sin, attend)
        return self.output_proj(self.norm(h))


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def pointwise(self, x: torch.Tensor) -> torch.Tensor:
        """Everything after the depthwise conv, on [B,C,T]. The LayerNorm (weights kept fp32) and
        the gamma scale run in fp32, the two linears in their weights' dtype."""
        h = self.norm(x.transpose(1, 2).float()).to(self.pwconv1.weight.dtype)
        h = self.pwconv2(F.gelu(self.pwconv1(h)))
        return (self.gamma * h).transpose(1, 2).to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pointwise(self.dwconv(x))


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


class DecoderBlock(nn.Module):
    """SnakeBeta -> transposed conv (x rate) -> residual units with dilations 1, 3, 9."""

    def __init__(self, cin: int, cout: int, rate: int):
        super().__init__()
        self.block = nn.ModuleList(
            [SnakeBeta(cin), CausalTransConv1d(cin, cout, 2 * rate, rate)] + [ResidualUnit(cout, d) for d in (1, 3, 9)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.block:
            x = m(x)
        return x


class CodecDecoder(nn.Module):
    """`decoder`: codes [B,16,T] -> waveform [B,1,samples_per_frame*T] in [-1, 1]."""

    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.quantizer = SplitResidualVectorQuantizer(cfg)
        self.pre_conv = CausalConv1d(cfg.codebook_dim, cfg.latent_dim, 3)
        self.pre_transformer = CodecTransformer(cfg)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalTransConv1d(cfg.latent_dim, cfg.latent_dim, r, r), ConvNeXtBlock(cfg.latent_dim)])
            for r in cfg.upsampling_ratios
        )
        dims = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList(
            [CausalConv1d(cfg.latent_dim, cfg.decoder_dim, 7)]
            + [DecoderBlock(dims[i], dims[i + 1], r) for i, r in enumerate(cfg.upsample_rates)]
            + [SnakeBeta(dims[-1]), CausalConv1d(dims[-1], 1, 7)]
        )

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        if codes.shape[1] != self.cfg.num_quantizers:
            raise ValueError(f"expected {self.cfg.num_quantizers} codebooks, got {codes.shape[1]}")
        h = self.pre_conv(self.quantizer.decode(codes))
        h = self.pre_transformer(h.transpose(1, 2)).transpose(1, 2)
        for stage in self.upsample:
            for m in stage:
                h = m(h)
        for m in self.decoder:
            h = m(h)
        return h.float().clamp(-1.0, 1.0)

    def chunked_decode(
        self,
        codes: torch.Tensor,
        chunk: int = OFFICIAL_CHUNK_FRAMES,
        left_context: int = OFFICIAL_LEFT_CONTEXT_FRAMES,
    ) -> torch.Tensor:
        """The official offline decode: exact up to `chunk` frames, re-decoded windows beyond."""
        spf = self.cfg.samples_per_frame
        wavs, start, total = [], 0, codes.shape[-1]
        while start < total:
            end = min(start + chunk, total)
            # Official quirk kept for parity: the context is used only when start > left_context.
            context = left_context if start - left_context > 0 else start
            wavs.append(self(codes[..., start - context : end])[..., context * spf :])
            start = end
        return torch.cat(wavs, dim=-1)


# Modules whose weights a low-precision copy casts: the heavy convs and linears, and RMSNorm (its
# statistics are fp32 already; the weight must match the activations it scales).
_CAST = (nn.Conv1d, nn.ConvTranspose1d, nn.Linear, RMSNorm)


def cast_decoder(decoder: CodecDecoder, dtype: torch.dtype) -> CodecDecoder:
    """A copy of `decoder` computing in `dtype` (bfloat16 or float16); `decoder` itself is untouched,
    so the fp32 offline decode stays what parity is checked against.

    Cast: the convs and linears of the transformer, the upsampler and the decoder blocks, and RMSNorm
    weights. Kept fp32: the codebooks and their output projections (one lookup and sum per frame),
    SnakeBeta's alpha/beta, LayerNorm, LayerScale and ConvNeXt's gamma (cheap per-channel ops; in
    fp16 a small gamma would be subnormal), and the output conv (the waveform's own precision: a
    bf16 output would round samples near full scale by up to 2e-3).
    """
    out = copy.deepcopy(decoder)
    keep = {*out.quantizer.modules(), *out.decoder[-1].modules()}
    for m in out.modules():
        if isinstance(m, _CAST) and m not in keep:
            m.to(dtype)
    return out


class SpeechTokenizer(nn.Module):
    """Root of `speech_tokenizer/model.safetensors` as far as decoding goes: the child `decoder`.

    The file also holds the Mimi encoder (`encoder.*`), which CustomVoice never runs; the loader
    skips those keys by name.
    """

    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.decoder = CodecDecoder(cfg)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """One utterance's codes [T,16] -> float waveform [1920*T], exactly as the official decode."""
        if codes.numel() == 0:
            return torch.zeros(0, device=codes.device)
        dev = next(self.parameters()).device
        wav = self.decoder.chunked_decode(codes.to(dev).long().clamp(min=0).T[None])
        return wav[0, 0]
