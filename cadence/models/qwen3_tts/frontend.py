"""What the API process knows of a Qwen3-TTS checkpoint: config and tokenizer, no weights, no torch.

`Qwen3TTSFrontend` validates a `SynthesisRequest` and turns it into the engine's request (the
prompt's ids and the resolved sampling); the engine process, which holds the weights, only ever
receives such requests. It is the family's `Frontend` (cadence/models/interfaces.py): the server
hands it a `Speech` and gets a `SynthesisRequest` back (serving.py resolves the voice).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, replace
from typing import Protocol

from ...checkpoints import resolve_checkpoint
from ...engine.request import EngineRequest
from ...errors import InvalidRequestError
from ..interfaces import ModelCapabilities, Speech, Voices
from . import serving
from .config import Qwen3TTSConfig
from .prompt import IncrementalText, Prompt, TextLayout, TextTokens, build_prompt
from .sampling import SamplingParams
from .tokenizer import PretokenizerRegex, TextTokenizer
from .voice_prompt import VoiceClonePrompt

CHECKPOINT_PATTERNS = ("*.json", "*.txt", "*.safetensors", "speech_tokenizer/*")


@dataclass
class SynthesisRequest:
    """One utterance to synthesise. Sampling fields left None take the checkpoint's defaults
    (generation_config.json); their names are the official package's.

    `temperature` is the first codebook's (the talker's), `subtalker_*` the code predictor's
    (codebooks 1-15). `temperature=0` is greedy decoding for every codebook, as LLM servers take
    it, unless the request sets the code predictor's own sampling (`subtalker_dosample`,
    `subtalker_temperature`); `subtalker_temperature=0` or `subtalker_dosample=False` makes the
    code predictor alone greedy. `greedy=True` is greedy everywhere.
    """

    text: str | TextTokens  # or its tokens, when text arrives in pieces (IncrementalText)
    voice: str | None = None  # a preset (CustomVoice); None: the checkpoint's default preset
    language: str = "auto"
    instruct: str | None = None  # style (1.7B CustomVoice) or the voice's description (VoiceDesign)
    layout: str | None = None  # "whole" or "streaming"; None: the variant's official default
    clone: VoiceClonePrompt | None = None  # a cloned voice (Base)
    x_vector_only: bool | None = None  # Base: the x-vector alone; None: in-context when ref_text is known
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    subtalker_temperature: float | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    subtalker_dosample: bool | None = None
    max_new_tokens: int | None = None  # audio frames (80 ms each)
    seed: int | None = None
    greedy: bool = False
    ignore_eos: bool = False  # generate exactly max_new_tokens frames (benchmarking)
    request_id: str | None = None
    # More text follows (Engine.append_text); the streaming layout: the request starts with what
    # has arrived and waits whenever it has spoken all of it.
    text_open: bool = False


@dataclass
class Qwen3TTSFrontend:
    """What validating and tokenising requests needs: config and tokenizer, no weights. The API
    server process holds only this; the engine process holds the whole model."""

    config: Qwen3TTSConfig
    tokenizer: TextTokenizer

    @classmethod
    def from_pretrained(
        cls, model: str | os.PathLike, tokenizer_regex: PretokenizerRegex = "qwen2"
    ) -> Qwen3TTSFrontend:
        path = resolve_checkpoint(model, CHECKPOINT_PATTERNS)
        return cls(Qwen3TTSConfig.from_dir(path), TextTokenizer.from_dir(path, tokenizer_regex))

    def prompt(
        self,
        text: str | TextTokens,
        voice: str | None = None,
        language: str | None = "auto",
        instruct: str | None = None,
        layout: TextLayout | str | None = None,
        clone: VoiceClonePrompt | None = None,
        x_vector_only: bool | None = None,
        text_open: bool = False,
    ) -> Prompt:
        """Validate a request and lay out its prefill. Raises InvalidRequestError naming the field
        (MoreTextNeeded: text still arriving is too short yet for the prefill).

        voice: a preset (custom_voice; None takes `default_voice`); clone: a cloned voice (base);
        layout None: the variant's official default, or streaming for text still arriving."""
        if text_open and layout is None:
            layout = TextLayout.STREAMING
        if layout is not None:
            try:
                layout = TextLayout(layout)
            except ValueError:
                raise InvalidRequestError(
                    f"unknown text layout '{layout}'", "layout", [m.value for m in TextLayout]
                ) from None
        if voice is None:
            voice = self.default_voice
        return build_prompt(
            self.config, self.tokenizer, text, voice, language, instruct, layout, clone, x_vector_only, text_open
        )

    @property
    def default_voice(self) -> str | None:
        """The preset a CustomVoice request without a voice gets (ryan where the checkpoint has him);
        None for the variants without presets."""
        speakers = self.config.speakers
        if self.config.tts_model_type != "custom_voice" or not speakers:
            return None
        return "ryan" if "ryan" in speakers else speakers[0]

    def end_of_text(self) -> list[int]:
        """What follows the last text token in the trailing text (text that arrived in pieces ends
        with it: EngineCore.append_text)."""
        return [self.config.tts_eos_token_id]

    def instruct_ignored(self, instruct: str | None) -> bool:
        """True when `instruct` was given but this model drops it (0.6B CustomVoice, as the official
        wrapper; Base refuses it instead)."""
        return bool(instruct) and self.config.tts_model_type == "custom_voice" and not self.config.supports_instruct

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    def prepare(self, request: SynthesisRequest, max_input_tokens: int) -> EngineRequest[Prompt, SamplingParams]:
        """Validate and tokenise a request for the engine (prepare_request)."""
        return prepare_request(self, request, max_input_tokens)

    def capabilities(self) -> ModelCapabilities:
        return serving.capabilities(self.config)

    def resolve_voice(self, speech: Speech, voices: Voices) -> tuple[str, serving.QwenVoice]:
        return serving.resolve_voice(self.config, speech, voices)

    def request(self, speech: Speech, voice: serving.QwenVoice) -> SynthesisRequest:
        """Text given as tokens (it arrived in pieces) takes the streaming layout, whether or not
        more follows: its audio is that of the one-shot streaming request over the whole text."""
        preset, clone = voice
        return SynthesisRequest(
            speech.text, voice=preset, clone=clone, x_vector_only=speech.x_vector_only,
            language=speech.language or "auto", instruct=speech.instructions or None, **speech.sampling,
            ignore_eos=speech.ignore_eos, request_id=speech.request_id,
            layout=None if isinstance(speech.text, str) else "streaming", text_open=speech.text_open,
        )  # fmt: skip

    def prompt_parts(self, prompt: Prompt) -> dict[str, int]:
        """The text, a clone's reference frames, and the rest (instructions, the fixed rows)."""
        return {
            "input": prompt.num_text_tokens,
            "ref_audio": len(prompt.ref_codes),
            "instructions": len(prompt) - prompt.num_text_tokens - len(prompt.ref_codes),
        }

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    def text_in_pieces(self) -> IncrementalText:
        return IncrementalText(self.tokenizer)


