"""`--dummy-weights`: architectures from config files or the built-in description, random models in memory."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from cadence.engine.config import EngineConfig
from cadence.engine.engine import Engine, SynthesisRequest
from cadence.models.qwen3_tts.builtin import (
    BUILTIN_SOURCE,
    FIRST_ADDED_ID,
    builtin_architecture,
    byte_alphabet,
    byte_level_tokenizer,
    find_architecture,
)
from cadence.models.qwen3_tts.config import Qwen3TTSConfig
from cadence.models.qwen3_tts.prompt import assistant_text


def test_builtin_config_equals_the_reference_files(skeleton_06b):
    assert builtin_architecture().parse() == Qwen3TTSConfig.from_dir(skeleton_06b)


def test_byte_alphabet_has_the_real_ids_of_the_256_byte_tokens(skeleton_06b):
    vocab = json.loads((skeleton_06b / "vocab.json").read_text(encoding="utf-8"))
    alphabet = byte_alphabet()
    assert len(set(alphabet)) == 256
    assert [vocab[ch] for ch in alphabet] == list(range(256))


def test_byte_level_tokenizer_keeps_special_ids_and_the_prompt_layout(skeleton_06b):
    tokenizer_config = json.loads((skeleton_06b / "tokenizer_config.json").read_text(encoding="utf-8"))
    added = tokenizer_config["added_tokens_decoder"]
    tok = byte_level_tokenizer()
    assert sorted(int(i) for i in added) == list(range(FIRST_ADDED_ID, FIRST_ADDED_ID + len(added)))
    for token_id, spec in added.items():
        assert tok.token_to_id(spec["content"]) == int(token_id), spec["content"]
    ids = tok.encode(assistant_text("Hé<tts_pad>"))
    # The prompt builder slices by position: role prefix, text, then the 5-token suffix.
    assert ids[:3] == [151644, 77091, 198]
    assert ids[-5:] == [151645, 198, 151644, 77091, 198]
    assert ids[3:-5] == [39, 127, 102, 151671]  # "H", the two bytes of "é" (0xC3 0xA9), <tts_pad>
    assert tok.decode(ids[3:-5]) == "Hé<tts_pad>"


def test_find_architecture_reads_files_and_falls_back(skeleton_06b, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from_files = find_architecture(skeleton_06b)
    assert from_files.tokenizer_dir == str(skeleton_06b)
    assert from_files.parse() == Qwen3TTSConfig.from_dir(skeleton_06b)
    assert find_architecture(tmp_path).source == BUILTIN_SOURCE  # a directory without config files
    assert find_architecture("nobody/no-such-model").source == BUILTIN_SOURCE  # offline hub id
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    shutil.copyfile(skeleton_06b / "config.json", config_only / "config.json")
    arch = find_architecture(config_only)
    assert arch.tokenizer_dir is None and arch.parse().talker == builtin_architecture().parse().talker


def test_tiny_random_model_is_seeded_and_synthesises():
    arch = builtin_architecture().shrink("tiny")
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
def test_full_size_builtin_model_has_the_real_parameter_count():
    model = builtin_architecture().random_model("cpu", "fp32")
    talker = sum(p.numel() for p in model.talker.parameters())
    assert talker == 905_788_672  # research/qwen3tts_model.md §2: the 402 tensors of model.safetensors
