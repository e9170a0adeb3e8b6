"""Load models: when requests are sent, and the bookkeeping that accounts for every one of them.

- Closed loop: `concurrency` workers each send their next request as soon as the previous one ends.
  Measures capacity; the offered load adapts to the server, so it hides queueing.
- Open loop: requests arrive as a Poisson process at `rate` requests/s whatever the server does, as
  real users do (peers.md §5: Nari's contract). Arrivals are drawn up front from the trial's seed, so
  two servers see the same schedule. If `max_inflight` requests are pending, the next arrival waits
  for a slot; the wait shows up as scheduling lag rather than silently thinning the load.

Each (load point, seed) pair is a trial, run on a fresh connection pool after the previous one drained.
Warm-up requests are sent and recorded like any other but flagged, and left out of the aggregates.

The client measures itself too: a ticker on the event loop records how late its wake-ups are. A busy
client (Python parsing thousands of streams, or a CPU shared with the server) delays every timestamp
it takes, and that lag is the warning sign that the numbers describe the client, not the server.
Each trial starts with the client's heap frozen out of the garbage collector's walks: a full
collection over its imports and earlier trials' records would stall the loop the same way.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
import numpy as np

from .client import Exchange, ServerConfig, send_request
from .metrics import AudibleRule
from .progress import TrialProgress
from .workload import Utterance, plan_request

LOOP_TICK_S = 0.005


@dataclass(frozen=True)
class LoadPoint:
    mode: str  # "closed" (value = concurrency) or "open" (value = Poisson rate, requests/s)
    value: float

    @property
    def label(self) -> str:
        return f"concurrency {self.value:g}" if self.mode == "closed" else f"{self.value:g} req/s"


@dataclass
class LoadConfig:
    concurrencies: list[int] = field(default_factory=list)  # closed-loop points
    rates: list[float] = field(default_factory=list)  # open-loop points, requests/s
    num_requests: int | None = None  # measured requests per trial (closed: sent; open: arrivals after warm-up)
    duration_s: float | None = None  # closed: stop sending after this; open: arrival window after warm-up
    warmup_s: float = 0.0  # open loop: arrivals in the first warmup_s seconds are warm-up
    warmup_requests: int = 0  # closed loop: requests sent (at the same concurrency) before measuring
    seeds: list[int] = field(default_factory=lambda: [0])
    max_inflight: int = 4096
    fixed_frames: int | str | None = None  # see workload.plan_request
    # Open loop: the client processes a trial's arrivals are dealt over (cadence/bench/processes.py).
    client_processes: int = 1

    def validate(self) -> None:
        """Raise ValueError naming the option at fault."""
        if not self.concurrencies and not self.rates:
            raise ValueError("give at least one closed-loop --concurrency or one open-loop --rate")
        if any(c < 1 for c in self.concurrencies):
            raise ValueError(f"--concurrency values must be at least 1, got {self.concurrencies}")
        if any(c > self.max_inflight for c in self.concurrencies):
            raise ValueError(f"--concurrency {max(self.concurrencies)} exceeds --max-inflight {self.max_inflight}")
        if any(not (r > 0 and math.isfinite(r)) for r in self.rates):
            raise ValueError(f"--rate values must be positive requests/s, got {self.rates}")
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give --num-requests, --duration, or both (whichever is reached first ends a trial)")
        if self.num_requests is not None and self.num_requests < 1:
            raise ValueError(f"--num-requests must be at least 1, got {self.num_requests}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"--duration must be positive seconds, got {self.duration_s}")
        if self.warmup_s < 0 or self.warmup_requests < 0:
            raise ValueError("warm-up values cannot be negative")
        if not self.seeds:
            raise ValueError("give at least one --seeds value")
        if self.max_inflight < 1:
            raise ValueError(f"--max-inflight must be at least 1, got {self.max_inflight}")
        if self.client_processes < 1:
            raise ValueError(f"--client-processes must be at least 1, got {self.client_processes}")

    def points(self) -> list[LoadPoint]:
        return [LoadPoint("closed", c) for c in self.concurrencies] + [LoadPoint("open", r) for r in self.rates]


@dataclass
class RequestRecord:
    """One request as sent and as answered; times in seconds since the trial started (monotonic)."""

    index: int
    utterance_id: str
    language: str | None
    text_chars: int
    max_new_tokens: int | None
    warmup: bool
    scheduled_s: float | None  # open loop: planned arrival; closed loop: None (sent when a worker is free)
    sent_s: float
    finished_s: float  # when the client was done with it, whatever the outcome
    exchange: Exchange

    @property
    def ok(self) -> bool:
        return self.exchange.ok


@dataclass
class Trial:
    point: LoadPoint
    seed: int
    started_at: str  # UTC, ISO 8601
    wall_s: float  # warm-up included
    peak_inflight: int
    records: list[RequestRecord]
    loop_lag_s: list[float] = field(default_factory=list)  # how late each event-loop tick woke (client load)
    # Open loop measures over the arrival window, not from the first (randomly late) arrival: the window
    # opens when warm-up ends and lasts at least the arrival window, so a server that keeps up shows
    # requests/s near the offered rate. None: from the first measured send / to the last finish.
    window_start_s: float | None = None
    window_min_end_s: float | None = None
    client_processes: int = 1  # the processes that sent its requests

    def window_s(self) -> float:
        """Measuring window: its start to the last measured finish (or its minimum end); 0 without requests."""
        measured = self.measured
        if not measured:
            return 0.0
        start = self.window_start_s if self.window_start_s is not None else min(r.sent_s for r in measured)
        end = max([r.finished_s for r in measured] + [self.window_min_end_s or 0.0])
        return end - start

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup]


def poisson_arrivals(
    rate: float, seed: int, warmup_s: float, duration_s: float | None, num_requests: int | None
) -> list[float]:
    """Arrival times (s since trial start) of a Poisson process, until the window closes or enough arrive."""
    rng = np.random.default_rng(seed)
    arrivals: list[float] = []
    t, measured = 0.0, 0
    while True:
        t += float(rng.exponential(1.0 / rate))
        if duration_s is not None and t >= warmup_s + duration_s:
            return arrivals
        arrivals.append(t)
        measured += t >= warmup_s
        if num_requests is not None and measured >= num_requests:
            return arrivals


@dataclass(frozen=True)
class Share:
    """The part of an open-loop trial one client process sends: arrival `index` goes to process
    index % of, and every process counts time from `t0` (perf_counter; None: when the trial starts)."""

    index: int = 0
    of: int = 1
    t0: float | None = None

    def takes(self, arrival: int) -> bool:
        return arrival % self.of == self.index


class _TrialRunner:
    """Sends the requests of one trial and keeps the books."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        server: ServerConfig,
        utterances: list[Utterance],
        load: LoadConfig,
        seed: int,
        rule: AudibleRule,
        progress: TrialProgress,
        share: Share,
    ):
        self.client, self.server, self.utterances, self.load = client, server, utterances, load
        self.seed, self.rule, self.progress, self.share = seed, rule, progress, share
        self.records: list[RequestRecord] = []
        self.inflight = self.peak_inflight = 0
        self.loop_lag_s: list[float] = []
        self.t0 = time.perf_counter() if share.t0 is None else share.t0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    async def one(self, index: int, warmup: bool, scheduled_s: float | None = None) -> None:
        planned = plan_request(self.utterances, index, self.seed, self.load.fixed_frames)
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        self.progress.sent()
        sent = self.now()
        exchange = await send_request(self.client, self.server, planned, self.rule)
        self.inflight -= 1
        utt = planned.utterance
        self.records.append(
            RequestRecord(
                index, utt.id, utt.language, len(utt.text), planned.max_new_tokens, warmup, scheduled_s, sent,
                self.now(), exchange,
            )
        )  # fmt: skip
        self.progress.finished(exchange.ok)

    async def watch_loop(self) -> None:
        """Tick every LOOP_TICK_S and record the oversleep: the delay any timestamp could suffer."""
        while True:
            before = time.perf_counter()
            await asyncio.sleep(LOOP_TICK_S)
            self.loop_lag_s.append(time.perf_counter() - before - LOOP_TICK_S)

    async def closed(self, concurrency: int) -> None:
        load = self.load
        if load.warmup_requests:
            await self._workers(concurrency, iter(range(load.warmup_requests)), None, warmup=True)
        start = load.warmup_requests
        indices = itertools.count(start) if load.num_requests is None else iter(range(start, start + load.num_requests))
        stop_at = None if load.duration_s is None else self.now() + load.duration_s
        await self._workers(concurrency, indices, stop_at, warmup=False)

    async def _workers(self, concurrency: int, indices: Iterator[int], stop_at: float | None, warmup: bool) -> None:
        async def worker() -> None:
            for index in indices:  # shared iterator: each index goes to exactly one worker
                if stop_at is not None and self.now() >= stop_at:
                    return
                await self.one(index, warmup)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def open(self, rate: float) -> None:
        load = self.load
        arrivals = poisson_arrivals(rate, self.seed, load.warmup_s, load.duration_s, load.num_requests)
        slots = asyncio.Semaphore(load.max_inflight)
        tasks = []

        async def arrive(index: int, at: float) -> None:
            try:
                await self.one(index, warmup=at < load.warmup_s, scheduled_s=at)
            finally:
                slots.release()

        for index, at in enumerate(arrivals):
            if not self.share.takes(index):
                continue
            delay = at - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            tasks.append(asyncio.create_task(arrive(index, at)))
        await asyncio.gather(*tasks)