class PromptBuilder(Protocol):
    """What prepare_request reads of a model: Qwen3TTSFrontend, or the loaded Qwen3TTS (its prompts
    are its frontend's)."""

    config: Qwen3TTSConfig
    tokenizer: TextTokenizer

    def prompt(self, *args, **kwargs) -> Prompt: ...


def prepare_request(
    model: PromptBuilder, req: SynthesisRequest, max_input_tokens: int
) -> EngineRequest[Prompt, SamplingParams]:
    """Validate and tokenise (before anything reaches the device). Raises InvalidRequestError."""
    prompt = model.prompt(
        req.text, req.voice, req.language, req.instruct, req.layout, req.clone, req.x_vector_only, req.text_open
    )
    too_long = "request_too_large"
    if prompt.num_text_tokens > max_input_tokens:
        raise InvalidRequestError(
            f"input is {prompt.num_text_tokens} tokens; the limit is {max_input_tokens}", "input", code=too_long
        )
    # The text fed while decoding (input, and a clone's transcript in the in-context mode) and the
    # instructions ahead of the prompt are bounded like the input.
    if len(prompt.trailing_text) > max_input_tokens + 1:
        raise InvalidRequestError(
            f"input and ref_text are {len(prompt.trailing_text) - 1} tokens together; the limit is "
            f"{max_input_tokens}: shorten the reference's transcript",
            "ref_text",
            code=too_long,
        )
    if req.instruct and (n := len(model.tokenizer.encode(req.instruct))) > max_input_tokens:
        raise InvalidRequestError(
            f"instructions are {n} tokens; the limit is {max_input_tokens}", "instructions", code=too_long
        )
    params = sampling_params(model.config.generation, req)
    # Unseeded requests still sample through the counter-based RNG, with a fresh random seed.
    seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(7), "little")
    request_id = req.request_id or uuid.uuid4().hex
    return EngineRequest(request_id, prompt, replace(params, seed=seed), req.ignore_eos, req.text_open)


def sampling_params(generation: SamplingParams, req: SynthesisRequest) -> SamplingParams:
    """The request's sampling over the checkpoint's defaults, a temperature of 0 meaning greedy
    (SynthesisRequest). Raises InvalidRequestError naming the field."""
    if req.subtalker_dosample and req.subtalker_temperature == 0:
        raise InvalidRequestError(
            "subtalker_temperature 0 is greedy decoding, which contradicts subtalker_dosample true",
            "subtalker_temperature",
        )
    params = SamplingParams.from_defaults(
        generation,
        temperature=None if req.temperature == 0 else req.temperature,
        top_k=req.top_k,
        top_p=req.top_p,
        repetition_penalty=req.repetition_penalty,
        subtalker_temperature=None if req.subtalker_temperature == 0 else req.subtalker_temperature,
        subtalker_top_k=req.subtalker_top_k,
        subtalker_top_p=req.subtalker_top_p,
        max_new_tokens=req.max_new_tokens,
    )
    if req.greedy:
        return params.greedy()
    if req.subtalker_dosample is not None:
        subtalker = req.subtalker_dosample
    elif req.subtalker_temperature is not None:
        subtalker = req.subtalker_temperature != 0 and params.subtalker_dosample
    else:
        subtalker = params.subtalker_dosample and req.temperature != 0
    return replace(params, do_sample=params.do_sample and req.temperature != 0, subtalker_dosample=subtalker)
