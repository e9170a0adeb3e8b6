"""Weights pulled into L2 ahead of the GEMM chain that reads them, by a kernel running beside it.

At 1-64 rows a decode walk is a chain of ~400 dependent weight-streaming GEMMs of 2-12 MB each, too
short for one launch to reach HBM bandwidth (perf-notes #67: 3.6-6.2 µs each, ~1.5-2 TB/s).
Programmatic dependent launch overlaps only a GEMM's launch and its own slab's prefetch with the
kernel before it; launching further ahead (trigger first) holds SM slots and slowed batch 1 (#65).

Here one more kernel, forked off at the start of a captured walk onto a second stream, reads the
list of weights in the order the chain streams them and prefetches each into L2, at most `lead`
bytes past the start of the GEMM now starting: every tracked GEMM's first program writes its index
to a progress word as it starts. The chain never waits for the prefetcher, and a prefetch is only a
hint, so the walk computes the same numbers with it or without; what can change is where its weights
come from. Nothing here is on by default until measured (perf-notes #70):
CADENCE_WEIGHT_PREFETCH=LEAD_MB, with _PROGRAMS and _MODE (bulk: one `cp.async.bulk.prefetch` a
16 KB chunk; lines: one `prefetch.global.L2` a 128-byte line).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import torch

T = TypeVar("T")

CHUNK_BYTES = 16384  # one bulk prefetch, or one program's 128 line prefetches (4 warps x 32 lanes)
MAX_ENTRIES = 1024  # weights a walk streams: the 0.6B's frame half has 316, its advance half 112
# A spinning program reads the progress word ~1-2 µs a time: ~100-200 ms of waiting in all before it
# stops pacing itself and prefetches the rest at once. Only a chain that never reports (a schedule
# not matching the walk) gets there; it makes the walk slow, never hung.
MAX_SPINS = 100_000
MODES = ("bulk", "lines")


@dataclass(frozen=True)
class PrefetchSettings:
    """How the prefetcher runs: `lead_bytes` ahead of the GEMM now starting (0: off), over
    `programs` programs, in 16 KB bulk prefetches or 128-byte line prefetches."""

    lead_bytes: int = 0
    programs: int = 8
    mode: str = "bulk"

    def __post_init__(self) -> None:
        if self.lead_bytes < 0 or self.programs < 1:
            raise ValueError(f"weight prefetch: lead_bytes >= 0 and programs >= 1, got {self}")
        if self.mode not in MODES:
            raise ValueError(f"weight prefetch mode '{self.mode}'; allowed: {', '.join(MODES)}")

    @property
    def enabled(self) -> bool:
        return self.lead_bytes > 0

    @classmethod
    def from_env(cls) -> PrefetchSettings:
        """CADENCE_WEIGHT_PREFETCH (lead in MB, 0 or unset: off), CADENCE_WEIGHT_PREFETCH_PROGRAMS
        (default 8), CADENCE_WEIGHT_PREFETCH_MODE (bulk or lines)."""
        env = os.environ
        try:
            lead_mb = float(env.get("CADENCE_WEIGHT_PREFETCH", "0") or 0)
            programs = int(env.get("CADENCE_WEIGHT_PREFETCH_PROGRAMS", "8"))
        except ValueError as e:
            raise ValueError(f"CADENCE_WEIGHT_PREFETCH(_PROGRAMS): a number expected ({e})") from None
        return cls(int(lead_mb * 2**20), programs, env.get("CADENCE_WEIGHT_PREFETCH_MODE", "bulk"))


@dataclass(frozen=True)
class Tracking:
    """What a tracked GEMM launch gets: the progress word and its own index in the schedule."""

    progress: torch.Tensor
    step: int


_recording: WeightSchedule | None = None


def track(weight: torch.Tensor) -> Tracking | None:
    """Called by a weight-streaming GEMM as it launches: its index in the schedule being recorded
    (the weight appended to it), or None when no schedule records (the GEMM writes no progress)."""
    return None if _recording is None else _recording.append(weight)


def weight_range(weight: torch.Tensor) -> tuple[int, int]:
    """(start, bytes) of the memory `weight` spans, widened to 16-byte boundaries as bulk prefetches
    need; the widening stays inside the allocation's granule (PyTorch aligns blocks to 512 bytes)."""
    if not weight.is_contiguous():
        raise ValueError("weight prefetch: weights must be contiguous (the GEMM streams them whole)")
    start = weight.data_ptr()
    end = start + weight.numel() * weight.element_size()
    start16, end16 = start & ~15, (end + 15) & ~15
    return start16, end16 - start16


