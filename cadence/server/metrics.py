"""Prometheus metrics (GET /metrics), one registry per server.

Request-side numbers are measured in the API process (from the request's arrival to the first
audio byte handed to the connection); engine-side gauges mirror the stats the engine process
sends after every step.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..engine import protocol as P
from ..gc_pauses import GcPauses

# Seconds to first audio: a few ms (warm GPU, idle) to seconds (queued under load).
TTFA_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)
RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0)
STAGE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0)
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.0)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "cadence_requests", "Requests answered, by route and HTTP status", ["route", "status"], registry=r
        )
        self.finished = Counter(
            "cadence_finished", "Synthesis requests finished, by finish_reason", ["reason"], registry=r
        )
        self.ttfa = Histogram(
            "cadence_ttfa_seconds", "Request arrival to the first audio sent", buckets=TTFA_BUCKETS, registry=r
        )
        self.first_audio_stage = Histogram(
            "cadence_first_audio_stage_seconds",
            "Time to first audio by stage of its path (api, to_engine, queue, prefill, codec, to_api)",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.rtf = Histogram(
            "cadence_rtf", "Real-time factor per request: wall seconds / audio seconds", buckets=RTF_BUCKETS, registry=r
        )
        self.audio_seconds = Counter("cadence_audio_seconds", "Audio seconds delivered", registry=r)
        self.input_chars = Counter("cadence_input_characters", "Characters of input text synthesised", registry=r)
        self.inflight = Gauge(
            "cadence_inflight_requests", "Requests submitted to the engine and not finished", registry=r
        )
        self.active_streams = Gauge("cadence_active_streams", "Streams generating in the engine", registry=r)
        self.queue_depth = Gauge("cadence_queue_depth", "Requests waiting in the engine's queue", registry=r)
        self.kv_pages_used = Gauge("cadence_kv_pages_used", "KV-cache pages in use", registry=r)
        self.kv_pages_total = Gauge("cadence_kv_pages_total", "KV-cache pages in all", registry=r)
        self.step_seconds = Histogram(
            "cadence_engine_step_seconds", "Engine step time", buckets=STEP_BUCKETS, registry=r
        )
        self.engine_steps = Gauge("cadence_engine_steps", "Engine steps run since start", registry=r)
        # Python's garbage collections, by process (engine: all replicas'; api: this process):
        # cadence/gc_pauses.py says why a long one matters.
        self.gc_collections = Gauge(
            "cadence_gc_collections", "Garbage collections since start", ["process"], registry=r
        )
        self.gc_seconds = Gauge("cadence_gc_seconds", "Time in garbage collection since start", ["process"], registry=r)
        self.gc_longest = Gauge(
            "cadence_gc_longest_pause_seconds", "The longest garbage collection since start", ["process"], registry=r
        )
        self.api_gc = GcPauses()
        # Both series exist from the start, so a reading taken as the server turns ready finds them: each
        # process counts from 0 once it serves (the engine's hook is installed as its loop starts).
        for process in ("engine", "api"):
            self._set_gc(process, 0, 0.0, 0.0)
        self.ready = Gauge("cadence_ready", "1 when the server accepts requests", registry=r)
        # Data-parallel replicas (cadence/server/replicas.py); the engine gauges above sum over them.
        self.replica_up = Gauge("cadence_replica_up", "1 while the replica serves", ["replica"], registry=r)
        self.replica_requests = Counter(
            "cadence_replica_requests", "Requests routed to the replica", ["replica"], registry=r
        )
        self.replica_restarts = Counter(
            "cadence_replica_restarts", "Restarts of the replica's engine process", ["replica"], registry=r
        )

    def on_step(self, msg: P.StepOutput) -> None:
        s = msg.stats
        self.active_streams.set(s.running)
        self.queue_depth.set(s.waiting)
        self.kv_pages_used.set(s.kv_pages_used)
        self.kv_pages_total.set(s.kv_pages_total)
        self.engine_steps.set(s.steps)
        if msg.stepped:
            self.step_seconds.observe(s.last_step_seconds)
        self._set_gc("engine", s.gc_collections, s.gc_seconds, s.gc_longest_seconds)

    def render(self) -> bytes:
        gc = self.api_gc
        self._set_gc("api", gc.collections, gc.seconds, gc.longest_seconds)
        return generate_latest(self.registry)

    def _set_gc(self, process: str, collections: int, seconds: float, longest: float) -> None:
        self.gc_collections.labels(process).set(collections)
        self.gc_seconds.labels(process).set(seconds)
        self.gc_longest.labels(process).set(longest)
