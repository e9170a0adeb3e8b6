"""Detectors for generations that will not end by themselves: looping code0s and long silence.

Both run on the host over all slots at once (numpy), so their cost does not grow with Python work
per stream.
"""

from __future__ import annotations

import numpy as np

from .config import RunawayGuard


class LoopDetector:
    """Flags slots whose last `window` code0s are periodic with a period <= `max_period`."""

    def __init__(self, slots: int, guard: RunawayGuard):
        self.window = guard.loop_window if guard.enabled else 0
        self.max_period = guard.loop_max_period
        self.history = np.zeros((slots, max(1, self.window)), dtype=np.int64)
        self.count = np.zeros(slots, dtype=np.int64)

    def reset(self, slot: int) -> None:
        self.count[slot] = 0

    def push(self, slots: np.ndarray, code0: np.ndarray) -> None:
        if self.window <= 0:
            return
        self.history[slots, self.count[slots] % self.window] = code0
        self.count[slots] += 1

    def looping(self, slots: np.ndarray) -> np.ndarray:
        """bool per slot in `slots`."""
        if self.window <= 0 or self.max_period <= 0 or len(slots) == 0:
            return np.zeros(len(slots), dtype=bool)
        full = self.count[slots] >= self.window
        # Unroll each ring into time order; then a sequence is p-periodic iff x[i] == x[i-p].
        start = self.count[slots] % self.window
        order = (start[:, None] + np.arange(self.window)[None, :]) % self.window
        seq = np.take_along_axis(self.history[slots], order, axis=1)
        periodic = np.zeros(len(slots), dtype=bool)
        for p in range(1, min(self.max_period, self.window - 1) + 1):
            periodic |= (seq[:, p:] == seq[:, :-p]).all(axis=1)
        return full & periodic


def dbfs(pcm: np.ndarray) -> float:
    """RMS level of float samples in dB relative to full scale (-inf for digital silence)."""
    if pcm.size == 0:
        return -float("inf")
    rms = float(np.sqrt(np.mean(np.square(pcm, dtype=np.float64))))
    return 20.0 * np.log10(rms) if rms > 0 else -float("inf")
