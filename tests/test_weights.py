"""Weight loading: single file and sharded index, verification (missing / unexpected / wrong shape),
the codec's skipped encoder, dtypes, checkpoint resolution (paths, hub ids offline), 1.7B vs 0.6B."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from cadence.checkpoints import CheckpointError, resolve_checkpoint
from cadence.models.qwen3_tts import Qwen3TTS, Qwen3TTSConfig
from cadence.models.qwen3_tts.codec import SpeechTokenizer
from cadence.models.qwen3_tts.talker import Qwen3TTSTalkerModel
from cadence.weights import load_weights, safetensors_files

REPO = Path(__file__).resolve().parents[1]


def write_shards(tensors: dict[str, torch.Tensor], directory: Path, stem: str, parts: int) -> None:
    """`{stem}-0000i-of-0000n.safetensors` files plus the `{stem}.safetensors.index.json` that maps keys to them."""
    keys = sorted(tensors)
    weight_map = {}
    for i in range(parts):
        name = f"{stem}-{i + 1:05d}-of-{parts:05d}.safetensors"
        chunk = {k: tensors[k].contiguous() for k in keys[i::parts]}
        save_file(chunk, str(directory / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(chunk, name))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / f"{stem}.safetensors.index.json").write_text(json.dumps(index, indent=2))


def copy_without_weights(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    return dst


@pytest.fixture(scope="module")
def cfg(tiny_checkpoint) -> Qwen3TTSConfig:
    return Qwen3TTSConfig.from_dir(tiny_checkpoint)


@pytest.fixture(scope="module")
def talker_tensors(tiny_checkpoint) -> dict[str, torch.Tensor]:
    return load_file(str(tiny_checkpoint / "model.safetensors"))


@pytest.fixture(scope="module")
def codec_tensors(tiny_checkpoint) -> dict[str, torch.Tensor]:
    return load_file(str(tiny_checkpoint / "speech_tokenizer" / "model.safetensors"))


def meta_talker(cfg: Qwen3TTSConfig) -> nn.Module:
    with torch.device("meta"):
        return Qwen3TTSTalkerModel(cfg)


def meta_codec(cfg: Qwen3TTSConfig) -> nn.Module:
    with torch.device("meta"):
        return SpeechTokenizer(cfg.speech_tokenizer.decoder)


def load_talker(cfg, tensors: dict[str, torch.Tensor], tmp_path: Path) -> nn.Module:
    file = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(file))
    return load_weights(meta_talker(cfg), [file], "cpu", torch.float32)


# -- what gets loaded -------------------------------------------------------------------------------


def test_loaded_values_equal_the_files(tiny_model, talker_tensors, codec_tensors):
    talker = {f"talker.{k}": v for k, v in tiny_model.talker.state_dict().items()}
    assert talker.keys() == talker_tensors.keys()
    for key, value in talker_tensors.items():
        assert torch.equal(talker[key], value.float()), key
    codec = tiny_model.codec.state_dict()
    assert codec.keys() == {k for k in codec_tensors if not k.startswith("encoder.")}
    for key, value in codec.items():
        assert torch.equal(value, codec_tensors[key]), key
    for p in [*tiny_model.talker.parameters(), *tiny_model.codec.parameters()]:
        assert p.device.type == "cpu" and not p.requires_grad


def test_sharded_index_loads_identically(tiny_checkpoint, tiny_model, talker_tensors, codec_tensors, tmp_path):
    sharded = copy_without_weights(tiny_checkpoint, tmp_path / "sharded")
    write_shards(talker_tensors, sharded, "model", 3)
    write_shards(codec_tensors, sharded / "speech_tokenizer", "model", 2)
    assert len(safetensors_files(sharded)) == 3
    assert len(safetensors_files(sharded / "speech_tokenizer")) == 2
    model = Qwen3TTS.from_pretrained(sharded, "cpu", "fp32")
    for mine, ref in [(model.talker, tiny_model.talker), (model.codec, tiny_model.codec)]:
        a, b = mine.state_dict(), ref.state_dict()
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


def test_index_naming_a_missing_shard(tiny_checkpoint, talker_tensors, tmp_path):
    sharded = copy_without_weights(tiny_checkpoint, tmp_path / "sharded")
    write_shards(talker_tensors, sharded, "model", 2)
    (sharded / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors"):
        safetensors_files(sharded)


def test_no_weights_at_all(tiny_checkpoint, tmp_path):
    empty = copy_without_weights(tiny_checkpoint, tmp_path / "empty")
    with pytest.raises(CheckpointError, match=r"no model\.safetensors or model\.safetensors\.index\.json"):
        safetensors_files(empty)


# -- verification ------------------------------------------------------------------------------------

KEY = "talker.model.layers.1.self_attn.k_proj.weight"


def test_missing_key_is_named(cfg, talker_tensors, tmp_path):
    tensors = {k: v for k, v in talker_tensors.items() if k != KEY}
    with pytest.raises(CheckpointError) as e:
        load_talker(cfg, tensors, tmp_path)
    assert "missing from the checkpoint" in str(e.value)
    assert KEY in str(e.value)


def test_many_missing_keys_are_summarised(cfg, talker_tensors, tmp_path):
    tensors = {k: v for k, v in talker_tensors.items() if ".layers.1." not in k}
    missing = len(talker_tensors) - len(tensors)
    assert missing > 12
    with pytest.raises(CheckpointError, match=rf"\.\.\. and {missing - 12} more"):
        load_talker(cfg, tensors, tmp_path)


def test_unexpected_key_is_named(cfg, talker_tensors, tmp_path):
    extra = "talker.model.layers.1.self_attn.extra_proj.weight"
    tensors = {**talker_tensors, extra: torch.zeros(4, 4, dtype=torch.bfloat16)}
    with pytest.raises(CheckpointError) as e:
        load_talker(cfg, tensors, tmp_path)
    assert "not part of the model" in str(e.value)
    assert extra in str(e.value)


def test_wrong_shape_is_named(cfg, talker_tensors, tmp_path):
    wrong = talker_tensors[KEY][:-1]
    with pytest.raises(CheckpointError) as e:
        load_talker(cfg, {**talker_tensors, KEY: wrong}, tmp_path)
    message = str(e.value)
    assert "shape mismatch" in message
    assert f"{KEY}: file {tuple(wrong.shape)} vs model {tuple(talker_tensors[KEY].shape)}" in message
    # A mismatched key is reported once, as a mismatch, not also as missing.
    assert "missing" not in message


def test_all_problems_reported_together(cfg, talker_tensors, tmp_path):
    other = "talker.codec_head.weight"
    tensors = {k: v for k, v in talker_tensors.items() if k != other}
    tensors["talker.bogus"] = torch.zeros(1)
    tensors[KEY] = talker_tensors[KEY][:, :-1]
    with pytest.raises(CheckpointError) as e:
        load_talker(cfg, tensors, tmp_path)
    for part in (other, "talker.bogus", KEY):
        assert part in str(e.value)


def test_mismatch_through_from_pretrained(tiny_checkpoint, talker_tensors, tmp_path):
    broken = copy_without_weights(tiny_checkpoint, tmp_path / "broken")
    shutil.copytree(tiny_checkpoint / "speech_tokenizer", broken / "speech_tokenizer", dirs_exist_ok=True)
    save_file({k: v for k, v in talker_tensors.items() if k != KEY}, str(broken / "model.safetensors"))
    with pytest.raises(CheckpointError, match=KEY.replace(".", r"\.")):
        Qwen3TTS.from_pretrained(broken, "cpu", "fp32")


def test_codec_encoder_keys_are_skipped(cfg, codec_tensors, tmp_path):
    # The released file also holds the Mimi encoder, which CustomVoice never runs.
    encoder = {
        "encoder.encoder.layers.0.conv.weight": torch.randn(64, 1, 7),
        "encoder.quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum": torch.randn(8, 4),
    }
    file = tmp_path / "model.safetensors"
    save_file({**codec_tensors, **encoder}, str(file))
    codec = load_weights(meta_codec(cfg), [file], "cpu", torch.float32, skip_prefixes=("encoder.",))
    assert not any(k.startswith("encoder.") for k in codec.state_dict())
    # Without the skip they are unexpected keys: the skip is what makes the released file load.
    with pytest.raises(CheckpointError, match="encoder.encoder.layers.0.conv.weight"):
        load_weights(meta_codec(cfg), [file], "cpu", torch.float32)


def test_codec_input_proj_is_loaded_too(tiny_model, codec_tensors):
    # Encode-only, but part of the decoder's key space: strictness means it is loaded, not ignored.
    key = "decoder.quantizer.rvq_first.input_proj.weight"
    assert torch.equal(tiny_model.codec.state_dict()[key], codec_tensors[key])


# -- dtypes ------------------------------------------------------------------------------------------


def test_talker_dtype_as_asked_codec_always_fp32(tiny_checkpoint, tiny_model, talker_tensors):
    model = Qwen3TTS.from_pretrained(tiny_checkpoint, "cpu", "bf16")
    assert model.dtype == torch.bfloat16
    assert {p.dtype for p in model.talker.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.codec.parameters()} == {torch.float32}
    # The file is bf16, so bf16 loads it bit for bit.
    assert torch.equal(model.talker.codec_head.weight, talker_tensors["talker.codec_head.weight"])
    # tiny_model was asked for fp32.
    assert tiny_model.dtype == torch.float32
    assert {p.dtype for p in tiny_model.talker.parameters()} == {torch.float32}
    assert {p.dtype for p in tiny_model.codec.parameters()} == {torch.float32}


def test_auto_dtype_on_cpu_is_fp32(tiny_model):
    assert tiny_model.device.type == "cpu"
    # tiny_model asks for fp32; "auto" must pick the same on a CPU (bf16 matmuls are slow there).
    from cadence.models.qwen3_tts.model import pick_dtype

    assert pick_dtype("auto", torch.device("cpu")) == torch.float32
    assert pick_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(ValueError, match="fp16"):
        pick_dtype("fp16", torch.device("cpu"))


def test_codec_fp32_even_from_bf16_file(cfg, codec_tensors, tmp_path):
    # A codec file re-saved in bf16 still decodes in fp32 (bf16 SnakeBeta: NaN/silence elsewhere).
    file = tmp_path / "model.safetensors"
    save_file({k: v.to(torch.bfloat16) for k, v in codec_tensors.items()}, str(file))
    codec = load_weights(meta_codec(cfg), [file], "cpu", torch.float32, skip_prefixes=("encoder.",))
    assert {p.dtype for p in codec.parameters()} == {torch.float32}


# -- resolving the checkpoint -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["/nonexistent/qwen3-tts", "./no/such/dir", "~/no-such-checkpoint", "a/b/c", "x"])
def test_nonexistent_path_or_invalid_id(name):
    with pytest.raises(CheckpointError, match="neither a checkpoint directory nor a Hugging Face model id"):
        resolve_checkpoint(name)


def test_a_file_is_not_a_checkpoint(tiny_checkpoint):
    with pytest.raises(CheckpointError, match="neither a checkpoint directory"):
        resolve_checkpoint(tiny_checkpoint / "config.json")


def test_hub_id_offline_explains_local_copy(tmp_path):
    """Offline, a hub id fails with instructions; a subprocess because huggingface_hub reads
    HF_HUB_OFFLINE and its cache location at import time."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    env.pop("HF_HUB_CACHE", None)
    code = (
        "from cadence.models.qwen3_tts import Qwen3TTS\n"
        "from cadence.checkpoints import CheckpointError\n"
        "try:\n"
        "    Qwen3TTS.from_pretrained('Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice', 'cpu')\n"
        "except CheckpointError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    message = out.stdout
    assert "could not fetch 'Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice'" in message
    assert "hf download Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice --local-dir" in message
    assert "pass its path instead of the id" in message
    # the command it names is the one the installed huggingface_hub provides
    hf = subprocess.run(
        [str(Path(sys.executable).parent / "hf"), "download", "--help"], capture_output=True, text=True, timeout=120
    )
    assert hf.returncode == 0 and "--local-dir" in hf.stdout, hf.stderr


# -- model sizes -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_17b(skeleton_17b, tmp_path_factory) -> Path:
    from cadence.models.qwen3_tts.checkpoint import write_random_checkpoint

    return write_random_checkpoint(skeleton_17b, tmp_path_factory.mktemp("tiny17"), "tiny", seed=3, progress=False)


def test_17b_has_small_to_mtp_projection(tiny_17b):
    model = Qwen3TTS.from_pretrained(tiny_17b, "cpu", "fp32")
    proj = model.talker.code_predictor.small_to_mtp_projection
    t, cp = model.config.talker, model.config.talker.code_predictor
    assert t.hidden_size > cp.hidden_size
    assert isinstance(proj, nn.Linear)
    assert (proj.in_features, proj.out_features) == (t.hidden_size, cp.hidden_size)
    assert proj.bias is not None
    tensors = load_file(str(tiny_17b / "model.safetensors"))
    for name in ("weight", "bias"):
        key = f"talker.code_predictor.small_to_mtp_projection.{name}"
        assert torch.equal(getattr(proj, name), tensors[key].float())
    # The code predictor's input tables embed in the talker's width, projected down afterwards.
    assert model.talker.code_predictor.model.codec_embedding[0].weight.shape == (cp.vocab_size, t.hidden_size)


def test_06b_has_identity_projection(tiny_model, talker_tensors):
    assert isinstance(tiny_model.talker.code_predictor.small_to_mtp_projection, nn.Identity)
    assert not any("small_to_mtp_projection" in k for k in talker_tensors)
