"""Random weights for serving without a checkpoint (`cadence serve --dummy-weights`).

The architecture comes from the checkpoint's own config files (a local directory, or the small
files of a Hugging Face id). Where none can be had (a fresh offline machine) it falls back to a
built-in description of Qwen3-TTS-12Hz-0.6B-CustomVoice written out below from the documented
shapes and id tables, with a byte-level tokenizer: every text byte is one token, the special
tokens keep their real ids. Weights are drawn in memory with `checkpoint.randomize`; nothing is
written. The result has the real model's shapes and cost per frame (benchmarking) and says nothing
intelligible.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from ...weights import CheckpointError, resolve_checkpoint
from .checkpoint import PRESETS, SMALL_FILES, merge, randomize
from .codec import SpeechTokenizer
from .config import Qwen3TTSConfig
from .model import Qwen3TTS, Qwen3TTSFrontend, pick_device, pick_dtype
from .talker import Qwen3TTSTalkerModel
from .tokenizer import PRETOKENIZER_PATTERNS, TOKENIZER_FILES, PretokenizerRegex, TextTokenizer

log = logging.getLogger(__name__)

BUILTIN_SOURCE = "built-in Qwen3-TTS-12Hz-0.6B-CustomVoice architecture"


# --- the built-in 0.6B CustomVoice architecture ---------------------------------------------------


def _stack(hidden: int, ffn: int, layers: int, vocab: int) -> dict[str, Any]:
    """A Qwen3 decoder stack as the talker and code predictor configs describe it."""
    return dict(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, hidden_act="silu", rms_norm_eps=1e-6, rope_theta=1_000_000,
        attention_bias=False, vocab_size=vocab, num_code_groups=16,
    )  # fmt: skip


def builtin_config() -> dict[str, Any]:
    """config.json of the 0.6B CustomVoice model (research/qwen3tts_model.md §1)."""
    talker = _stack(1024, 3072, 28, 3072)
    talker.update(
        model_type="qwen3_tts_talker",
        text_vocab_size=151936,
        text_hidden_size=2048,
        rope_scaling={"interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150, codec_think_id=2154,
        codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
        codec_language_id={
            "chinese": 2055, "english": 2050, "german": 2053, "italian": 2070, "portuguese": 2071,
            "spanish": 2054, "japanese": 2058, "korean": 2064, "french": 2061, "russian": 2069,
            "beijing_dialect": 2074, "sichuan_dialect": 2062,
        },
        spk_id={
            "serena": 3066, "vivian": 3065, "uncle_fu": 3010, "ryan": 3061, "aiden": 2861,
            "ono_anna": 2873, "sohee": 2864, "eric": 2875, "dylan": 2878,
        },
        spk_is_dialect={"eric": "sichuan_dialect", "dylan": "beijing_dialect"},
        code_predictor_config={**_stack(1024, 3072, 5, 2048), "model_type": "qwen3_tts_talker_code_predictor"},
    )  # fmt: skip
    for speaker in talker["spk_id"]:
        talker["spk_is_dialect"].setdefault(speaker, False)
    return {
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": "0b6",
        "tts_model_type": "custom_voice",
        "assistant_token_id": 77091,
        "im_start_token_id": 151644,
        "im_end_token_id": 151645,
        "tts_pad_token_id": 151671,
        "tts_bos_token_id": 151672,
        "tts_eos_token_id": 151673,
        "talker_config": talker,
    }


def builtin_speech_tokenizer_config() -> dict[str, Any]:
    """speech_tokenizer/config.json (research/qwen3tts_model.md §3)."""
    decoder = dict(
        codebook_size=2048, codebook_dim=512, latent_dim=1024, hidden_size=512, intermediate_size=1024,
        num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16, head_dim=64, rope_theta=10000,
        rms_norm_eps=1e-5, sliding_window=72, layer_scale_initial_scale=0.01, num_quantizers=16,
        num_semantic_quantizers=1, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2], decoder_dim=1536,
        hidden_act="silu", attention_bias=False,
    )  # fmt: skip
    # The Mimi encoder (voice cloning); the file relies on MimiConfig defaults for the rest.
    encoder = dict(
        model_type="mimi", hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8,
        head_dim=64, intermediate_size=2048, hidden_act="gelu", sliding_window=250, num_quantizers=32,
        codebook_size=2048, codebook_dim=256, upsampling_ratios=[8, 6, 5, 4], compress=2, num_filters=64,
        frame_rate=12.5, use_causal_conv=True, sampling_rate=24000, audio_channels=1, rope_theta=10000.0,
        max_position_embeddings=8000,
    )  # fmt: skip
    return {
        "model_type": "qwen3_tts_tokenizer_12hz",
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "encode_downsample_rate": 1920,
        "decode_upsample_rate": 1920,
        "encoder_valid_num_quantizers": 16,
        "decoder_config": decoder,
        "encoder_config": encoder,
    }


def builtin_generation_config() -> dict[str, Any]:
    """generation_config.json (research/qwen3tts_model.md §2)."""
    return {
        "do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
        "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0, "subtalker_top_k": 50,
        "max_new_tokens": 8192,
    }  # fmt: skip


# The added tokens of Qwen2 + Qwen3-TTS at their real ids; False marks the non-special ones.
_ADDED_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False), "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
    "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
]  # fmt: skip
FIRST_ADDED_ID = 151643
# Whole words the prompt layout slices by position ("<|im_start|>assistant\n" must be 3 tokens).
_PROMPT_WORDS = {"assistant": 77091, "user": 872}


def byte_alphabet() -> list[str]:
    """GPT-2's byte-to-character map in id order, which Qwen2's ids 0..255 follow ("\\n" -> "Ċ" = 198)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    rest = [b for b in range(256) if b not in printable]
    chars = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(rest)}
    return [chars[b] for b in printable + rest]


