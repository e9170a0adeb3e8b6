"""`cadence checkpoint random`: random-weight checkpoints in the official layout.

No weights can be downloaded where cadence is developed, so correctness is proven on checkpoints of
random weights that both cadence and the official package load. The architecture comes from a
*skeleton* (the real config and tokenizer files); a preset may shrink it. Every parameter is drawn
at a scale that keeps signals alive through the stack: Hugging Face's init leaves the codebooks
zero and LayerScale/ConvNeXt/SnakeBeta nearly inert, which would make a decoder test meaningless.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn
from tqdm import tqdm

from ...checkpoints import CheckpointError
from .codec import EuclideanCodebook, LayerScale, ResidualUnit, SnakeBeta, SpeechTokenizer
from .config import Qwen3TTSConfig
from .layers import RMSNorm
from .skeletons import resolve_skeleton
from .speaker_encoder import SpeakerEncoderModel
from .speech_encoder import EncoderCodebook, SpeechTokenizerEncoder
from .talker import Qwen3TTSTalkerModel

_STACK = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16,
)  # fmt: skip


def _tiny(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Keeps every id table, 16 code groups, the codebook and vocab sizes and the real text
    vocabulary (so the real tokenizer files work), and the upsampling rates (1920 samples per
    frame); sliding_window 8 lets short tests cross the codec's attention window. A talker wider
    than its code predictor (1.7B) stays wider, so `small_to_mtp_projection` exists."""
    talker = config.get("talker_config", {})
    ratio = max(1, talker.get("hidden_size", 1) // talker.get("code_predictor_config", {}).get("hidden_size", 1))
    model = {
        "talker_config": {
            **_STACK,
            "hidden_size": 64 * ratio,
            "intermediate_size": 128 * ratio,
            "text_hidden_size": 64,
            "rope_scaling": {"mrope_section": [4, 2, 2]},
            "code_predictor_config": dict(_STACK),
        }
    }
    if "speaker_encoder_config" in config:  # Base: the x-vector has the talker's width
        model["speaker_encoder_config"] = dict(
            enc_dim=64 * ratio, enc_channels=[16, 16, 16, 16, 48], enc_attention_channels=8, enc_se_channels=8
        )
    return {
        "config.json": model,
        "speech_tokenizer/config.json": {
            "decoder_config": dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                head_dim=16,
                latent_dim=64,
                decoder_dim=48,
                codebook_dim=32,
                sliding_window=8,
            ),  # fmt: skip
            # Keeps the SEANet ratios (1920 samples per frame), the 32 x 2048 codebooks and the
            # semantic/acoustic split; a window shorter than the tests' audio shows that the
            # official encode does not apply it.
            "encoder_config": dict(
                hidden_size=32,
                num_filters=8,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                head_dim=16,
                intermediate_size=64,
                codebook_dim=16,
                vector_quantization_hidden_dimension=16,
                sliding_window=8,
                upsample_groups=32,  # the decode-side upsample's groups (unused; must divide)
                frame_rate=12.5,
            ),  # fmt: skip
        },
    }


# Overrides applied to the skeleton's config files, computed from its config.json.
PRESETS = {"full": lambda config: {}, "tiny": _tiny}