def expected_requests(point: LoadPoint, load: LoadConfig, seed: int) -> int | None:
    """Requests a trial will send, warm-up included, when known in advance (for the progress bar)."""
    if point.mode == "open":
        return len(poisson_arrivals(point.value, seed, load.warmup_s, load.duration_s, load.num_requests))
    if load.duration_s is None and load.num_requests is not None:
        return load.warmup_requests + load.num_requests
    return None


async def run_trial(
    server: ServerConfig,
    utterances: list[Utterance],
    load: LoadConfig,
    point: LoadPoint,
    seed: int,
    rule: AudibleRule,
    progress: TrialProgress | None = None,
    share: Share = Share(),
) -> Trial:
    """One trial on a fresh connection pool sized so the pool never queues requests itself; in an
    open loop, only the arrivals of `share`."""
    progress = progress or TrialProgress()
    pool = int(point.value) if point.mode == "closed" else load.max_inflight
    # httpx's default pool (100 connections) would queue requests inside the client and inflate
    # latencies; trust_env=False keeps proxy variables from routing benchmark traffic elsewhere.
    limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    # Everything alive now (imports, earlier trials' records) out of the garbage collector's walks:
    # a full collection over it would stall the event loop, and every timestamp with it.
    gc.collect()
    gc.freeze()
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(server.timeout_s), trust_env=False) as client:
        runner = _TrialRunner(client, server, utterances, load, seed, rule, progress, share)
        watcher = asyncio.create_task(runner.watch_loop())
        try:
            if point.mode == "closed":
                await runner.closed(int(point.value))
            else:
                await runner.open(point.value)
        finally:
            watcher.cancel()
    progress.close()
    runner.records.sort(key=lambda r: r.index)
    trial = Trial(point, seed, started_at, runner.now(), runner.peak_inflight, runner.records, runner.loop_lag_s)
    if point.mode == "open":
        trial.window_start_s = load.warmup_s
        trial.window_min_end_s = None if load.duration_s is None else load.warmup_s + load.duration_s
    return trial
