"""The 12 Hz speech-tokenizer encoder: 24 kHz audio -> 16 codebooks at 12.5 frames/s (voice cloning).

It is a Mimi encoder (SEANet convolutions, a causal transformer, a strided downsample, a split
residual vector quantizer). Module paths equal the keys of `speech_tokenizer/model.safetensors`
under `encoder.`; the decoder side of that file lives in codec.py.

What the official encode does, and so what this does:
- every conv is causal: (k-1)*d + 1 - stride samples of left padding (zeros; the downsample
  replicates the edge), and right padding up to a whole number of strides, so L samples give
  ceil(L / 1920) frames and a frame depends only on audio up to its end;
- the transformer runs once over the whole utterance with a plain causal mask: the config's
  `sliding_window` (250) is not applied by transformers' encode path without a cache, which is
  the path the official `encode` takes (tests/test_speech_encoder.py checks this on a window
  shorter than the test audio);
- the semantic and acoustic quantizers both quantize the same embedding (each through its own
  input projection), each residually; only the first `encoder_valid_num_quantizers` (16) of the 32
  codebooks are used, and since each is chosen from the residual of those before it, the unused
  ones are never computed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .codec import LayerScale
from .config import SpeechEncoderConfig, SpeechTokenizerConfig
from .layers import apply_rope, rope_cos_sin


class EncoderConv1d(nn.Module):
    """A causal Conv1d, optionally strided. Key: `<name>.conv`."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1, **kw):
        super().__init__()
        pad_mode = kw.pop("pad_mode", "constant")
        self.conv = nn.Conv1d(cin, cout, kernel, stride, dilation=dilation, **kw)
        self.stride = stride
        self.left = (kernel - 1) * dilation + 1 - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Right padding completes the last stride, so every input sample reaches some output.
        right = (-x.shape[-1]) % self.stride
        return self.conv(F.pad(x, (self.left, right), mode=self.pad_mode))


