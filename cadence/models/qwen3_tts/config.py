"""Checkpoint JSON -> typed configuration.

Every value comes from the checkpoint's own files: the official Python classes carry defaults from
Qwen3-Omni (codec ids 4196..., 32 code groups) that are wrong for this model, so nothing here has a
model-specific default. A missing field is an error that names the file and the key.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .sampling import SamplingParams

# tts_model_type -> what a request gives to choose the voice.
SUPPORTED_MODEL_TYPES = ("custom_voice", "base", "voice_design")
SUPPORTED_TOKENIZER_TYPES = ("qwen3_tts_tokenizer_12hz",)


class ConfigError(ValueError):
    """A checkpoint's configuration is missing a field or describes an unsupported model."""


class UnsupportedModelError(ConfigError):
    """The checkpoint is a Qwen3-TTS variant cadence cannot serve (yet)."""


class _Fields:
    """Reads required keys from one JSON object and names the file and path when one is missing."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data = data
        self.where = where

    def get(self, key: str) -> Any:
        if key not in self.data or self.data[key] is None:
            raise ConfigError(f"{self.where}: required field '{key}' is missing")
        return self.data[key]

    def optional(self, key: str, default: Any) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def child(self, key: str) -> _Fields:
        value = self.get(key)
        if not isinstance(value, dict):
            raise ConfigError(f"{self.where}: field '{key}' must be an object")
        return _Fields(value, f"{self.where}.{key}")


@dataclass(frozen=True)
class DecoderStackConfig:
    """A Qwen3 decoder stack (RMSNorm, QK-norm, GQA, SwiGLU, 1-D RoPE): the talker and the code predictor."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int
    num_code_groups: int

    @classmethod
    def _stack_fields(cls, f: _Fields) -> dict[str, Any]:
        if f.get("hidden_act") != "silu":
            raise ConfigError(f"{f.where}: hidden_act '{f.get('hidden_act')}' unsupported; only 'silu'")
        if f.optional("attention_bias", False):
            raise ConfigError(f"{f.where}: attention_bias=true is not a Qwen3-TTS layout")
        return dict(
            hidden_size=int(f.get("hidden_size")),
            intermediate_size=int(f.get("intermediate_size")),
            num_hidden_layers=int(f.get("num_hidden_layers")),
            num_attention_heads=int(f.get("num_attention_heads")),
            num_key_value_heads=int(f.get("num_key_value_heads")),
            # head_dim is not hidden/heads for this model (1024/16 = 64, the checkpoint has 128).
            head_dim=int(f.get("head_dim")),
            rms_norm_eps=float(f.get("rms_norm_eps")),
            rope_theta=float(f.get("rope_theta")),
            vocab_size=int(f.get("vocab_size")),
            num_code_groups=int(f.get("num_code_groups")),
        )


@dataclass(frozen=True)
class CodePredictorConfig(DecoderStackConfig):
    """The 5-layer depth transformer that predicts codebooks 1..15 of each frame."""

    @classmethod
    def from_fields(cls, f: _Fields) -> CodePredictorConfig:
        return cls(**cls._stack_fields(f))