COPIED_FILES = (
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "speech_tokenizer/preprocessor_config.json",
    "speech_tokenizer/configuration.json",
)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict update (objects merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@torch.no_grad()
def randomize(module: nn.Module, generator: torch.Generator) -> None:
    """Redraw every parameter of `module` (talker or codec) at a scale that keeps it effective."""

    def normal(p: torch.Tensor, std: float, mean: float = 0.0) -> None:
        p.copy_(torch.randn(p.shape, generator=generator) * std + mean)

    for m in module.modules():
        if isinstance(m, nn.Linear):
            normal(m.weight, m.in_features**-0.5)
        elif isinstance(m, nn.Conv1d):
            normal(m.weight, (m.in_channels // m.groups * m.kernel_size[0]) ** -0.5)
        elif isinstance(m, nn.ConvTranspose1d):
            normal(m.weight, (m.in_channels * m.kernel_size[0] / m.stride[0]) ** -0.5)
        elif isinstance(m, nn.Embedding):
            normal(m.weight, 1.0)
        elif isinstance(m, (RMSNorm, nn.LayerNorm)):
            normal(m.weight, 0.1, mean=1.0)
        elif isinstance(m, EuclideanCodebook):
            normal(m.embedding_sum, 1.0)
            m.cluster_usage.copy_(torch.rand(m.cluster_usage.shape, generator=generator) * 1.5 + 0.5)
        elif isinstance(m, EncoderCodebook):
            normal(m.embed_sum, 1.0)
            m.cluster_usage.copy_(torch.rand(m.cluster_usage.shape, generator=generator) * 1.5 + 0.5)
        elif isinstance(m, LayerScale):
            m.scale.copy_(torch.rand(m.scale.shape, generator=generator) * 0.9 + 0.1)
        elif isinstance(m, SnakeBeta):
            normal(m.alpha, 0.1)
            normal(m.beta, 0.1)
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.ConvTranspose1d, nn.LayerNorm)) and m.bias is not None:
            normal(m.bias, 0.1)
        if hasattr(m, "gamma") and isinstance(m.gamma, nn.Parameter):  # ConvNeXt
            m.gamma.copy_(torch.rand(m.gamma.shape, generator=generator) * 0.9 + 0.1)
    # Plain fan-in scaling grows the signal ~3x per residual block and the final clamp(-1, 1) would
    # saturate nearly every sample; damp each residual branch and the output conv.
    for m in module.modules():
        if isinstance(m, ResidualUnit):
            m.conv2.conv.weight.mul_(0.3)
    if isinstance(module, SpeechTokenizer):
        module.decoder.decoder[-1].conv.weight.mul_(0.1)


def write_random_checkpoint(
    skeleton: str | Path,
    out: str | Path,
    preset: str = "tiny",
    seed: int = 0,
    progress: bool = True,
    variant: str | None = None,
) -> Path:
    """Write a checkpoint of random weights with `skeleton`'s architecture (shrunk by `preset`),
    as `variant` (custom_voice, base, voice_design; default: the skeleton's own).

    Every tensor the official loader expects is written (the codec encoder, and Base's speaker
    encoder, included), so it initialises nothing at random itself."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset '{preset}'; allowed: {', '.join(PRESETS)}")
    src = resolve_skeleton(skeleton)
    for name in ("config.json", "speech_tokenizer/config.json"):
        if not src.has(name):
            raise CheckpointError(f"the skeleton {src.source} has no {name}")
    out = Path(out)
    (out / "speech_tokenizer").mkdir(parents=True, exist_ok=True)

    configs = {
        "config.json": src.config(variant),
        "speech_tokenizer/config.json": src.read("speech_tokenizer/config.json"),
    }
    overrides = PRESETS[preset](configs["config.json"])
    configs = {name: merge(data, overrides.get(name, {})) for name, data in configs.items()}
    generation = src.read("generation_config.json") if src.has("generation_config.json") else {}
    cfg = Qwen3TTSConfig.from_dicts(configs["config.json"], configs["speech_tokenizer/config.json"], generation)

    steps = tqdm(total=4, desc=f"random {preset} checkpoint", disable=not progress)
    gen = torch.Generator().manual_seed(seed)
    talker = Qwen3TTSTalkerModel(cfg)
    randomize(talker, gen)
    tensors = dict(talker.state_dict())
    del talker
    if cfg.speaker_encoder is not None:
        speaker = SpeakerEncoderModel(cfg.speaker_encoder)
        randomize(speaker, gen)
        tensors.update(speaker.state_dict())
    steps.update()
    codec = SpeechTokenizer(cfg.speech_tokenizer.decoder)
    randomize(codec, gen)
    codec_tensors = dict(codec.state_dict())
    if cfg.speech_tokenizer.encoder is not None:
        encoder = SpeechTokenizerEncoder(cfg.speech_tokenizer)
        randomize(encoder, gen)
        codec_tensors.update(encoder.state_dict())
    steps.update()
    # The released talker file is bf16, the speech tokenizer fp32; keep both as released.
    save_file(
        {k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},
    )
    del tensors
    steps.update()
    save_file(
        {k: v.contiguous() for k, v in codec_tensors.items()},
        str(out / "speech_tokenizer" / "model.safetensors"),
        metadata={"format": "pt"},
    )
    steps.update()
    steps.close()

    for name, data in configs.items():
        (out / name).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for name in COPIED_FILES:
        if src.has(name):
            src.copy(name, out / name)
    (out / "cadence_random_weights.json").write_text(
        json.dumps({"preset": preset, "seed": seed, "skeleton": str(skeleton), "variant": cfg.tts_model_type}, indent=2)
        + "\n"
    )
    return out


def is_random_checkpoint(path: Path) -> bool:
    return (Path(path) / "cadence_random_weights.json").exists()