class EncoderResnetBlock(nn.Module):
    """SEANet residual block: ELU -> conv k (dilated, to dim/compress) -> ELU -> conv 1 -> + x."""

    def __init__(self, cfg: SpeechEncoderConfig, dim: int, dilation: int):
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList(
            [
                nn.ELU(),
                EncoderConv1d(dim, hidden, cfg.residual_kernel_size, dilation=dilation, pad_mode=cfg.pad_mode),
                nn.ELU(),
                EncoderConv1d(hidden, dim, 1, pad_mode=cfg.pad_mode),
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for m in self.block:
            h = m(h)
        return x + h


class SeanetEncoder(nn.Module):
    """`encoder.encoder`: waveform [B,1,L] -> [B,hidden,L/hop] (stride per stage: the ratios reversed)."""

    def __init__(self, cfg: SpeechEncoderConfig):
        super().__init__()
        mode = cfg.pad_mode
        layers: list[nn.Module] = [EncoderConv1d(1, cfg.num_filters, cfg.kernel_size, pad_mode=mode)]
        channels = cfg.num_filters
        for ratio in reversed(cfg.upsampling_ratios):
            for j in range(cfg.num_residual_layers):
                layers.append(EncoderResnetBlock(cfg, channels, cfg.dilation_growth_rate**j))
            layers += [nn.ELU(), EncoderConv1d(channels, channels * 2, 2 * ratio, stride=ratio, pad_mode=mode)]
            channels *= 2
        layers += [nn.ELU(), EncoderConv1d(channels, cfg.hidden_size, cfg.last_kernel_size, pad_mode=mode)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.layers:
            x = m(x)
        return x


class EncoderAttention(nn.Module):
    def __init__(self, cfg: SpeechEncoderConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = apply_rope(self.q_proj(x).view(b, n, self.heads, self.head_dim), cos, sin).transpose(1, 2)
        k = apply_rope(self.k_proj(x).view(b, n, self.kv_heads, self.head_dim), cos, sin).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.heads != self.kv_heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class EncoderMLP(nn.Module):
    def __init__(self, cfg: SpeechEncoderConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderTransformerLayer(nn.Module):
    """Pre-norm (LayerNorm) attention and MLP, each scaled by a LayerScale before the residual add."""

    def __init__(self, cfg: SpeechEncoderConfig):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn = EncoderAttention(cfg)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = EncoderMLP(cfg)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class EncoderTransformer(nn.Module):
    """`encoder.encoder_transformer`: causal layers over [B,T,hidden] at positions 0..T-1 (no final norm)."""

    def __init__(self, cfg: SpeechEncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(EncoderTransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        cos, sin = rope_cos_sin(pos, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class EncoderCodebook(nn.Module):
    """Mimi's Euclidean codebook: buffers `embed_sum`, `cluster_usage`, `initialized` (as saved)."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))

    def table(self) -> torch.Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class EncoderVectorQuantization(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.codebook = EncoderCodebook(size, dim)


class EncoderResidualQuantizer(nn.Module):
    """One branch of the split RVQ (semantic or acoustic), encode side."""

    def __init__(self, cfg: SpeechEncoderConfig, n: int):
        super().__init__()
        self.layers = nn.ModuleList(EncoderVectorQuantization(cfg.codebook_size, cfg.codebook_dim) for _ in range(n))
        self.input_proj: nn.Module | None = None
        self.output_proj: nn.Module | None = None  # decode side; loaded, unused here
        if cfg.vector_quantization_hidden_dimension != cfg.hidden_size:
            dim = cfg.vector_quantization_hidden_dimension
            self.input_proj = nn.Conv1d(cfg.hidden_size, dim, 1, bias=False)
            self.output_proj = nn.Conv1d(dim, cfg.hidden_size, 1, bias=False)

    def encode(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """x [B,hidden,T] -> codes [n,B,T]: each codebook quantizes what the ones before left over."""
        if self.input_proj is not None:
            x = self.input_proj(x)
        residual = x.transpose(1, 2)  # [B,T,D]
        codes = []
        for layer in self.layers[:n]:
            table = layer.codebook.table()
            flat = residual.reshape(-1, residual.shape[-1])
            # torch.cdist as the official code calls it: the same distances, hence the same argmin.
            idx = torch.cdist(flat[None].float(), table[None].float(), p=2)[0].argmin(dim=-1)
            idx = idx.view(residual.shape[:-1])
            residual = residual - F.embedding(idx, table)
            codes.append(idx)
        return torch.stack(codes)


class EncoderQuantizer(nn.Module):
    """`encoder.quantizer`: codebook 0 from the semantic branch, the rest from the acoustic one."""

    def __init__(self, cfg: SpeechEncoderConfig):
        super().__init__()
        self.n_semantic = cfg.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = EncoderResidualQuantizer(cfg, self.n_semantic)
        self.acoustic_residual_vector_quantizer = EncoderResidualQuantizer(cfg, cfg.num_quantizers - self.n_semantic)

    def encode(self, x: torch.Tensor, n: int) -> torch.Tensor:
        """x [B,hidden,T] -> codes [B,n,T]."""
        codes = self.semantic_residual_vector_quantizer.encode(x, self.n_semantic)
        if n > self.n_semantic:
            rest = self.acoustic_residual_vector_quantizer.encode(x, n - self.n_semantic)
            codes = torch.cat([codes, rest])
        return codes.transpose(0, 1)


class AudioEncoder(nn.Module):
    """`encoder`: waveform [B,1,L] -> codes [B,n,ceil(L/1920)]."""

    def __init__(self, cfg: SpeechEncoderConfig):
        super().__init__()
        self.encoder = SeanetEncoder(cfg)
        self.encoder_transformer = EncoderTransformer(cfg)
        kernel = cfg.downsample_kernel
        self.downsample = (
            EncoderConv1d(cfg.hidden_size, cfg.hidden_size, kernel, stride=2, bias=False, pad_mode="replicate")
            if kernel
            else None
        )
        self.quantizer = EncoderQuantizer(cfg)

    def forward(self, wav: torch.Tensor, num_codebooks: int) -> torch.Tensor:
        h = self.encoder(wav)
        h = self.encoder_transformer(h.transpose(1, 2)).transpose(1, 2)
        if self.downsample is not None:
            h = self.downsample(h)
        return self.quantizer.encode(h, num_codebooks)


class SpeechTokenizerEncoder(nn.Module):
    """Root of `speech_tokenizer/model.safetensors` as far as encoding goes: the child `encoder`."""

    def __init__(self, cfg: SpeechTokenizerConfig):
        super().__init__()
        if cfg.encoder is None:
            raise ValueError("speech_tokenizer/config.json has no encoder_config: this checkpoint cannot encode audio")
        self.cfg = cfg
        self.encoder = AudioEncoder(cfg.encoder)

    @torch.no_grad()
    def encode(self, wav: torch.Tensor) -> torch.Tensor:
        """One utterance, float samples at the input rate (24 kHz) [L] -> codes [ceil(L/1920), 16] long."""
        if wav.dim() != 1 or wav.numel() == 0:
            raise ValueError(f"expected a non-empty 1-D waveform, got shape {tuple(wav.shape)}")
        dev = next(self.parameters()).device
        codes = self.encoder(wav.to(dev, torch.float32)[None, None], self.cfg.encoder_valid_num_quantizers)
        frames = -(-wav.numel() // self.cfg.encode_downsample_rate)
        return codes[0, : self.cfg.decoder.num_quantizers, :frames].T.cpu()
