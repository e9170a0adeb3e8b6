"""Checkpoint config parsing: the real 0.6B/1.7B files give the checkpoint's values, every value comes
from the files (the official Python class defaults are Qwen3-Omni leftovers), and unsupported
variants are refused with a message naming what is supported."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from cadence.models.qwen3_tts.config import ConfigError, Qwen3TTSConfig, UnsupportedModelError
from cadence.models.qwen3_tts.skeletons import as_variant

LANGUAGE_IDS = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
    "beijing_dialect": 2074,
    "sichuan_dialect": 2062,
}
SPEAKER_IDS = {
    "serena": 3066,
    "vivian": 3065,
    "uncle_fu": 3010,
    "ryan": 3061,
    "aiden": 2861,
    "ono_anna": 2873,
    "sohee": 2864,
    "eric": 2875,
    "dylan": 2878,
}


def _files(skeleton: Path) -> dict[str, dict[str, Any]]:
    """The three JSON files of a checkpoint directory, as plain dicts to mutate."""
    names = ("config.json", "speech_tokenizer/config.json", "generation_config.json")
    return {name: json.loads((skeleton / name).read_text(encoding="utf-8")) for name in names}


def _parse(files: dict[str, dict[str, Any]]) -> Qwen3TTSConfig:
    return Qwen3TTSConfig.from_dicts(
        files["config.json"], files["speech_tokenizer/config.json"], files["generation_config.json"]
    )


@pytest.fixture(scope="module")
def files_06b(skeleton_06b) -> dict[str, dict[str, Any]]:
    return _files(skeleton_06b)


@pytest.fixture(scope="module")
def cfg_06b(skeleton_06b) -> Qwen3TTSConfig:
    return Qwen3TTSConfig.from_dir(skeleton_06b)


@pytest.fixture(scope="module")
def cfg_17b(skeleton_17b) -> Qwen3TTSConfig:
    return Qwen3TTSConfig.from_dir(skeleton_17b)


def test_06b_talker_values(cfg_06b):
    t = cfg_06b.talker
    assert cfg_06b.tts_model_type == "custom_voice"
    assert cfg_06b.tts_model_size == "0b6"
    assert (t.hidden_size, t.intermediate_size, t.num_hidden_layers) == (1024, 3072, 28)
    # head_dim is 128, not hidden/heads = 64: the official class default would get this wrong.
    assert (t.num_attention_heads, t.num_key_value_heads, t.head_dim) == (16, 8, 128)
    assert t.rms_norm_eps == 1e-6
    assert t.rope_theta == 1_000_000.0
    assert (t.vocab_size, t.text_vocab_size, t.text_hidden_size, t.num_code_groups) == (3072, 151936, 2048, 16)
    assert t.suppressed_code0_range == (2048, 3072)


def test_06b_code_predictor_values(cfg_06b):
    cp = cfg_06b.talker.code_predictor
    assert (cp.hidden_size, cp.intermediate_size, cp.num_hidden_layers) == (1024, 3072, 5)
    assert (cp.num_attention_heads, cp.num_key_value_heads, cp.head_dim) == (16, 8, 128)
    # The official Python default is 32 code groups; the file says 16.
    assert (cp.vocab_size, cp.num_code_groups) == (2048, 16)
    assert cp.rope_theta == 1_000_000.0


def test_06b_token_ids(cfg_06b):
    t = cfg_06b.talker
    # Qwen3-Omni defaults are 4196...; these are the checkpoint's.
    assert (t.codec_pad_id, t.codec_bos_id, t.codec_eos_token_id) == (2148, 2149, 2150)
    assert (t.codec_think_id, t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id) == (
        2154,
        2155,
        2156,
        2157,
    )
    assert (cfg_06b.im_start_token_id, cfg_06b.im_end_token_id, cfg_06b.assistant_token_id) == (151644, 151645, 77091)
    assert (cfg_06b.tts_pad_token_id, cfg_06b.tts_bos_token_id, cfg_06b.tts_eos_token_id) == (151671, 151672, 151673)


def test_06b_speakers_languages_and_dialects(cfg_06b):
    t = cfg_06b.talker
    assert t.spk_id == SPEAKER_IDS
    assert t.codec_language_id == LANGUAGE_IDS
    assert t.spk_is_dialect["eric"] == "sichuan_dialect"
    assert t.spk_is_dialect["dylan"] == "beijing_dialect"
    assert all(t.spk_is_dialect[s] is False for s in SPEAKER_IDS if s not in ("eric", "dylan"))
    assert cfg_06b.speakers == sorted(SPEAKER_IDS)
    # Dialects are reached only through their speakers, never requested as a language.
    assert cfg_06b.languages == ["auto"] + sorted(k for k in LANGUAGE_IDS if "dialect" not in k)
    assert len(cfg_06b.languages) == 11
    assert not cfg_06b.supports_instruct


def test_06b_generation_defaults_come_from_generation_config(cfg_06b):
    g = cfg_06b.generation
    assert g.do_sample is True
    assert (g.temperature, g.top_k, g.top_p, g.repetition_penalty) == (0.9, 50, 1.0, 1.05)
    assert (g.subtalker_dosample, g.subtalker_temperature, g.subtalker_top_k, g.subtalker_top_p) == (True, 0.9, 50, 1.0)
    # The wrapper's hard default is 2048; generation_config.json says 8192.
    assert g.max_new_tokens == 8192


def test_06b_codec_values(cfg_06b):
    st = cfg_06b.speech_tokenizer
    d = st.decoder
    assert st.model_type == "qwen3_tts_tokenizer_12hz"
    assert cfg_06b.sample_rate == 24000
    assert cfg_06b.samples_per_frame == d.samples_per_frame == 1920
    assert d.sliding_window == 72
    assert (d.codebook_size, d.codebook_dim, d.num_quantizers, d.num_semantic_quantizers) == (2048, 512, 16, 1)
    assert (d.hidden_size, d.intermediate_size, d.num_hidden_layers) == (512, 1024, 8)
    assert (d.num_attention_heads, d.num_key_value_heads, d.head_dim) == (16, 16, 64)
    assert (d.latent_dim, d.decoder_dim) == (1024, 1536)
    assert d.rope_theta == 10000.0
    assert d.rms_norm_eps == 1e-5
    assert d.upsample_rates == (8, 5, 4, 3)
    assert d.upsampling_ratios == (2, 2)


def test_17b_differs_only_in_width_and_size(cfg_06b, cfg_17b):
    t, cp = cfg_17b.talker, cfg_17b.talker.code_predictor
    assert cfg_17b.tts_model_size == "1b7"
    assert cfg_17b.supports_instruct
    assert (t.hidden_size, t.intermediate_size) == (2048, 6144)
    # The code predictor stays 1024 wide: the talker's 2048 is projected down (small_to_mtp_projection).
    assert (cp.hidden_size, cp.intermediate_size) == (1024, 3072)
    assert (t.num_hidden_layers, t.num_attention_heads, t.num_key_value_heads, t.head_dim) == (28, 16, 8, 128)
    assert t.spk_id == cfg_06b.talker.spk_id
    assert t.codec_language_id == cfg_06b.talker.codec_language_id
    assert t.spk_is_dialect == cfg_06b.talker.spk_is_dialect
    assert cfg_17b.generation == cfg_06b.generation


# (file, dotted JSON path, new value, dotted path to read it back from the parsed config). Each of
# these has a wrong default somewhere (official classes, or a "natural" guess): changing the file
# must show up in the parsed config.
CFG, ST, GEN = "config.json", "speech_tokenizer/config.json", "generation_config.json"
MUTATIONS: list[tuple[str, str, Any, str]] = [
    (CFG, "talker_config.hidden_size", 1536, "talker.hidden_size"),
    (CFG, "talker_config.intermediate_size", 4096, "talker.intermediate_size"),
    (CFG, "talker_config.num_hidden_layers", 20, "talker.num_hidden_layers"),
    (CFG, "talker_config.num_attention_heads", 32, "talker.num_attention_heads"),
    (CFG, "talker_config.num_key_value_heads", 4, "talker.num_key_value_heads"),
    (CFG, "talker_config.head_dim", 64, "talker.head_dim"),
    (CFG, "talker_config.rms_norm_eps", 1e-5, "talker.rms_norm_eps"),
    (CFG, "talker_config.rope_theta", 10000, "talker.rope_theta"),
    (CFG, "talker_config.vocab_size", 4096, "talker.vocab_size"),
    (CFG, "talker_config.text_vocab_size", 152000, "talker.text_vocab_size"),
    (CFG, "talker_config.text_hidden_size", 1024, "talker.text_hidden_size"),
    (CFG, "talker_config.num_code_groups", 8, "talker.num_code_groups"),
    (CFG, "talker_config.codec_pad_id", 4196, "talker.codec_pad_id"),
    (CFG, "talker_config.codec_bos_id", 4197, "talker.codec_bos_id"),
    (CFG, "talker_config.codec_eos_token_id", 4198, "talker.codec_eos_token_id"),
    (CFG, "talker_config.codec_think_id", 4202, "talker.codec_think_id"),
    (CFG, "talker_config.codec_nothink_id", 4203, "talker.codec_nothink_id"),
    (CFG, "talker_config.codec_think_bos_id", 4204, "talker.codec_think_bos_id"),
    (CFG, "talker_config.codec_think_eos_id", 4205, "talker.codec_think_eos_id"),
    (CFG, "talker_config.codec_language_id.english", 1, "talker.codec_language_id.english"),
    (CFG, "talker_config.spk_id.ryan", 3000, "talker.spk_id.ryan"),
    (CFG, "talker_config.spk_is_dialect.ryan", "sichuan_dialect", "talker.spk_is_dialect.ryan"),
    (CFG, "talker_config.code_predictor_config.hidden_size", 512, "talker.code_predictor.hidden_size"),
    (CFG, "talker_config.code_predictor_config.num_hidden_layers", 3, "talker.code_predictor.num_hidden_layers"),
    (CFG, "talker_config.code_predictor_config.vocab_size", 1024, "talker.code_predictor.vocab_size"),
    (CFG, "talker_config.code_predictor_config.num_code_groups", 32, "talker.code_predictor.num_code_groups"),
    (CFG, "talker_config.code_predictor_config.head_dim", 64, "talker.code_predictor.head_dim"),
    (CFG, "tts_model_size", "1b7", "tts_model_size"),
    (CFG, "tts_pad_token_id", 151000, "tts_pad_token_id"),
    (CFG, "tts_bos_token_id", 151001, "tts_bos_token_id"),
    (CFG, "tts_eos_token_id", 151002, "tts_eos_token_id"),
    (CFG, "im_start_token_id", 151003, "im_start_token_id"),
    (CFG, "im_end_token_id", 151004, "im_end_token_id"),
    (CFG, "assistant_token_id", 151005, "assistant_token_id"),
    (ST, "output_sample_rate", 16000, "sample_rate"),
    (ST, "decoder_config.sliding_window", 40, "speech_tokenizer.decoder.sliding_window"),
    (ST, "decoder_config.codebook_dim", 256, "speech_tokenizer.decoder.codebook_dim"),
    (ST, "decoder_config.head_dim", 32, "speech_tokenizer.decoder.head_dim"),
    (ST, "decoder_config.num_hidden_layers", 4, "speech_tokenizer.decoder.num_hidden_layers"),
    (ST, "decoder_config.rope_theta", 500, "speech_tokenizer.decoder.rope_theta"),
    (ST, "decoder_config.layer_scale_initial_scale", 0.5, "speech_tokenizer.decoder.layer_scale_initial_scale"),
    (ST, "decoder_config.num_semantic_quantizers", 2, "speech_tokenizer.decoder.num_semantic_quantizers"),
    (ST, "decoder_config.decoder_dim", 768, "speech_tokenizer.decoder.decoder_dim"),
    (GEN, "max_new_tokens", 100, "generation.max_new_tokens"),
    (GEN, "temperature", 0.5, "generation.temperature"),
    (GEN, "top_k", 7, "generation.top_k"),
    (GEN, "top_p", 0.8, "generation.top_p"),
    (GEN, "repetition_penalty", 1.3, "generation.repetition_penalty"),
    (GEN, "do_sample", False, "generation.do_sample"),
    (GEN, "subtalker_dosample", False, "generation.subtalker_dosample"),
    (GEN, "subtalker_temperature", 0.3, "generation.subtalker_temperature"),
    (GEN, "subtalker_top_k", 3, "generation.subtalker_top_k"),
    (GEN, "subtalker_top_p", 0.7, "generation.subtalker_top_p"),
]


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        data = data[key]
    assert last in data, f"test premise: {path} exists in the real file"
    data[last] = value


def _read(cfg: Qwen3TTSConfig, path: str) -> Any:
    value: Any = cfg
    for key in path.split("."):
        value = value[key] if isinstance(value, dict) else getattr(value, key)
    return value


@pytest.mark.parametrize(("file", "path", "value", "read"), MUTATIONS, ids=[m[1] for m in MUTATIONS])
def test_every_value_comes_from_the_files(files_06b, file, path, value, read):
    assert _read(_parse(files_06b), read) != value, "test premise: the mutation changes the value"
    mutated = copy.deepcopy(files_06b)
    _set(mutated[file], path, value)
    assert _read(_parse(mutated), read) == value


def test_upsampling_factors_come_from_the_file(files_06b):
    # samples_per_frame is derived from the file's factors, and cross-checked with decode_upsample_rate.
    mutated = copy.deepcopy(files_06b)
    mutated["speech_tokenizer/config.json"]["decoder_config"]["upsample_rates"] = [8, 5, 4, 2]
    mutated["speech_tokenizer/config.json"]["decode_upsample_rate"] = 1280
    cfg = _parse(mutated)
    assert cfg.samples_per_frame == cfg.speech_tokenizer.decoder.samples_per_frame == 1280
    # Inconsistent factors are an error, not a silently wrong frame size.
    mutated["speech_tokenizer/config.json"]["decode_upsample_rate"] = 1920
    with pytest.raises(ConfigError, match="decode_upsample_rate"):
        _parse(mutated)


def test_missing_generation_config_uses_wrapper_defaults(files_06b):
    # The official wrapper's hard defaults (max_new_tokens 2048) apply only when the file is absent.
    cfg = Qwen3TTSConfig.from_dicts(files_06b["config.json"], files_06b["speech_tokenizer/config.json"], None)
    assert cfg.generation.max_new_tokens == 2048
    assert cfg.generation.temperature == 0.9


@pytest.mark.parametrize(
    ("file", "path", "where"),
    [
        (CFG, "tts_bos_token_id", "config.json"),
        (CFG, "talker_config.head_dim", "config.json.talker_config"),
        (CFG, "talker_config.codec_language_id", "config.json.talker_config"),
        (CFG, "talker_config.code_predictor_config.vocab_size", "talker_config.code_predictor_config"),
        (ST, "decoder_config.codebook_dim", "speech_tokenizer/config.json.decoder_config"),
        (ST, "output_sample_rate", "speech_tokenizer/config.json"),
    ],
)
def test_missing_field_names_file_and_key(files_06b, file, path, where):
    mutated = copy.deepcopy(files_06b)
    *parents, last = path.split(".")
    parent = mutated[file]
    for key in parents:
        parent = parent[key]
    del parent[last]
    with pytest.raises(ConfigError) as e:
        _parse(mutated)
    assert where in str(e.value)
    assert f"'{last}'" in str(e.value)


def test_missing_file_is_named(skeleton_06b, tmp_path):
    shutil.copytree(skeleton_06b, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "speech_tokenizer" / "config.json").unlink()
    with pytest.raises(ConfigError, match=r"config\.json not found in .*speech_tokenizer"):
        Qwen3TTSConfig.from_dir(tmp_path / "ckpt")


def test_invalid_json_is_named(skeleton_06b, tmp_path):
    shutil.copytree(skeleton_06b, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        Qwen3TTSConfig.from_dir(tmp_path / "ckpt")


def test_unknown_model_type_is_refused_naming_what_is_supported(files_06b):
    mutated = copy.deepcopy(files_06b)
    mutated["config.json"]["tts_model_type"] = "voice_conversion"
    with pytest.raises(UnsupportedModelError) as e:
        _parse(mutated)
    message = str(e.value)
    assert "voice_conversion" in message
    assert all(kind in message for kind in ("custom_voice", "base", "voice_design"))
    # Callers that catch configuration errors in general catch this too.
    assert isinstance(e.value, ConfigError)


@pytest.mark.parametrize("skeleton", ["skeleton_06b", "skeleton_17b"])
def test_base_and_voice_design_variants_parse(request, skeleton):
    files = _files(request.getfixturevalue(skeleton))
    hidden = files["config.json"]["talker_config"]["hidden_size"]
    base = _parse({**files, "config.json": as_variant(files["config.json"], "base")})
    assert base.tts_model_type == "base" and base.speakers == [] and base.can_clone
    # The released Base config gives only enc_dim and sample_rate; the rest are the class defaults.
    assert base.speaker_encoder.enc_dim == hidden and base.speaker_encoder.sample_rate == 24000
    assert base.speaker_encoder.enc_channels == (512, 512, 512, 512, 1536)
    assert base.speaker_encoder.enc_kernel_sizes == (5, 3, 3, 3, 1)
    assert base.speaker_encoder.enc_dilations == (1, 2, 3, 4, 1)
    assert not base.supports_instruct
    design = _parse({**files, "config.json": as_variant(files["config.json"], "voice_design")})
    assert design.tts_model_type == "voice_design" and design.speakers == [] and not design.can_clone
    assert design.speaker_encoder is None and design.supports_instruct
    # The language table is the same in every variant.
    assert base.languages == design.languages == _parse(files).languages


def test_speech_tokenizer_encoder_values(cfg_06b):
    """The released encoder_config plus the Mimi defaults it relies on (research notes §3)."""
    st = cfg_06b.speech_tokenizer
    enc = st.encoder
    assert (st.input_sample_rate, st.encode_downsample_rate, st.encoder_valid_num_quantizers) == (24000, 1920, 16)
    assert (enc.hidden_size, enc.num_hidden_layers, enc.num_attention_heads, enc.head_dim) == (512, 8, 8, 64)
    assert (enc.intermediate_size, enc.num_quantizers, enc.codebook_size, enc.codebook_dim) == (2048, 32, 2048, 256)
    assert enc.upsampling_ratios == (8, 6, 5, 4) and enc.num_filters == 64 and enc.frame_rate == 12.5
    assert (enc.hop_length, enc.downsample_kernel, enc.samples_per_frame) == (960, 4, 1920)  # 25 Hz, halved
    assert (enc.kernel_size, enc.last_kernel_size, enc.residual_kernel_size, enc.compress) == (7, 3, 3, 2)
    assert enc.vector_quantization_hidden_dimension == 256 and enc.pad_mode == "constant"


def test_base_speaker_encoder_must_match_the_talker_width(files_06b):
    config = as_variant(files_06b["config.json"], "base")
    config["speaker_encoder_config"]["enc_dim"] = 2048
    with pytest.raises(ConfigError, match="enc_dim 2048 must equal the talker's hidden_size 1024"):
        _parse({**files_06b, "config.json": config})
    del config["speaker_encoder_config"]
    with pytest.raises(ConfigError, match="speaker_encoder_config"):
        _parse({**files_06b, "config.json": config})


def test_encoder_rate_must_match_the_declared_rate(files_06b):
    mutated = copy.deepcopy(files_06b)
    mutated["speech_tokenizer/config.json"]["encoder_config"]["upsampling_ratios"] = [8, 6, 5, 2]
    with pytest.raises(ConfigError, match="one frame per 960 samples at 24000 Hz; encode_downsample_rate says 1920"):
        _parse(mutated)


def test_25hz_tokenizer_is_refused(files_06b):
    mutated = copy.deepcopy(files_06b)
    mutated["config.json"]["tokenizer_type"] = "qwen3_tts_tokenizer_25hz"
    with pytest.raises(UnsupportedModelError, match="qwen3_tts_tokenizer_12hz"):
        _parse(mutated)
    # The speech tokenizer's own config is checked too (a 12 Hz talker beside a 25 Hz codec).
    mutated = copy.deepcopy(files_06b)
    mutated["speech_tokenizer/config.json"]["model_type"] = "qwen3_tts_tokenizer_25hz"
    with pytest.raises(UnsupportedModelError, match="qwen3_tts_tokenizer_25hz"):
        _parse(mutated)


def test_non_default_rope_is_refused(files_06b):
    # 1-D RoPE is exact only for the default rope type; anything else must not load silently.
    mutated = copy.deepcopy(files_06b)
    mutated["config.json"]["talker_config"]["rope_scaling"]["rope_type"] = "yarn"
    with pytest.raises(ConfigError, match="yarn"):
        _parse(mutated)


def test_sliding_window_talker_is_refused(files_06b):
    files = copy.deepcopy(files_06b)
    files["config.json"]["talker_config"]["use_sliding_window"] = True
    with pytest.raises(ConfigError, match="use_sliding_window"):
        _parse(files)


def test_dialect_missing_from_language_table_is_named(files_06b):
    files = copy.deepcopy(files_06b)
    files["config.json"]["talker_config"]["spk_is_dialect"]["eric"] = "cantonese_dialect"
    with pytest.raises(ConfigError, match="eric.*cantonese_dialect"):
        _parse(files)