@dataclass(frozen=True)
class TalkerConfig(DecoderStackConfig):
    """The 28-layer talker plus the codec-side token tables it uses to build prompts."""

    text_vocab_size: int
    text_hidden_size: int
    codec_pad_id: int
    codec_bos_id: int
    codec_eos_token_id: int
    codec_think_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    codec_language_id: dict[str, int]
    spk_id: dict[str, int]
    # False, or the name of the dialect (a key of codec_language_id) a speaker uses for Chinese/auto.
    spk_is_dialect: dict[str, str | bool]
    code_predictor: CodePredictorConfig

    @classmethod
    def from_fields(cls, f: _Fields) -> TalkerConfig:
        if f.optional("use_sliding_window", False):
            raise ConfigError(f"{f.where}: use_sliding_window=true is not a Qwen3-TTS talker layout")
        rope = f.optional("rope_scaling", {}) or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            # The interleaved mRoPE of the config reduces to 1-D RoPE only because the three position
            # streams are identical and the base rope is the default one.
            raise ConfigError(f"{f.where}.rope_scaling: rope_type '{rope_type}' unsupported; only 'default'")
        languages = {k.lower(): int(v) for k, v in f.get("codec_language_id").items()}
        dialects = {k.lower(): v for k, v in f.optional("spk_is_dialect", {}).items()}
        for speaker, dialect in dialects.items():
            if isinstance(dialect, str) and dialect.lower() not in languages:
                raise ConfigError(
                    f"{f.where}.spk_is_dialect: speaker '{speaker}' uses dialect '{dialect}', which "
                    f"codec_language_id does not list ({', '.join(sorted(languages))})"
                )
        return cls(
            **cls._stack_fields(f),
            text_vocab_size=int(f.get("text_vocab_size")),
            text_hidden_size=int(f.get("text_hidden_size")),
            codec_pad_id=int(f.get("codec_pad_id")),
            codec_bos_id=int(f.get("codec_bos_id")),
            codec_eos_token_id=int(f.get("codec_eos_token_id")),
            codec_think_id=int(f.get("codec_think_id")),
            codec_nothink_id=int(f.get("codec_nothink_id")),
            codec_think_bos_id=int(f.get("codec_think_bos_id")),
            codec_think_eos_id=int(f.get("codec_think_eos_id")),
            codec_language_id=languages,
            spk_id={k.lower(): int(v) for k, v in f.optional("spk_id", {}).items()},
            spk_is_dialect={k: v.lower() if isinstance(v, str) else v for k, v in dialects.items()},
            code_predictor=CodePredictorConfig.from_fields(f.child("code_predictor_config")),
        )

    @property
    def suppressed_code0_range(self) -> tuple[int, int]:
        """code0 ids in [start, vocab) are control tokens, banned while sampling except EOS."""
        return self.vocab_size - 1024, self.vocab_size


@dataclass(frozen=True)
class CodecDecoderConfig:
    """The 12 Hz speech-tokenizer decoder (codes -> 24 kHz waveform)."""

    codebook_size: int
    codebook_dim: int
    latent_dim: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    sliding_window: int
    layer_scale_initial_scale: float
    num_quantizers: int
    num_semantic_quantizers: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    decoder_dim: int

    @classmethod
    def from_fields(cls, f: _Fields) -> CodecDecoderConfig:
        if f.optional("hidden_act", "silu") != "silu":
            raise ConfigError(f"{f.where}: hidden_act '{f.get('hidden_act')}' unsupported; only 'silu'")
        return cls(
            codebook_size=int(f.get("codebook_size")),
            # Read as an attribute with no default by the official code: required.
            codebook_dim=int(f.get("codebook_dim")),
            latent_dim=int(f.get("latent_dim")),
            hidden_size=int(f.get("hidden_size")),
            intermediate_size=int(f.get("intermediate_size")),
            num_hidden_layers=int(f.get("num_hidden_layers")),
            num_attention_heads=int(f.get("num_attention_heads")),
            num_key_value_heads=int(f.get("num_key_value_heads")),
            head_dim=int(f.get("head_dim")),
            rope_theta=float(f.get("rope_theta")),
            rms_norm_eps=float(f.get("rms_norm_eps")),
            sliding_window=int(f.get("sliding_window")),
            layer_scale_initial_scale=float(f.optional("layer_scale_initial_scale", 0.01)),
            num_quantizers=int(f.get("num_quantizers")),
            num_semantic_quantizers=int(f.optional("num_semantic_quantizers", 1)),
            upsample_rates=tuple(int(x) for x in f.get("upsample_rates")),
            upsampling_ratios=tuple(int(x) for x in f.get("upsampling_ratios")),
            decoder_dim=int(f.get("decoder_dim")),
        )

    @property
    def samples_per_frame(self) -> int:
        total = 1
        for r in (*self.upsampling_ratios, *self.upsample_rates):
            total *= r
        return total


