"""Presets that shrink an architecture (`--dummy-preset`, `cadence checkpoint random --preset`):
overrides of the checkpoint's config files, as plain dicts."""

from __future__ import annotations

import copy
from typing import Any

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


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict update (objects merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