class WeightSchedule:
    """The weights one captured walk streams, in order, and the device state its prefetcher reads:
    `table` [MAX_ENTRIES, 3] int64 rows of (start address, bytes, bytes of the entries before),
    `count` [1] and `progress` [1] int32."""

    def __init__(self, device: torch.device, settings: PrefetchSettings):
        self.settings = settings
        self.device = device
        self.table = torch.zeros(MAX_ENTRIES, 3, dtype=torch.int64, device=device)
        self.count = torch.zeros(1, dtype=torch.int32, device=device)
        self.progress = torch.zeros(1, dtype=torch.int32, device=device)
        self.entries: list[tuple[int, int]] = []  # the run being recorded
        self.committed: list[tuple[int, int]] = []  # what the table holds

    def append(self, weight: torch.Tensor) -> Tracking:
        if len(self.entries) == MAX_ENTRIES:
            raise RuntimeError(f"weight prefetch: a walk streams more than {MAX_ENTRIES} weights")
        self.entries.append(weight_range(weight))
        return Tracking(self.progress, len(self.entries) - 1)

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """GEMMs launched inside append their weights to a fresh list."""
        global _recording
        if _recording is not None:
            raise RuntimeError("weight prefetch: schedules do not nest")
        self.entries = []
        _recording = self
        try:
            yield
        finally:
            _recording = None

    def commit(self) -> None:
        """Write the recorded list to the device table (outside graph capture: a host copy)."""
        rows, before = [], 0
        for start, size in self.entries:
            rows.append((start, size, before))
            before += size
        if rows:
            self.table[: len(rows)].copy_(torch.tensor(rows, dtype=torch.int64))
        self.count.fill_(len(rows))
        self.committed = list(self.entries)

    def wrap(self, fn: Callable[[], T]) -> Callable[[], T]:
        """`fn` (one walk) as `capture` should run it: every run records the weights its GEMMs
        stream; a run outside capture commits them, and the captured run (after such warm-up runs)
        zeroes the progress word and forks the prefetcher onto a second stream before the walk,
        joining it after. The captured walk must stream exactly what the warm-up runs committed."""

        def run() -> T:
            capturing = self.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
            if capturing and self.committed:
                main = torch.cuda.current_stream(self.device)
                self.progress.zero_()
                side = _side_stream(self.device)
                side.wait_stream(main)
                with torch.cuda.stream(side):
                    launch_prefetcher(self)
            with self.recording():
                out = fn()
            if capturing and self.committed:
                main.wait_stream(side)
                if self.entries != self.committed:
                    raise RuntimeError("weight prefetch: the captured walk streamed other weights than its warm-up")
            elif not capturing:
                self.commit()
            return out

        return run


@functools.cache
def _side_stream(device: torch.device) -> torch.cuda.Stream:
    return torch.cuda.Stream(device)


def launch_prefetcher(schedule: WeightSchedule, max_spins: int = MAX_SPINS) -> None:
    """Launch the prefetch kernel over `schedule`'s committed table on the current stream."""
    from .triton_prefetch import prefetch_weights_kernel  # Triton: imported on GPUs only

    s = schedule.settings
    prefetch_weights_kernel[(s.programs,)](
        schedule.table, schedule.count, schedule.progress, s.lead_bytes, max_spins,
        CHUNK=CHUNK_BYTES, BULK=s.mode == "bulk", num_warps=4,
    )  # fmt: skip
