"""Python's garbage collector in a serving process: the start-up heap frozen out of its reach, and
its pauses counted.

A full (oldest-generation) collection walks every object the process tracks. After start-up that is
hundreds of thousands of them (torch, the model's modules, the tokenizer, the web framework), so a
full collection stops the process for tens to hundreds of milliseconds. In the engine process that
stops every stream at once, and the streams that started last, which have the least audio buffered
at the client, run dry. `freeze_startup_heap` moves everything alive at the end of start-up to the
permanent generation (`gc.freeze`), which collections skip: they then walk only what serving
allocated. `GcPauses` times every collection, so a long one shows in /metrics.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

LONG_PAUSE_S = 0.05  # a collection longer than this is logged: playback buffers are ~0.1 s at first


def freeze_startup_heap() -> int:
    """Collect once, then freeze what is left (call when start-up is over). Returns how many objects
    the collector no longer walks."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("froze %d start-up objects out of the garbage collector's walks", frozen)
    return frozen


@dataclass(eq=False)  # compared by identity: `install` and `uninstall` find this hook, not an equal one
class GcPauses:
    """Counts and times the process's garbage collections (a `gc.callbacks` hook; `install`)."""

    collections: int = 0
    seconds: float = 0.0
    longest_seconds: float = 0.0
    _began: float | None = None

    def install(self) -> GcPauses:
        if self not in gc.callbacks:
            gc.callbacks.append(self)
        return self

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        if self._began is None:  # installed mid-collection
            return
        pause = time.perf_counter() - self._began
        self._began = None
        self.collections += 1
        self.seconds += pause
        self.longest_seconds = max(self.longest_seconds, pause)
        if pause > LONG_PAUSE_S:
            log.warning(
                "garbage collection of generation %d paused the process for %.0f ms", info["generation"], pause * 1e3
            )
