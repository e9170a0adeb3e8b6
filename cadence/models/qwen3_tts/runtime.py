"""Qwen3-TTS as the engine runs it: the loaded model, its partitions and its requests (the engine's
ModelRuntime protocol, cadence/engine/partition.py).

    model = Qwen3TTS.from_pretrained("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    engine = Engine(model)             # build_core asks the model for its two partitions
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from ...engine.config import EngineConfig
from ...engine.kv_cache import PagedKVCache
from ...engine.request import EngineRequest
from ...kernels.backends import triton_available
from .checkpoint import randomize
from .codec import SpeechTokenizer
from .config import Qwen3TTSConfig
from .frontend import SynthesisRequest, prepare_request
from .model import Qwen3TTSModel, pick_device, pick_dtype
from .partitions import Qwen3TTSCodec, Qwen3TTSTalker
from .prompt import Prompt
from .sampling import SamplingParams
from .talker import Qwen3TTSTalkerModel
from .tokenizer import TextTokenizer
from .voice_prompt import VoiceClonePrompt

log = logging.getLogger(__name__)


@dataclass
class Qwen3TTS(Qwen3TTSModel):
    """A loaded checkpoint (or random weights of an architecture) that builds the engine's Talker and
    Codec partitions and prepares its requests."""

    prompt_type: ClassVar[type] = Prompt
    params_type: ClassVar[type] = SamplingParams
    description: str | None = None  # its size as people say it; None: the config's ("0.6B")

    @classmethod
    @torch.no_grad()
    def random(
        cls,
        config: Qwen3TTSConfig,
        tokenizer: TextTokenizer,
        device: str | torch.device | None = "auto",
        dtype: str | torch.dtype | None = "auto",
        seed: int = 0,
        source: str = "random weights",
        description: str | None = None,
    ) -> Qwen3TTS:
        """Random weights of `config`'s architecture, drawn in memory (the same for the same seed);
        builtin.Architecture.random_model is the usual way in."""
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
            "RANDOM WEIGHTS (%s, %s talker on %s): the audio is noise of the right length and format, "
            "for benchmarking and trying the API. Pass a real checkpoint without --dummy-weights for speech.",
            source, dt, dev,
        )  # fmt: skip
        return cls(config, tokenizer, root.talker, codec, dev, dt, Path(source), description)

    @property
    def kv_bytes_per_token(self) -> int:
        cfg = self.config.talker
        return PagedKVCache.bytes_per_token(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, self.dtype)

    def describe(self) -> str:
        """Its size as people say it: "0.6B", "tiny preset of the 0.6B architecture"."""
        return self.description or self.config.size_label

    # -- ModelRuntime -------------------------------------------------------------------------------

    def prepare(self, request: SynthesisRequest, max_input_tokens: int) -> EngineRequest[Prompt, SamplingParams]:
        """Validate and tokenise a request, as Qwen3TTSFrontend.prepare does, through this model's
        prompt(). Raises InvalidRequestError."""
        return prepare_request(self, request, max_input_tokens)

    def warmup_request(self, frames: int, max_input_tokens: int) -> EngineRequest[Prompt, SamplingParams]:
        """A fixed-length, seeded request through every walk (a Base model speaks in a stand-in voice)."""
        clone = VoiceClonePrompt.stand_in(self.config) if self.config.tts_model_type == "base" else None
        request = SynthesisRequest(
            "Warm-up.", clone=clone, max_new_tokens=frames, ignore_eos=True, seed=0, request_id="cadence-warmup"
        )
        return self.prepare(request, max_input_tokens)

    def move_codec(self, device: torch.device) -> None:
        """The codec's weights to a device of its own (disaggregated): they move once."""
        self.codec.decoder.to(device)

    def build_codec(
        self, config: EngineConfig, device: torch.device, use_graphs: bool, own_stream: bool
    ) -> Qwen3TTSCodec:
        """The Codec partition on `device`: where move_codec put the decoder, or the model's device
        (Qwen3TTSCodec runs where the decoder's weights are)."""
        return Qwen3TTSCodec(
            self, config.max_streams, use_graphs, graph_buckets=config.graph_buckets, own_stream=own_stream,
            dtype=getattr(torch, config.codec_dtype),  # a low-precision copy; self.codec stays the fp32 decode
            tf32=config.codec_tf32, windowed=config.codec_decode == "chunked",
            graph_stream_frames=config.codec_graph_stream_frames,
        )  # fmt: skip

    def build_talker(self, config: EngineConfig, kv_bytes: int, backend: str) -> Qwen3TTSTalker:
        """The Talker partition over a KV cache of `kv_bytes`; backend `auto`: the Triton walk on a
        GPU where Triton is installed, else the eager one (sdpa)."""
        if backend == "auto":
            backend = "triton" if self.device.type == "cuda" and triton_available() else "sdpa"
        return Qwen3TTSTalker(
            self, config.max_streams, kv_bytes, config.page_size, config.max_input_tokens, config.max_seq_tokens,
            backend, config.enforce_eager, config.graph_buckets, config.prefill_token_budget,
            config.kernels.pdl_max_rows, config.kernels.slab_max_rows,
        )  # fmt: skip
