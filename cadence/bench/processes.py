"""Open-loop trials dealt over several client processes.

One Python process reading hundreds of streams at once runs out of event loop: its wake-ups come
late, every timestamp it takes with them, and the arrivals it owes go out late and together, a burst
the server did not cause. `LoadConfig.client_processes` > 1 deals each open-loop trial's arrivals
round robin, in arrival order, over that many processes, each with its own event loop and connection
pool. Every process counts time from one start shared by all (`time.perf_counter` reads the system's
monotonic clock, the same in every process), so the merged trial keeps the one seeded schedule, and
its records, scheduling lag and loop lag mean what they mean for one client with more cores.

The processes are spawned once for a run (a fresh interpreter each: the parent's event loop and
threads are not copied) and report each request sent and finished on a queue, which feeds the
parent's progress bar.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import multiprocessing
import os
import queue
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from .client import ServerConfig
from .load import LoadConfig, LoadPoint, RequestRecord, Share, Trial, run_trial
from .metrics import AudibleRule
from .progress import TrialProgress
from .workload import Utterance

START_DELAY_S = 0.5  # from handing a trial to the processes to its shared start: time to unpickle and connect
READY_TIMEOUT_S = 120.0  # for every process to have started and imported the bench

# A worker process's queue to the parent and the barrier of its start (set by _init_worker).
_events: multiprocessing.Queue | None = None
_started: multiprocessing.Barrier | None = None


@dataclass
class ShareResult:
    """What one process sent of a trial, and which process it was."""

    trial: Trial
    pid: int


class _QueueProgress(TrialProgress):
    """A worker's progress: each request sent and finished, as an event on the parent's queue."""

    def sent(self) -> None:
        _events.put(("sent", True))

    def finished(self, ok: bool) -> None:
        _events.put(("finished", ok))


def _init_worker(events: multiprocessing.Queue, started: multiprocessing.Barrier) -> None:
    global _events, _started
    _events, _started = events, started


def _wait_for_all() -> int:
    """Runs once in each worker: returns when all of them run it (so that each got one call)."""
    _started.wait(READY_TIMEOUT_S)
    return os.getpid()


def _run_share(trial: functools.partial) -> ShareResult:
    """One process's part of a trial: `trial` is run_trial with every argument but its progress."""
    return ShareResult(asyncio.run(trial(progress=_QueueProgress())), os.getpid())


def peak_inflight(records: list[RequestRecord]) -> int:
    """The most requests pending at once: between each one's send and finish (a finish frees its slot
    before a send at the same instant takes one)."""
    events = sorted([(r.sent_s, 1) for r in records] + [(r.finished_s, -1) for r in records])
    peak = pending = 0
    for _, step in events:
        pending += step
        peak = max(peak, pending)
    return peak


def merge_shares(shares: list[ShareResult]) -> Trial:
    """One trial from its processes' parts: their records in arrival order, their loop lags pooled."""
    first = shares[0].trial
    records = sorted((r for s in shares for r in s.trial.records), key=lambda r: r.index)
    trial = Trial(
        first.point,
        first.seed,
        min(s.trial.started_at for s in shares),
        max(s.trial.wall_s for s in shares),
        peak_inflight(records),
        records,
        [lag for s in shares for lag in s.trial.loop_lag_s],
    )
    trial.window_start_s, trial.window_min_end_s = first.window_start_s, first.window_min_end_s
    trial.client_processes = len({s.pid for s in shares})
    return trial


class ClientProcesses:
    """`count` client processes for open-loop trials, started at the first trial and stopped on exit."""

    def __init__(self, count: int):
        self.count = count
        self._pool: ProcessPoolExecutor | None = None
        self._events: multiprocessing.Queue | None = None

    def __enter__(self) -> ClientProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def _start(self) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("spawn")
        self._events = context.Queue()
        started = context.Barrier(self.count)
        pool = ProcessPoolExecutor(
            self.count, mp_context=context, initializer=_init_worker, initargs=(self._events, started)
        )
        pids = [f.result(READY_TIMEOUT_S) for f in [pool.submit(_wait_for_all) for _ in range(self.count)]]
        if len(set(pids)) != self.count:
            raise RuntimeError(f"asked for {self.count} client processes, {len(set(pids))} started")
        return pool

    def run_trial(
        self,
        server: ServerConfig,
        utterances: list[Utterance],
        load: LoadConfig,
        point: LoadPoint,
        seed: int,
        rule: AudibleRule,
        progress: TrialProgress,
    ) -> Trial:
        """One open-loop trial, its arrivals dealt over the processes; `progress` follows every request."""
        if self._pool is None:
            self._pool = self._start()
        each = dataclasses.replace(load, max_inflight=-(-load.max_inflight // self.count))  # the bound, shared
        t0 = time.perf_counter() + START_DELAY_S
        trial = functools.partial(run_trial, server, utterances, each, point, seed, rule)
        futures = [
            self._pool.submit(_run_share, functools.partial(trial, share=Share(k, self.count, t0)))
            for k in range(self.count)
        ]
        done = threading.Event()
        relay = threading.Thread(target=self._relay, args=(progress, done), daemon=True)
        relay.start()
        try:
            shares = [f.result() for f in futures]
        finally:
            done.set()
            relay.join()
        progress.close()
        return merge_shares(shares)

    def _relay(self, progress: TrialProgress, done: threading.Event) -> None:
        """The workers' events into `progress`, until the trial is over and its queue drained."""
        while True:
            try:
                kind, ok = self._events.get(timeout=0.1)
            except queue.Empty:
                if done.is_set():
                    return
                continue
            if kind == "sent":
                progress.sent()
            else:
                progress.finished(ok)
