"""The sampling settings a request may give, declared once.

The HTTP body (server/schema.py SpeechBody) and the WebSocket session (server/websocket.py
SessionConfig) extend SamplingOverrides, so their JSON carries these fields flat; `cadence synth`
generates its sampling flags from it (cli_options.add_sampling_arguments). The names are the
official qwen-tts package's. A field left None takes the checkpoint's default (its
generation_config.json). Each 80 ms frame is 16 codes: the first codebook is the talker's, codebooks
1-15 are the code predictor's, which the subtalker_* fields set.

Each field's help text is its msgspec description; an integer field also carries the range a
request may give (`check_ranges`). The float fields' ranges apply to the settings once the
checkpoint's defaults are merged in (the model's SamplingParams.validate).
"""

from __future__ import annotations

import functools
import typing
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from .errors import InvalidRequestError

MAX_SEED = 2**63 - 1
MAX_TOP_K = 100_000


def _about(help: str, low: int | None = None, high: int | None = None) -> Meta:
    """A field's help text and, for an integer field, the range a request may give it (`high`
    None: the longest request the engine takes, which the caller knows)."""
    return Meta(description=help, extra={"range": (low, high)} if low is not None else {})


class SamplingOverrides(msgspec.Struct, kw_only=True):
    """Sampling settings a request may give; None takes the checkpoint's default."""

    seed: Annotated[int | None, _about("random seed for sampling", 0, MAX_SEED)] = None
    temperature: Annotated[
        float | None,
        _about("the first codebook's; 0: greedy for every codebook, unless the subtalker settings say otherwise"),
    ] = None
    top_k: Annotated[int | None, _about("the first codebook's (0: off)", 0, MAX_TOP_K)] = None
    top_p: Annotated[float | None, _about("the first codebook's")] = None
    repetition_penalty: Annotated[float | None, _about("over the first codebook's earlier codes")] = None
    subtalker_temperature: Annotated[float | None, _about("codebooks 1-15 (0: greedy)")] = None
    subtalker_top_k: Annotated[int | None, _about("codebooks 1-15 (0: off)", 0, MAX_TOP_K)] = None
    subtalker_top_p: Annotated[float | None, _about("codebooks 1-15")] = None
    subtalker_dosample: Annotated[bool | None, _about("sample codebooks 1-15, or argmax them")] = None
    max_new_tokens: Annotated[
        int | None,
        _about(
            "most audio frames to generate (80 ms each; the official package's max_new_tokens counts the "
            "end-of-speech step too, so N there gives at most N-1 frames)",
            1,
        ),
    ] = None

    def overrides(self) -> dict[str, Any]:
        """The sampling fields by name (of a SpeechBody or a session config too, which extend this
        type): the keyword arguments SynthesisRequest takes for them."""
        return {name: getattr(self, name) for name in SamplingOverrides.__struct_fields__}

    def check_ranges(self, max_new_tokens: int) -> None:
        """Every integer field given within its range, max_new_tokens up to `max_new_tokens` (the
        engine's longest request). Raises InvalidRequestError naming the field."""
        for name, (low, high) in integer_ranges(max_new_tokens).items():
            value = getattr(self, name)
            if value is not None and not low <= value <= high:
                raise InvalidRequestError(f"{name} must be an integer from {low} to {high}, got {value}", name)


class SamplingField(typing.NamedTuple):
    name: str
    type: type  # int, float or bool (a request may also leave it None)
    help: str
    range: tuple[int, int | None] | None  # integers: the least and most a request may give


@functools.cache
def sampling_fields() -> tuple[SamplingField, ...]:
    """The fields of SamplingOverrides in declaration order, with their help texts and ranges."""
    hints = typing.get_type_hints(SamplingOverrides, include_extras=True)
    fields = []
    for name in SamplingOverrides.__struct_fields__:
        annotated = hints[name]
        (meta,) = annotated.__metadata__
        (value_type,) = (t for t in typing.get_args(typing.get_args(annotated)[0]) if t is not type(None))
        fields.append(SamplingField(name, value_type, meta.description, meta.extra.get("range")))
    return tuple(fields)


def integer_ranges(max_new_tokens: int) -> dict[str, tuple[int, int]]:
    """Integer field -> (least, most) a request may give; max_new_tokens's most is the argument."""
    ranges = {f.name: f.range for f in sampling_fields() if f.range is not None}
    return {name: (low, max_new_tokens if high is None else high) for name, (low, high) in ranges.items()}