@dataclass(frozen=True)
class SpeechEncoderConfig:
    """The 12 Hz speech-tokenizer encoder (24 kHz audio -> codes): a Mimi encoder.

    The released `encoder_config` lists only some Mimi fields and relies on transformers'
    MimiConfig defaults for the rest (kernel sizes, residual layers, padding, norms), so the
    defaults below are MimiConfig's: architecture facts of Mimi, not guesses about this model.
    """

    frame_rate: float
    sampling_rate: int = 24000
    hidden_size: int = 512
    num_filters: int = 64
    upsampling_ratios: tuple[int, ...] = (8, 6, 5, 4)  # SEANet ratios, applied in reverse when encoding
    num_hidden_layers: int = 8
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    intermediate_size: int = 2048
    codebook_size: int = 2048
    codebook_dim: int = 256
    num_quantizers: int = 32
    num_semantic_quantizers: int = 1
    vector_quantization_hidden_dimension: int = 256
    num_residual_layers: int = 1
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    compress: int = 2
    pad_mode: str = "constant"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    layer_scale_initial_scale: float = 0.01

    @classmethod
    def from_fields(cls, f: _Fields) -> SpeechEncoderConfig:
        fixed = {"hidden_act": "gelu", "use_causal_conv": True, "use_conv_shortcut": False, "audio_channels": 1}
        for key, only in {**fixed, "attention_bias": False}.items():
            if f.optional(key, only) != only:
                raise ConfigError(f"{f.where}: {key}={f.get(key)!r} unsupported; only {only!r} (the 12 Hz tokenizer)")
        values = {k: f.data[k] for k in cls.__dataclass_fields__ if f.data.get(k) is not None}
        if "upsampling_ratios" in values:
            values["upsampling_ratios"] = tuple(int(x) for x in values["upsampling_ratios"])
        cfg = cls(**{**values, "frame_rate": float(f.get("frame_rate"))})
        return cfg if cfg.head_dim else replace(cfg, head_dim=cfg.hidden_size // cfg.num_attention_heads)

    @property
    def hop_length(self) -> int:
        """Samples per frame of the SEANet output (before the transformer's downsampling)."""
        return math.prod(self.upsampling_ratios)

    @property
    def downsample_kernel(self) -> int:
        """Mimi's `downsample` conv (SEANet rate -> frame_rate): kernel 2 * int(rate ratio), stride 2;
        0 when the rates are equal and there is none."""
        encodec_rate = math.ceil(self.sampling_rate / self.hop_length)
        return 0 if encodec_rate == self.frame_rate else 2 * int(encodec_rate / self.frame_rate)

    @property
    def samples_per_frame(self) -> int:
        return self.hop_length * (2 if self.downsample_kernel else 1)


@dataclass(frozen=True)
class SpeechTokenizerConfig:
    model_type: str
    output_sample_rate: int
    decode_upsample_rate: int
    decoder: CodecDecoderConfig
    input_sample_rate: int = 24000
    encode_downsample_rate: int = 1920
    encoder_valid_num_quantizers: int = 16
    encoder: SpeechEncoderConfig | None = None  # absent: the checkpoint cannot encode reference audio

    @classmethod
    def from_fields(cls, f: _Fields) -> SpeechTokenizerConfig:
        model_type = f.get("model_type")
        if model_type not in SUPPORTED_TOKENIZER_TYPES:
            raise UnsupportedModelError(
                f"{f.where}: speech tokenizer '{model_type}' unsupported; supported: {list(SUPPORTED_TOKENIZER_TYPES)}"
            )
        cfg = cls(
            model_type=model_type,
            output_sample_rate=int(f.get("output_sample_rate")),
            decode_upsample_rate=int(f.get("decode_upsample_rate")),
            decoder=CodecDecoderConfig.from_fields(f.child("decoder_config")),
            input_sample_rate=int(f.optional("input_sample_rate", 24000)),
            encode_downsample_rate=int(f.optional("encode_downsample_rate", 1920)),
            encoder_valid_num_quantizers=int(f.optional("encoder_valid_num_quantizers", 16)),
            encoder=SpeechEncoderConfig.from_fields(f.child("encoder_config")) if "encoder_config" in f.data else None,
        )
        enc = cfg.encoder
        if enc is not None:
            rate = enc.samples_per_frame
            if rate != cfg.encode_downsample_rate or enc.sampling_rate != cfg.input_sample_rate:
                raise ConfigError(
                    f"{f.where}: the encoder gives one frame per {rate} samples at {enc.sampling_rate} Hz; "
                    f"encode_downsample_rate says {cfg.encode_downsample_rate} at {cfg.input_sample_rate} Hz"
                )
            if not (cfg.decoder.num_quantizers <= cfg.encoder_valid_num_quantizers <= enc.num_quantizers):
                raise ConfigError(
                    f"{f.where}: encoder_valid_num_quantizers {cfg.encoder_valid_num_quantizers} must lie between "
                    f"the decoder's {cfg.decoder.num_quantizers} and the encoder's {enc.num_quantizers} codebooks"
                )
        if cfg.decoder.samples_per_frame != cfg.decode_upsample_rate:
            raise ConfigError(
                f"{f.where}: decode_upsample_rate {cfg.decode_upsample_rate} != product of the decoder's "
                f"upsampling factors {cfg.decoder.samples_per_frame}"
            )
        return cfg


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    """The Base models' ECAPA-TDNN speaker encoder (128-bin log-mel at 24 kHz -> x-vector).

    The released Base configs give only `enc_dim` and `sample_rate`; the rest are the official
    class's defaults, which the released weights were trained with, written out here.
    """

    enc_dim: int
    sample_rate: int
    mel_dim: int = 128
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128

    @classmethod
    def from_fields(cls, f: _Fields) -> SpeakerEncoderConfig:
        values = {k: f.data[k] for k in cls.__dataclass_fields__ if f.data.get(k) is not None}
        for key in ("enc_channels", "enc_kernel_sizes", "enc_dilations"):
            if key in values:
                values[key] = tuple(int(x) for x in values[key])
        cfg = cls(**{**values, "enc_dim": int(f.get("enc_dim")), "sample_rate": int(f.get("sample_rate"))})
        if not len(cfg.enc_channels) == len(cfg.enc_kernel_sizes) == len(cfg.enc_dilations):
            raise ConfigError(f"{f.where}: enc_channels, enc_kernel_sizes and enc_dilations differ in length")
        if any(c % cfg.enc_res2net_scale for c in cfg.enc_channels[1:-1]):
            raise ConfigError(f"{f.where}: enc_channels must be multiples of enc_res2net_scale")
        return cfg


@dataclass(frozen=True)
class Qwen3TTSConfig:
    """Everything cadence reads from a checkpoint directory."""

    tts_model_type: str
    tts_model_size: str
    im_start_token_id: int
    im_end_token_id: int
    assistant_token_id: int
    tts_bos_token_id: int
    tts_eos_token_id: int
    tts_pad_token_id: int
    talker: TalkerConfig
    speech_tokenizer: SpeechTokenizerConfig
    generation: SamplingParams  # generation_config.json
    speaker_encoder: SpeakerEncoderConfig | None = None  # Base only

    @property
    def supports_instruct(self) -> bool:
        """Whether `instruct` reaches the prompt: VoiceDesign (it is the voice) and the 1.7B
        CustomVoice (style); the official wrapper drops it for the 0.6B CustomVoice, and Base
        has no instruct path at all."""
        if self.tts_model_type == "voice_design":
            return True
        return self.tts_model_type == "custom_voice" and self.tts_model_size != "0b6"

    @property
    def size_label(self) -> str:
        """tts_model_size as the checkpoints' names write it: "0b6" -> "0.6B", "1b7" -> "1.7B"."""
        whole, sep, tenths = self.tts_model_size.lower().partition("b")
        return f"{whole}.{tenths}B" if sep and whole.isdigit() and tenths.isdigit() else self.tts_model_size

    @property
    def can_clone(self) -> bool:
        """Base checkpoints clone a voice from reference audio (speaker encoder + codec encoder)."""
        return self.speaker_encoder is not None and self.speech_tokenizer.encoder is not None

    @property
    def sample_rate(self) -> int:
        return self.speech_tokenizer.output_sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.speech_tokenizer.decode_upsample_rate

    @property
    def speakers(self) -> list[str]:
        return sorted(self.talker.spk_id)

    @property
    def languages(self) -> list[str]:
        """'auto' plus the public languages; dialects are reached only through their speakers."""
        return ["auto"] + sorted(k for k in self.talker.codec_language_id if "dialect" not in k)

    @classmethod
    def from_dicts(
        cls, config: dict[str, Any], speech_tokenizer: dict[str, Any], generation: dict[str, Any] | None = None
    ) -> Qwen3TTSConfig:
        f = _Fields(config, "config.json")
        model_type = f.get("tts_model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise UnsupportedModelError(
                f"config.json: tts_model_type '{model_type}' is not supported; cadence serves "
                f"{list(SUPPORTED_MODEL_TYPES)} checkpoints (the Qwen3-TTS-12Hz CustomVoice, Base and "
                "VoiceDesign models)"
            )
        tokenizer_type = f.get("tokenizer_type")
        if tokenizer_type not in SUPPORTED_TOKENIZER_TYPES:
            raise UnsupportedModelError(
                f"config.json: tokenizer_type '{tokenizer_type}' unsupported; supported: "
                f"{list(SUPPORTED_TOKENIZER_TYPES)} (the 12 Hz models)"
            )
        return cls(
            tts_model_type=model_type,
            tts_model_size=str(f.get("tts_model_size")),
            im_start_token_id=int(f.get("im_start_token_id")),
            im_end_token_id=int(f.get("im_end_token_id")),
            assistant_token_id=int(f.get("assistant_token_id")),
            tts_bos_token_id=int(f.get("tts_bos_token_id")),
            tts_eos_token_id=int(f.get("tts_eos_token_id")),
            tts_pad_token_id=int(f.get("tts_pad_token_id")),
            talker=TalkerConfig.from_fields(f.child("talker_config")),
            speech_tokenizer=SpeechTokenizerConfig.from_fields(
                _Fields(speech_tokenizer, "speech_tokenizer/config.json")
            ),
            generation=SamplingParams.from_dict(generation or {}),
            speaker_encoder=_speaker_encoder(f, model_type),
        )

    @classmethod
    def from_dir(cls, path: str | Path) -> Qwen3TTSConfig:
        path = Path(path)
        config = _read_json(path / "config.json")
        speech = _read_json(path / "speech_tokenizer" / "config.json")
        gen_path = path / "generation_config.json"
        generation = _read_json(gen_path) if gen_path.exists() else {}
        return cls.from_dicts(config, speech, generation)


def _speaker_encoder(f: _Fields, model_type: str) -> SpeakerEncoderConfig | None:
    """Base checkpoints carry a speaker encoder whose x-vector sits in the talker's codec track, so
    its width must be the talker's; other variants have none (their files may hold default stubs)."""
    if model_type != "base":
        return None
    cfg = SpeakerEncoderConfig.from_fields(f.child("speaker_encoder_config"))
    hidden = int(f.child("talker_config").get("hidden_size"))
    if cfg.enc_dim != hidden:
        raise ConfigError(
            f"config.json.speaker_encoder_config: enc_dim {cfg.enc_dim} must equal the talker's hidden_size {hidden} "
            "(the x-vector is a row of the talker's input)"
        )
    return cfg


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"{path.name} not found in {path.parent}: is this a Qwen3-TTS checkpoint directory?")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from e
