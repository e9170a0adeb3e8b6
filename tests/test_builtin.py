"""`--dummy-weights`: architectures from the shipped files, a directory or the hub; random models in memory."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from cadence.engine.config import EngineConfig
from cadence.engine.engine import Engine
from cadence.models.qwen3_tts import skeletons
from cadence.models.qwen3_tts.builtin import find_architecture
from cadence.models.qwen3_tts.config import Qwen3TTSConfig
from cadence.models.qwen3_tts.frontend import SynthesisRequest
from cadence.models.qwen3_tts.skeletons import (
    ARCHITECTURES,
    KNOWN_CHECKPOINTS,
    as_variant,
    known_checkpoint,
    resolve_skeleton,
    shipped_skeleton,
)
from cadence.models.qwen3_tts.tokenizer import TextTokenizer

UNREACHABLE_HUB = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "1"}


def test_every_shipped_file_exists_with_its_licence():
    for checkpoint in KNOWN_CHECKPOINTS:
        for name, path in checkpoint.files().items():
            assert path.is_file(), f"{checkpoint.name}: {name} missing at {path}"
    notice = (ARCHITECTURES / "NOTICE.md").read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in notice and "huggingface.co/Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice" in notice
    assert "Apache License" in (ARCHITECTURES / "LICENSE").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "Qwen3-TTS-12Hz-0.6B-CustomVoice"),
        ("qwen3-tts-12hz-1.7b-voicedesign", "Qwen3-TTS-12Hz-1.7B-VoiceDesign"),
        ("QWEN/Qwen3-TTS-12Hz-1.7B-Base", "Qwen3-TTS-12Hz-1.7B-Base"),
        ("someone/Qwen3-TTS-12Hz-0.6B-CustomVoice", None),  # a fork: its own files, from the hub
        ("Qwen/Qwen3-TTS-12Hz-0.6B-Nothing", None),
    ],
)
def test_known_checkpoint_names(name, expected):
    known = known_checkpoint(name)
    assert (known.name if known else None) == expected


def test_a_local_directory_wins_over_a_known_name(tmp_path, skeleton_06b, monkeypatch):
    local = tmp_path / "Qwen3-TTS-12Hz-0.6B-CustomVoice"
    shutil.copytree(skeleton_06b, local)
    monkeypatch.chdir(tmp_path)
    assert known_checkpoint("Qwen3-TTS-12Hz-0.6B-CustomVoice") is None
    assert resolve_skeleton("Qwen3-TTS-12Hz-0.6B-CustomVoice").files["config.json"].samefile(local / "config.json")


@pytest.mark.parametrize("checkpoint", KNOWN_CHECKPOINTS, ids=lambda c: c.name)
def test_known_names_give_the_released_architecture_without_the_hub(checkpoint, skeleton_06b, monkeypatch):
    def no_hub(model, patterns=None):
        raise AssertionError(f"asked the hub for {model}")

    monkeypatch.setattr(skeletons, "resolve_checkpoint", no_hub)
    arch = find_architecture(checkpoint.hub_id)
    config = arch.parse()
    assert config.tts_model_type == checkpoint.variant
    assert config.size_label == checkpoint.size
    assert (config.speaker_encoder is not None) == (checkpoint.variant == "base")
    assert bool(config.speakers) == (checkpoint.variant == "custom_voice")
    # the real tokenizer: BPE merges, not one token per byte
    assert arch.tokenizer_dir == str(shipped_skeleton().tokenizer_dir())
    assert arch.tokenizer().encode("Hello from cadence.") == [9707, 504, 19409, 763, 13]


def test_find_architecture_reads_a_directory_and_fills_in_what_it_lacks(skeleton_06b, tmp_path, monkeypatch, caplog):
    for key, value in UNREACHABLE_HUB.items():
        monkeypatch.setenv(key, value)
    from_files = find_architecture(skeleton_06b)
    assert from_files.tokenizer_dir == str(skeleton_06b)
    assert from_files.parse() == Qwen3TTSConfig.from_dir(skeleton_06b)
    released = find_architecture("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice").parse()
    assert find_architecture(tmp_path).parse() == released  # a directory without config files
    assert find_architecture("nobody/no-such-model").parse() == released  # a hub id the hub does not answer
    assert "no config files for 'nobody/no-such-model'" in caplog.text
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    config = as_variant(json.loads((skeleton_06b / "config.json").read_text()), "voice_design")
    (config_only / "config.json").write_text(json.dumps(config))
    arch = find_architecture(config_only)
    assert arch.tokenizer_dir == str(shipped_skeleton().tokenizer_dir())  # the family's tokenizer
    assert arch.parse().tts_model_type == "voice_design" and arch.parse().speech_tokenizer == released.speech_tokenizer


def test_dummy_tokenizer_is_the_real_one(skeleton_06b):
    """The shipped, compressed tokenizer files give the ids of the plain ones."""
    arch = find_architecture("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    assert {p.name for p in shipped_skeleton().files.values()} >= {"vocab.json.gz", "merges.txt.gz"}
    text = "Hello, iPhone 世界! 😀"
    assert arch.tokenizer().encode(text) == TextTokenizer.from_dir(skeleton_06b).encode(text)


def test_tiny_random_model_is_seeded_and_synthesises():
    arch = find_architecture("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice").shrink("tiny")
    a = arch.random_model("cpu", "fp32", seed=3)
    b = arch.random_model("cpu", "fp32", seed=3)
    c = arch.random_model("cpu", "fp32", seed=4)
    pa, pb, pc = (dict(m.talker.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not torch.equal(pa["model.codec_embedding.weight"], pc["model.codec_embedding.weight"])
    assert all(torch.isfinite(p).all() for p in [*a.talker.parameters(), *a.codec.parameters()])
    engine = Engine(a, EngineConfig(max_streams=2, kv_cache_memory=0.01))
    try:
        utt = engine.synthesize_blocking(
            SynthesisRequest("Hello from random weights.", voice="ryan", max_new_tokens=5, ignore_eos=True), timeout=120
        )
    finally:
        engine.close()
    assert utt.frames == 5 and utt.pcm.size == 5 * a.samples_per_frame
    assert utt.pcm.std() > 0  # noise, not silence


@pytest.mark.slow
def test_full_size_random_model_has_the_real_parameter_count():
    model = find_architecture("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice").random_model("cpu", "fp32")
    talker = sum(p.numel() for p in model.talker.parameters())
    assert talker == 905_788_672  # the 402 tensors of the released model.safetensors


def test_a_wheel_carries_every_shipped_file():
    """pyproject.toml's package data names every file under architectures/ (a wheel install has them)."""
    import fnmatch
    import tomllib

    from conftest import REPO

    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = ARCHITECTURES.parent
    shipped = [p.relative_to(package).as_posix() for p in ARCHITECTURES.rglob("*") if p.is_file()]
    assert len(shipped) == 11  # NOTICE.md, LICENSE, 7 files of the 0.6B, 2 of the 1.7B
    for name in shipped:
        matches = [
            g
            for g in patterns["cadence.models.qwen3_tts"]
            if fnmatch.fnmatch(name, g) and g.count("/") == name.count("/")
        ]
        assert matches, f"{name} is not in pyproject.toml's package data"
