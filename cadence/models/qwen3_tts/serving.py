"""What a server asks of a Qwen3-TTS checkpoint (cadence/models/interfaces.py): what its variant can
do, and the voice a request speaks in. No torch.

The variants take a voice differently: CustomVoice a preset (or an alias of one), Base a cloned
voice (reference audio sent with the request, or a saved voice), VoiceDesign none (`instructions`
describe it). A field only another variant can use is refused, naming that variant.
"""

from __future__ import annotations

from ...errors import InvalidRequestError
from ..interfaces import ModelCapabilities, Speech, Voices
from .config import Qwen3TTSConfig
from .voice_prompt import VoiceClonePrompt

# The fields only some variants use, and the variant that does.
VARIANT_FIELDS = {"ref_audio": "base", "ref_text": "base", "x_vector_only_mode": "base"}

# (preset, cloned voice): a voice as SynthesisRequest takes it
QwenVoice = tuple[str | None, VoiceClonePrompt | None]


def capabilities(config: Qwen3TTSConfig) -> ModelCapabilities:
    kind = config.tts_model_type
    if kind == "custom_voice":
        instructions = "style" if config.supports_instruct else None
    else:
        instructions = "voice description" if kind == "voice_design" else None
    return ModelCapabilities(
        kind=kind,
        size=config.tts_model_size,
        size_label=config.size_label,
        languages=tuple(config.languages),
        voices=tuple(config.speakers) if kind == "custom_voice" else (),
        instructions=instructions,
        clones_voices=kind == "base",
    )


def resolve_voice(config: Qwen3TTSConfig, speech: Speech, voices: Voices) -> tuple[str, QwenVoice]:
    """(name for logs, (preset, cloned voice)) as the checkpoint's variant takes a voice. Raises
    InvalidRequestError naming the field and, for a field this variant cannot use, the one that can."""
    kind = config.tts_model_type
    given = {
        "ref_audio": speech.ref_audio,
        "ref_text": speech.ref_text is not None,
        "x_vector_only_mode": speech.x_vector_only is not None,
    }
    for variant_field, needs in VARIANT_FIELDS.items():
        if kind != needs and given[variant_field]:
            raise InvalidRequestError(
                f"{variant_field} needs a {needs} checkpoint (voice cloning); this is {kind}", variant_field
            )
    name = speech.voice
    if kind == "custom_voice":
        if name is None:
            raise InvalidRequestError("missing required field 'voice'", "voice", code="missing_field")
        preset = voices.resolve(name)
        return preset, (preset, None)
    if kind == "voice_design":
        # The server drops the OpenAI voice names that clients must send: any other is a preset
        # this checkpoint does not have.
        if name:
            raise InvalidRequestError(
                f"a voice_design checkpoint has no voice '{name}': describe the voice in `instructions` "
                "(preset voices need a custom_voice checkpoint, cloned ones a base checkpoint)",
                "voice",
            )
        return "designed", (None, None)
    return _cloned_voice(speech, voices)


def _cloned_voice(speech: Speech, voices: Voices) -> tuple[str, QwenVoice]:
    """A Base request's voice: the reference audio it carries, or a saved voice."""
    name, clone = speech.voice, speech.clone
    if speech.ref_text is not None and not speech.ref_audio and clone is None:
        raise InvalidRequestError("ref_text goes with ref_audio; a saved voice has its own transcript", "ref_text")
    if clone is not None:
        if name:
            raise InvalidRequestError("give either ref_audio or a saved voice, not both", "voice")
        return "ref_audio", (None, clone)
    if not name:
        raise InvalidRequestError(
            "a base checkpoint speaks in a cloned voice: send ref_audio (and ref_text), or name a saved voice "
            "(POST /v1/audio/voices)",
            "voice",
        )
    saved_name, prompt = voices.saved(name)
    return saved_name, (None, prompt)
