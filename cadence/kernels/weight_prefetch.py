"""Weights pulled into L2 ahead of the GEMM chain that reads them, by a kernel running beside it.

At 1-64 rows a decode walk is a chain of ~400 dependent weight-streaming GEMMs of 2-12 MB each, too
short for one launch to reach HBM bandwidth (perf-notes #67: 3.6-6.2 µs each, ~1.5-2 TB/s).
Programmatic dependent launch overlaps only a GEMM's launch and its own slab's prefetch with the
kernel before it; launching further ahead (trigger first) holds SM slots and slowed batch 1 (#65).

Here one more kernel, forked off at the start of a captured walk onto a second stream, reads the
list of weights in the order the chain streams them and prefetches them into L2 with Hopper's bulk
prefetch (`cp.async.bulk.prefetch.L2`: one instruction a 16 KB chunk, no registers held), at most
`lead` bytes past the start of the weight of the GEMM now starting: every tracked GEMM's first
program writes that offset (in KB) to a progress word as it starts. The chain never waits for the
prefetcher, and a prefetch is only a hint, so the walk computes the same numbers with it or
without; what can change is where its weights come from, and how long the graph takes (it ends
when the prefetcher does). Off by default until measured (perf-notes #70):
CADENCE_WEIGHT_PREFETCH=LEAD_MB, CADENCE_WEIGHT_PREFETCH_PROGRAMS.

The weights are cut into units of at most 2 MB (a program's 128 lanes x 16 KB), dealt round-robin
to the programs, so each program has few units in flight and the schedule's next units are spread
over all of them: the first version (perf-notes #70) had every program visit every weight with
three dependent loads each and ran behind the chain.
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

CHUNK_BYTES = 16384  # one bulk prefetch
UNIT_BYTES = 128 * CHUNK_BYTES  # one pass of a program's 128 lanes (4 warps)
MAX_UNITS = 4096  # the 0.6B's frame half (316 weights, 2.4 GB) cuts into ~1,500
# A spinning program reads the progress word ~1-2 µs a time: ~100-200 ms of waiting in all before it
# stops pacing itself and prefetches the rest at once. Only a chain that never reports (a schedule
# not matching the walk) gets there; it makes the walk slow, never hung.
MAX_SPINS = 100_000


@dataclass(frozen=True)
class PrefetchSettings:
    """How the prefetcher runs: `lead_bytes` past the start of the weight now streaming (0: off),
    over `programs` programs."""

    lead_bytes: int = 0
    programs: int = 32

    def __post_init__(self) -> None:
        if self.lead_bytes < 0 or self.programs < 1:
            raise ValueError(f"weight prefetch: lead_bytes >= 0 and programs >= 1, got {self}")

    @property
    def enabled(self) -> bool:
        return self.lead_bytes > 0

    @classmethod
    def from_env(cls) -> PrefetchSettings:
        """CADENCE_WEIGHT_PREFETCH (lead in MB, 0 or unset: off), CADENCE_WEIGHT_PREFETCH_PROGRAMS
        (default 32)."""
        env = os.environ
        try:
            lead_mb = float(env.get("CADENCE_WEIGHT_PREFETCH", "0") or 0)
            programs = int(env.get("CADENCE_WEIGHT_PREFETCH_PROGRAMS", str(cls.programs)))
        except ValueError as e:
            raise ValueError(f"CADENCE_WEIGHT_PREFETCH(_PROGRAMS): a number expected ({e})") from None
        return cls(int(lead_mb * 2**20), programs)


@dataclass(frozen=True)
class Tracking:
    """What a tracked GEMM launch gets: the progress word and the KB of the schedule before its
    weight, which it writes there as it starts."""

    progress: torch.Tensor
    offset_kb: int


_recording: WeightSchedule | None = None


def track(weight: torch.Tensor) -> Tracking | None:
    """Called by a weight-streaming GEMM as it launches: where its weight starts in the schedule being
    recorded (the weight appended to it), or None when no schedule records (it writes no progress)."""
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
    `table` [MAX_UNITS, 3] int64 rows of (start address, bytes, KB of the schedule up to the unit's
    end), `count` [1] (units) and `progress` [1] int32 (KB of the schedule before the weight of the
    GEMM now starting)."""

    def __init__(self, device: torch.device, settings: PrefetchSettings):
        self.settings = settings
        self.device = device
        self.table = torch.zeros(MAX_UNITS, 3, dtype=torch.int64, device=device)
        self.count = torch.zeros(1, dtype=torch.int32, device=device)
        self.progress = torch.zeros(1, dtype=torch.int32, device=device)
        self.entries: list[tuple[int, int]] = []  # (start, bytes) of each weight of the run being recorded
        self.committed: list[tuple[int, int]] = []  # what the table holds
        self._bytes = 0  # of the entries so far

    def append(self, weight: torch.Tensor) -> Tracking:
        start, size = weight_range(weight)
        self.entries.append((start, size))
        offset_kb, self._bytes = self._bytes >> 10, self._bytes + size
        return Tracking(self.progress, offset_kb)

    def units(self) -> list[tuple[int, int, int]]:
        """The recorded weights cut into the table's units, in order."""
        rows, done = [], 0
        for start, size in self.entries:
            for offset in range(0, size, UNIT_BYTES):
                piece = min(UNIT_BYTES, size - offset)
                rows.append((start + offset, piece, (done + offset + piece) >> 10))
            done += size
        return rows

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """GEMMs launched inside append their weights to a fresh list."""
        global _recording
        if _recording is not None:
            raise RuntimeError("weight prefetch: schedules do not nest")
        self.entries, self._bytes = [], 0
        _recording = self
        try:
            yield
        finally:
            _recording = None

    def commit(self) -> None:
        """Write the recorded list to the device table (outside graph capture: a host copy)."""
        rows = self.units()
        if len(rows) > MAX_UNITS:
            raise RuntimeError(
                f"weight prefetch: a walk streams {len(rows)} units of weights, the table holds {MAX_UNITS}"
            )
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
        schedule.table, schedule.count, schedule.progress, s.lead_bytes >> 10, max_spins, CHUNK=CHUNK_BYTES, num_warps=4
    )
