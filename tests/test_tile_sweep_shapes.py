"""benchmarks/skinny_linear.py sweeps the GEMM tiles on a model size's decode shapes: those shapes
must be every projection a decode walk of that size runs, as the shipped architecture gives them,
or a sweep would tune tiles for weights the model does not have."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURES = REPO / "cadence" / "models" / "qwen3_tts" / "architectures"
sys.path.insert(0, str(REPO / "benchmarks"))
import skinny_linear  # noqa: E402


def projections(config: dict) -> set[tuple[int, int]]:
    """(N, K) of a decoder's projections: fused QKV, O, fused gate/up, down, and its output head."""
    h, heads, kv_heads, d = (
        config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")
    )
    i = config["intermediate_size"]
    return {((heads + 2 * kv_heads) * d, h), (h, heads * d), (2 * i, h), (h, i), (config["vocab_size"], h)}


@pytest.mark.parametrize("size", ["0.6b", "1.7b"])
def test_the_sweep_covers_each_projection_of_the_decode_walk(size):
    name = f"Qwen3-TTS-12Hz-{size.upper()}-CustomVoice"
    talker = json.loads((ARCHITECTURES / name / "config.json").read_text())["talker_config"]
    predictor = talker["code_predictor_config"]
    expected = projections(talker) | projections(predictor)
    if talker["hidden_size"] != predictor["hidden_size"]:  # the talker's states projected into the predictor
        expected.add((predictor["hidden_size"], talker["hidden_size"]))
    assert set(skinny_linear.SHAPES[size]) == expected
    assert all(count >= 1 for count in skinny_linear.SHAPES[size].values())
