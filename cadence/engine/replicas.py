"""Data-parallel replicas: N engine-core processes behind one API server.

Each replica is an EngineClient (its own engine process and ZMQ sockets). `ReplicaPool` has the
surface the server uses of one client (start, wait_ready, synthesize, outstanding, stats, shutdown)
and adds routing and restarts:

- routing: a request goes to the ready replica with the least outstanding work: streams submitted
  and not finished (running or queued in that engine; counted in the API process, so a burst is
  spread before the engines report), then the share of its KV cache reserved (prompt + frame budget
  of the streams it holds), then round robin.
- a replica whose process dies fails only its own open streams (EngineClient does that at once);
  new work goes to the others while it is restarted: a fresh process and client, the same config.
  A replica that fails to start MAX_START_FAILURES times in a row is given up.
- with one replica there is nothing to route around: its death ends the server (exit 1) as it
  always has, and the process supervisor restarts the whole server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

from . import protocol as P
from .client import EngineClient, EngineDeadError, EngineStartError
from .process_config import EngineProcessConfig
from .request import AudioChunk, EngineRequest, EngineStats

log = logging.getLogger("cadence.server")

MAX_START_FAILURES = 5  # consecutive failed restarts before a replica is given up
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0)  # wait before the 2nd..5th consecutive restart attempt


class _Labelled(Protocol):
    def labels(self, *values: str) -> Any: ...


class ReplicaMetrics(Protocol):
    """What the pool reports (the server's prometheus Metrics): per-replica gauges and counters by
    the replica's index, and the engines' summed step statistics."""

    replica_up: _Labelled
    replica_requests: _Labelled
    replica_restarts: _Labelled

    def on_step(self, msg: P.StepOutput) -> None: ...


class ReplicaState(StrEnum):
    STARTING = "starting"  # first start: loading and warming up
    READY = "ready"
    RESTARTING = "restarting"  # its process died; a new one is loading
    FAILED = "failed"  # given up (or could not start at all)


@dataclass
class Replica:
    index: int
    config: EngineProcessConfig
    client: EngineClient
    state: ReplicaState = ReplicaState.STARTING
    restarts: int = 0
    start_failures: int = 0
    requests: int = 0  # routed to it since the server started

    @property
    def placement(self) -> str:
        codec = self.config.codec_device
        return self.config.device if codec is None else f"{self.config.device} (codec on {codec})"

    @property
    def serving(self) -> bool:
        return self.state is ReplicaState.READY and self.client.ready

    def load(self) -> tuple[int, float]:
        stats = self.client.stats
        return self.client.outstanding, stats.kv_pages_used / max(1, stats.kv_pages_total)

    def describe(self) -> dict:
        stats = self.client.stats
        return {
            "index": self.index,
            "state": self.state.value,
            "device": self.config.device,
            "codec_device": self.config.codec_device,
            "pid": self.client.pid,
            "outstanding": self.client.outstanding,
            "running": stats.running,
            "waiting": stats.waiting,
            "requests": self.requests,
            "restarts": self.restarts,
        }


class ReplicaPool:
    def __init__(
        self,
        configs: list[EngineProcessConfig],
        metrics: ReplicaMetrics,
        on_fatal: Callable[[str], None],
    ):
        """`on_fatal(reason)`: the server cannot serve any more (the only replica died, or every
        replica is given up)."""
        if not configs:
            raise ValueError("at least one replica")
        self.metrics = metrics
        self.on_fatal = on_fatal
        self.restart = len(configs) > 1
        self.replicas = [Replica(i, c, self._client(i, c)) for i, c in enumerate(configs)]
        self.info: P.EngineInfo | None = None  # of the first replica to be ready
        self._closing = False
        self._rotation = 0
        self._owners: dict[str, Replica] = {}  # request id -> the replica serving it
        self._tasks: set[asyncio.Task] = set()

    def _client(self, index: int, config: EngineProcessConfig) -> EngineClient:
        return EngineClient(
            config,
            on_death=lambda: self._on_death(index),
            on_step=lambda msg: self._on_step(index, msg),
        )

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        for r in self.replicas:
            self.metrics.replica_up.labels(str(r.index)).set(0)
            await r.client.start()

    async def wait_ready(self) -> P.EngineInfo:
        """Every replica loaded and warm (the server is ready once all are). Raises EngineStartError
        if any cannot start: a placement that does not work is a configuration error."""
        infos = await asyncio.gather(*(self._first_start(r) for r in self.replicas))
        return infos[0]

    async def _first_start(self, r: Replica) -> P.EngineInfo:
        try:
            info = await r.client.wait_ready()
        except EngineStartError as e:
            r.state = ReplicaState.FAILED
            prefix = f"replica {r.index} ({r.config.device}): " if len(self.replicas) > 1 else ""
            raise EngineStartError(f"{prefix}{e}") from None
        self._mark_ready(r, info)
        return info

    def _mark_ready(self, r: Replica, info: P.EngineInfo) -> None:
        r.state = ReplicaState.READY
        r.start_failures = 0
        self.info = self.info or info
        self.metrics.replica_up.labels(str(r.index)).set(1)

    async def shutdown(self, timeout: float = 10.0) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*(r.client.shutdown(timeout) for r in self.replicas))

    def kill(self) -> None:
        for r in self.replicas:
            r.client.kill()

    # -- what the server asks ---------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """At least one replica can take a request."""
        return any(r.serving for r in self.replicas)

    @property
    def dead(self) -> bool:
        """No replica serves and none is coming back (or, shutting down, every process has exited)."""
        return all(
            r.state is ReplicaState.FAILED or (r.state is ReplicaState.READY and r.client.dead) for r in self.replicas
        )

    @property
    def outstanding(self) -> int:
        return sum(r.client.outstanding for r in self.replicas)

    @property
    def capacity(self) -> int:
        """Streams the serving replicas may hold, running and queued."""
        return sum(r.client.info.max_streams + r.config.engine.max_queue for r in self.replicas if r.serving)

    @property
    def stats(self) -> EngineStats:
        return _sum_stats([r.client.stats for r in self.replicas if r.serving])

    def describe(self) -> list[dict]:
        return [r.describe() for r in self.replicas]

    def cancel_all(self) -> None:
        """Cancel every open request (the drain timeout ran out); each ends with a cancelled chunk."""
        for r in self.replicas:
            r.client.cancel_all()

    def synthesize(self, request: EngineRequest) -> AsyncIterator[AudioChunk]:
        """EngineClient.synthesize on the least loaded ready replica: the request is submitted now
        (EngineDeadError now if no replica serves), its chunks come through the iterator."""
        replica = self._pick()
        replica.requests += 1
        self.metrics.replica_requests.labels(str(replica.index)).inc()
        chunks = replica.client.synthesize(request)
        self._owners[request.request_id] = replica
        return self._relay(replica, request.request_id, chunks)

    async def _relay(self, replica: Replica, rid: str, chunks: AsyncIterator[AudioChunk]) -> AsyncIterator[AudioChunk]:
        try:
            async for chunk in chunks:
                yield chunk
        except EngineDeadError as e:
            if self.restart:
                raise EngineDeadError(f"engine replica {replica.index} failed: {e}; it restarts, retry") from None
            raise EngineDeadError(f"{e}; the server is shutting down") from None
        finally:
            self._owners.pop(rid, None)
            await chunks.aclose()

    def append_text(self, request_id: str, ids: list[int], done: bool, text_tokens: int) -> None:
        """More text of a running request whose text is still arriving, to the replica serving it."""
        if (replica := self._owners.get(request_id)) is not None:
            replica.client.append_text(request_id, ids, done, text_tokens)

    def _pick(self) -> Replica:
        candidates = [r for r in self.replicas if r.serving]
        if not candidates:
            raise EngineDeadError("no engine replica is ready")
        n = len(self.replicas)
        start = self._rotation
        self._rotation += 1
        return min(candidates, key=lambda r: (*r.load(), (r.index - start) % n))

    # -- engine events ----------------------------------------------------------------------------

    def _on_step(self, index: int, msg: P.StepOutput) -> None:
        serving = [r.client.stats for r in self.replicas if r.serving or r.index == index]
        total = replace(_sum_stats(serving), last_step_seconds=msg.stats.last_step_seconds)
        self.metrics.on_step(P.StepOutput([], total, msg.stepped))

    def _on_death(self, index: int) -> None:
        r = self.replicas[index]
        self.metrics.replica_up.labels(str(index)).set(0)
        if self._closing or r.state in (ReplicaState.STARTING, ReplicaState.RESTARTING):
            return  # shutting down, or it died while loading (wait_ready reports that)
        if not self.restart:
            r.state = ReplicaState.FAILED
            self.on_fatal("the engine process exited")
            return
        log.error("replica %d (pid %s) died; its open streams failed; restarting it", index, r.client.pid)
        r.state = ReplicaState.RESTARTING
        task = asyncio.get_running_loop().create_task(self._restart(r), name=f"cadence-replica-{index}-restart")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart(self, r: Replica) -> None:
        old = r.client
        with contextlib.suppress(Exception):
            await old.shutdown(timeout=1.0)  # the process is gone: this frees sockets and files
        while not self._closing:
            if r.start_failures:
                await asyncio.sleep(RESTART_BACKOFF_S[min(r.start_failures, len(RESTART_BACKOFF_S)) - 1])
            r.client = self._client(r.index, r.config)
            r.restarts += 1
            self.metrics.replica_restarts.labels(str(r.index)).inc()
            await r.client.start()
            try:
                info = await r.client.wait_ready()
            except EngineStartError as e:
                r.start_failures += 1
                log.error("replica %d failed to restart (%d in a row): %s", r.index, r.start_failures, e)
                with contextlib.suppress(Exception):
                    await r.client.shutdown(timeout=1.0)
                if r.start_failures >= MAX_START_FAILURES:
                    r.state = ReplicaState.FAILED
                    log.error("replica %d given up after %d failed starts", r.index, r.start_failures)
                    if self.dead:
                        self.on_fatal("every engine replica has failed")
                    return
                continue
            self._mark_ready(r, info)
            log.info("replica %d is back (pid %s, restart %d)", r.index, r.client.pid, r.restarts)
            return


def _sum_stats(stats: list[EngineStats]) -> EngineStats:
    out = EngineStats()
    for s in stats:
        out.running += s.running
        out.waiting += s.waiting
        out.kv_pages_used += s.kv_pages_used
        out.kv_pages_total += s.kv_pages_total
        out.steps += s.steps
        out.last_step_seconds = max(out.last_step_seconds, s.last_step_seconds)
        out.gc_collections += s.gc_collections
        out.gc_seconds += s.gc_seconds
        out.gc_longest_seconds = max(out.gc_longest_seconds, s.gc_longest_seconds)
        for reason, n in s.finished.items():
            out.finished[reason] = out.finished.get(reason, 0) + n
    return out
