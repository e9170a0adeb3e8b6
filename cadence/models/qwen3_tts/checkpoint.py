"""`cadence checkpoint random`: random-weight checkpoints in the official layout.

No weights can be downloaded where cadence is developed, so correctness is proven on checkpoints of
random weights that both cadence and the official package load. The architecture comes from a
*skeleton* (the real config and tokenizer files); a preset may shrink it. Every parameter is drawn
at a scale that keeps signals alive through the stack: Hugging Face's init leaves the codebooks
zero and LayerScale/ConvNeXt/SnakeBeta nearly inert, which would make a decoder test meaningless.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn
from tqdm import tqdm

from ...checkpoints import CheckpointError
from .codec import EuclideanCodebook, LayerScale, ResidualUnit, SnakeBeta, SpeechTokenizer
from .config import Qwen3TTSConfig
from .layers import RMSNorm
from .presets import PRESETS, merge
from .skeletons import resolve_skeleton
from .speaker_encoder import SpeakerEncoderModel
from .speech_encoder import EncoderCodebook, SpeechTokenizerEncoder
from .talker import Qwen3TTSTalkerModel

COPIED_FILES = (
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "speech_tokenizer/preprocessor_config.json",
    "speech_tokenizer/configuration.json",
)


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
