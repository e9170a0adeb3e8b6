"""What an engine process is started with: plain, picklable data, no torch (the API process builds
it, and it crosses a spawn).

`ModelSource` says where a model comes from; `EngineProcessConfig.loader` is the model family's
function that turns it into a ModelRuntime, run in the engine process. The loader crosses the spawn
as a reference (its module and name), so the engine imports the model package only there, through
it, and never by name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .config import EngineConfig

if TYPE_CHECKING:
    from .partition import ModelRuntime


@dataclass(frozen=True)
class ModelSource:
    """A model to load: a family's checkpoint directory, or an architecture to draw random weights
    for (the family's own description of it, opaque to the engine)."""

    family: str  # the registered model family (cadence.models.registry)
    name: str  # as the user gave it (a hub id, a directory, a released checkpoint's name)
    checkpoint: str | None = None  # a local checkpoint directory (real weights) ...
    random: Any = None  # ... or the architecture to draw random weights for
    device: str = "auto"  # the Talker's: auto, cpu, cuda, cuda:N
    dtype: str = "auto"
    tokenizer_regex: str = "qwen2"  # the text tokenizer's pre-tokenizer variant, where a family has one
    seed: int = 0  # of the random weights

    @property
    def random_weights(self) -> bool:
        return self.checkpoint is None


@dataclass
class EngineProcessConfig:
    """Everything the engine process needs; picklable (it crosses a spawn)."""

    model_name: str  # as served and logged
    model: ModelSource
    loader: Callable[[ModelSource], ModelRuntime]  # the family's load_runtime (a module-level function)
    engine: EngineConfig
    input_address: str = ""  # the engine client binds its sockets and fills these in
    output_address: str = ""
    warmup_frames: int = 8
    log_level: int = logging.INFO
    cpu_threads: int | None = None  # torch threads when the model runs on the CPU (None: cores - 1)
    replica: int | None = None  # its index among data-parallel replicas (None: the only engine)
    codec_device: str | None = None  # the Codec partition's own device (disaggregated); None: `device`

    @property
    def device(self) -> str:
        """The Talker's device."""
        return self.model.device