def byte_level_tokenizer(regex: PretokenizerRegex = "qwen2") -> TextTokenizer:
    """One token per UTF-8 byte (no merges), plus the special tokens at their real ids."""
    vocab = {ch: i for i, ch in enumerate(byte_alphabet())} | dict(_PROMPT_WORDS)
    specs = [(t, True) if isinstance(t, str) else t for t in _ADDED_TOKENS]
    vocab |= {content: FIRST_ADDED_ID + i for i, (content, _) in enumerate(specs)}
    tok = Tokenizer(BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZER_PATTERNS[regex]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([AddedToken(word, normalized=False) for word in _PROMPT_WORDS])
    for content, special in specs:
        token = AddedToken(content, normalized=False, special=special)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    return TextTokenizer(tok, regex)


# --- architectures and random models --------------------------------------------------------------


@dataclass
class Architecture:
    """A model's config files as dicts, where they came from, and its tokenizer files (if any).
    Plain data: it is handed to the engine process as is."""

    config: dict[str, Any]
    speech_tokenizer: dict[str, Any]
    generation: dict[str, Any]
    source: str
    tokenizer_dir: str | None = None  # vocab.json + merges.txt + tokenizer_config.json; None: byte-level

    def shrink(self, preset: str) -> Architecture:
        """The same model shrunk by one of checkpoint.PRESETS ("full" keeps it)."""
        if preset not in PRESETS:
            raise ValueError(f"unknown preset '{preset}'; allowed: {', '.join(PRESETS)}")
        overrides = PRESETS[preset](self.config)
        return Architecture(
            merge(self.config, overrides.get("config.json", {})),
            merge(self.speech_tokenizer, overrides.get("speech_tokenizer/config.json", {})),
            copy.deepcopy(self.generation),
            self.source if preset == "full" else f"{self.source}, {preset} preset",
            self.tokenizer_dir,
        )

    def parse(self) -> Qwen3TTSConfig:
        return Qwen3TTSConfig.from_dicts(self.config, self.speech_tokenizer, self.generation)

    def tokenizer(self, regex: PretokenizerRegex = "qwen2") -> TextTokenizer:
        if self.tokenizer_dir is None:
            return byte_level_tokenizer(regex)
        return TextTokenizer.from_dir(self.tokenizer_dir, regex)

    def frontend(self, regex: PretokenizerRegex = "qwen2") -> Qwen3TTSFrontend:
        return Qwen3TTSFrontend(self.parse(), self.tokenizer(regex))

    @torch.no_grad()
    def random_model(
        self,
        device: str | torch.device | None = "auto",
        dtype: str | torch.dtype | None = "auto",
        regex: PretokenizerRegex = "qwen2",
        seed: int = 0,
    ) -> Qwen3TTS:
        """Random weights of this architecture, drawn in memory (the same for the same seed)."""
        config = self.parse()
        dev = pick_device(device)
        dt = pick_dtype(dtype, dev)
        # Built on the meta device, then given uninitialised storage that randomize() overwrites in
        # full: skips a default initialisation that would be thrown away (seconds at full size).
        with torch.device("meta"):
            root = Qwen3TTSTalkerModel(config)
            codec = SpeechTokenizer(config.speech_tokenizer.decoder)
        gen = torch.Generator().manual_seed(seed)
        root = root.to_empty(device=dev)
        randomize(root, gen)
        root = root.to(dt).eval().requires_grad_(False)
        codec = codec.to_empty(device=dev)
        randomize(codec, gen)
        codec = codec.float().eval().requires_grad_(False)
        log.warning(
            "SERVING RANDOM WEIGHTS (%s, %s talker on %s): the audio is noise of the right length and format, "
            "for benchmarking and trying the API. Pass a real checkpoint without --dummy-weights for speech.",
            self.source, dt, dev,
        )  # fmt: skip
        return Qwen3TTS(config, self.tokenizer(regex), root.talker, codec, dev, dt, Path(self.source))


def builtin_architecture() -> Architecture:
    return Architecture(
        builtin_config(), builtin_speech_tokenizer_config(), builtin_generation_config(), BUILTIN_SOURCE
    )


def find_architecture(model: str | os.PathLike) -> Architecture:
    """The architecture of `model` (a checkpoint directory, or a hub id whose small files are
    fetched); the built-in 0.6B CustomVoice one when no config files can be had."""
    try:
        path = resolve_checkpoint(model, SMALL_FILES)
    except CheckpointError as e:
        log.warning("no config files for '%s' (%s); using the %s", model, str(e).splitlines()[0], BUILTIN_SOURCE)
        return builtin_architecture()
    if not (path / "config.json").exists():
        log.warning("%s has no config.json; using the %s", path, BUILTIN_SOURCE)
        return builtin_architecture()
    speech = path / "speech_tokenizer" / "config.json"
    if not speech.exists():
        log.warning("%s has no speech_tokenizer/config.json; using the built-in codec description", path)
    generation = path / "generation_config.json"
    has_tokenizer = all((path / name).exists() for name in TOKENIZER_FILES)
    if not has_tokenizer:
        log.warning("%s has no tokenizer files; using a byte-level tokenizer", path)
    return Architecture(
        _read(path / "config.json"),
        _read(speech) if speech.exists() else builtin_speech_tokenizer_config(),
        _read(generation) if generation.exists() else {},
        f"architecture of {path}",
        str(path) if has_tokenizer else None,
    )


def _read(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
