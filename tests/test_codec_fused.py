"""The streaming codec's fused transformer and gathered codebook lookups (codec_fused.py) against the
modules they rearrange: the same numbers up to fp32 summation order, in fp32 and in a bf16 copy."""

from __future__ import annotations

import copy

import pytest
import torch

from cadence.models.qwen3_tts.codec import attention_fp32, cast_decoder, sliding_window_mask
from cadence.models.qwen3_tts.codec_fused import CodebookTables, FusedCodecTransformer
from cadence.models.qwen3_tts.layers import rope_cos_sin

pytestmark = pytest.mark.usefixtures("small_op_cpu_settings")  # conftest.py


@pytest.fixture
def scaled_decoder(decoder):
    """The tiny codec with every LayerScale distinct per channel, so a wrongly folded scale shows."""
    dec = copy.deepcopy(decoder)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in dec.pre_transformer.layers:
            for ls in (layer.self_attn_layer_scale, layer.mlp_layer_scale):
                ls.scale.copy_(torch.rand(ls.scale.shape, generator=g) * 2 - 0.5)
    return dec


def fused_forward(transformer, x: torch.Tensor) -> torch.Tensor:
    """The fused transformer over a whole sequence, attending as CodecTransformer.forward does."""
    cfg = transformer.cfg
    b, t, _ = x.shape
    pos = torch.arange(t)
    cos, sin = rope_cos_sin(pos[None].expand(b, -1), cfg.head_dim, cfg.rope_theta, torch.float32)
    mask = sliding_window_mask(pos, pos, cfg.sliding_window)[None].expand(b, -1, -1)
    return FusedCodecTransformer(transformer)(x, cos, sin, lambda i, q, k, v: attention_fp32(q, k, v, mask))


@torch.no_grad()
def test_fused_transformer_matches_the_module(scaled_decoder):
    tr = scaled_decoder.pre_transformer
    x = torch.randn(3, 20, tr.cfg.latent_dim, generator=torch.Generator().manual_seed(1))
    ref = tr(x)
    got = fused_forward(tr, x)
    assert got.shape == ref.shape
    assert float((got - ref).abs().max()) <= 1e-5 * (1 + float(ref.abs().max()))


@torch.no_grad()
def test_fused_transformer_in_bfloat16(scaled_decoder):
    """In a bf16 copy (cast_decoder) the folded scale rounds once more than the module's separate
    fp32 multiply: the two stay within a few bf16 steps of each other."""
    tr = cast_decoder(scaled_decoder, torch.bfloat16).pre_transformer
    x = torch.randn(2, 12, tr.cfg.latent_dim, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    ref = tr(x).float()
    got = fused_forward(tr, x)
    assert got.dtype == torch.bfloat16
    assert float((got.float() - ref).abs().max()) <= 3e-2 * (1 + float(ref.abs().max()))


@torch.no_grad()
def test_codebook_tables_match_the_quantizer(decoder):
    q = decoder.quantizer
    codes = torch.randint(0, decoder.cfg.codebook_size, (4, decoder.cfg.num_quantizers, 9))
    ref = q.decode(codes)
    got = CodebookTables(q).decode(codes)
    assert got.shape == ref.shape
    assert float((got - ref).abs().max()) <= 1e-5 * (1 + float(ref.abs().max()))
