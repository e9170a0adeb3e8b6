"""Shared fixtures: random-weight checkpoints built from the real config/tokenizer files.

Those files ship inside the package (cadence/models/qwen3_tts/architectures/: the released
checkpoints' config.json, generation_config.json, tokenizer and speech-tokenizer files), so the
suite needs nothing beside the repository. A missing one fails the tests that need it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from cadence.models.qwen3_tts.skeletons import KNOWN_CHECKPOINTS, Skeleton, shipped_skeleton

REPO = Path(__file__).resolve().parents[1]
CHECKPOINTS = {c.name: c for c in KNOWN_CHECKPOINTS}

torch.set_num_threads(min(4, os.cpu_count() or 1))


def shipped(name: str) -> Skeleton:
    """The shipped files of a released checkpoint; a test that needs a missing one fails."""
    try:
        return shipped_skeleton(CHECKPOINTS[name])
    except FileNotFoundError as e:
        pytest.fail(str(e))


def set_transformers_version(path: Path, version: str) -> None:
    """The official tokenizer swaps its regex for local dirs saying 4.57.3; 4.57.2 keeps Qwen2's."""
    cfg = json.loads((path / "config.json").read_text())
    cfg["transformers_version"] = version
    (path / "config.json").write_text(json.dumps(cfg, indent=2))


@pytest.fixture(scope="session")
def skeleton_06b(tmp_path_factory) -> Path:
    """The released 0.6B CustomVoice's config and tokenizer files as a checkpoint directory (the
    shipped files written out, the compressed tokenizer files decompressed; read only)."""
    return shipped("Qwen3-TTS-12Hz-0.6B-CustomVoice").write(tmp_path_factory.mktemp("skeleton-0.6b"))


@pytest.fixture(scope="session")
def skeleton_17b(tmp_path_factory) -> Path:
    """The released 1.7B CustomVoice's config files with the family's tokenizer files, as a directory."""
    return shipped("Qwen3-TTS-12Hz-1.7B-CustomVoice").write(tmp_path_factory.mktemp("skeleton-1.7b"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, skeleton_06b) -> Path:
    """Tiny random 0.6B-shaped checkpoint; config says transformers 4.57.3 (official: Mistral regex)."""
    from cadence.models.qwen3_tts.checkpoint import write_random_checkpoint

    return write_random_checkpoint(skeleton_06b, tmp_path_factory.mktemp("tiny"), "tiny", seed=0, progress=False)


@pytest.fixture(scope="session")
def tiny_base_checkpoint(tmp_path_factory, skeleton_06b) -> Path:
    """Tiny random 0.6B Base (voice cloning): spk_id {}, a speaker encoder, the codec encoder."""
    from cadence.models.qwen3_tts.checkpoint import write_random_checkpoint

    out = tmp_path_factory.mktemp("tiny-base")
    return write_random_checkpoint(skeleton_06b, out, "tiny", seed=2, progress=False, variant="base")


@pytest.fixture(scope="session")
def tiny_voice_design_checkpoint(tmp_path_factory, skeleton_17b) -> Path:
    """Tiny random 1.7B VoiceDesign (a talker wider than its code predictor, no speakers)."""
    from cadence.models.qwen3_tts.checkpoint import write_random_checkpoint

    out = tmp_path_factory.mktemp("tiny-voice-design")
    return write_random_checkpoint(skeleton_17b, out, "tiny", seed=4, progress=False, variant="voice_design")


@pytest.fixture(scope="session")
def tiny_17b_checkpoint(tmp_path_factory, skeleton_17b) -> Path:
    """Tiny random 1.7B CustomVoice (instructions reach the prompt)."""
    from cadence.models.qwen3_tts.checkpoint import write_random_checkpoint

    return write_random_checkpoint(skeleton_17b, tmp_path_factory.mktemp("tiny-17b"), "tiny", seed=3, progress=False)


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint):
    from cadence.models.qwen3_tts import Qwen3TTS

    return Qwen3TTS.from_pretrained(tiny_checkpoint, "cpu", "fp32")


@pytest.fixture(scope="module")
def small_op_cpu_settings():
    """For modules of tiny-codec ops (`pytestmark = pytest.mark.usefixtures("small_op_cpu_settings")`):
    the ops are too small to gain from these CPU features, and here they cost: oneDNN builds a conv
    primitive for every new input shape (chunk schedules make dozens), and a second intra-op thread
    spins at barriers when other jobs share the 2 cores (20x slower seen)."""
    mkldnn, threads = torch.backends.mkldnn.enabled, torch.get_num_threads()
    torch.backends.mkldnn.enabled = False
    torch.set_num_threads(1)
    yield
    torch.backends.mkldnn.enabled = mkldnn
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def decoder(tiny_model):
    """The tiny model's fp32 codec decoder (a CodecDecoder)."""
    return tiny_model.codec.decoder


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def ops():
    """The Triton kernels and their PyTorch definitions, for the kernel tests (kernel_checks.py)."""
    from cadence.kernels.ops import load_ops

    return load_ops("triton"), load_ops("torch")
