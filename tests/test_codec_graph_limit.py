"""How the Codec partition sizes its CUDA graphs under EngineConfig.codec_graph_stream_frames: the
largest graph a frames bucket gets (on a CPU, where nothing is captured, the same sizing applies).
tests/test_codec_graphs.py runs the split groups on a GPU against the offline decode."""

from __future__ import annotations

import pytest

from cadence.engine.config import EngineConfig
from cadence.models.qwen3_tts.partitions import Qwen3TTSCodec


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (0, {1: 64, 2: 64, 4: 64, 8: 64}),
        (128, {1: 64, 2: 64, 4: 32, 8: 16}),
        (96, {1: 64, 2: 48, 4: 24, 8: 8}),
        (8, {1: 8, 2: 4, 4: 2, 8: 1}),
        (4, {1: 4, 2: 2, 4: 1, 8: 1}),  # every frames bucket keeps at least one stream a graph
    ],
)
def test_largest_graph_per_frames_bucket(tiny_model, limit, expected):
    codec = Qwen3TTSCodec(tiny_model, max_slots=128, graph_stream_frames=limit)
    assert codec.graph_batch == expected


def test_the_default_limit_reaches_the_partition(tiny_model):
    codec = tiny_model.build_codec(EngineConfig(max_streams=128), tiny_model.device, use_graphs=False, own_stream=False)
    assert codec.graph_batch == {1: 64, 2: 64, 4: 32, 8: 16}


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match="codec_graph_stream_frames"):
        EngineConfig(codec_graph_stream_frames=-1)
