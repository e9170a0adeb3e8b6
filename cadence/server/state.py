"""What the API process holds: settings, the weightless frontend, voices, the engine replicas, metrics,
and the server's life cycle (loading -> ready -> draining, or dead when no engine process is left)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine import protocol as P
from ..engine.client import EngineStartError
from ..engine.config import EngineConfig
from ..engine.process_config import EngineProcessConfig
from ..engine.replicas import ReplicaPool
from ..gc_pauses import freeze_startup_heap
from ..models.interfaces import Frontend
from . import errors as E
from .http import FormLimits
from .metrics import Metrics
from .schema import OPENAI_MODELS, Limits
from .voices import VoiceTable

if TYPE_CHECKING:
    from .cloning import VoiceCloning

log = logging.getLogger("cadence.server")


@dataclass
class ServerSettings:
    model_name: str  # the id /v1/models lists and `model` may name
    api_key: str | None = None  # Bearer token every /v1 route requires, if set
    max_input_chars: int = 100_000  # a book chapter: longer than long_form_chars is spoken in pieces
    long_form_chars: int = 600  # an input longer than this is spoken as pieces of at most this (0: never)
    long_form_pause: float = 0.25  # seconds of silence between the pieces of a long input
    max_body_bytes: int = 1 << 20
    request_timeout: float = 600.0  # seconds, whole request
    drain_timeout: float = 30.0  # seconds open streams get to finish after SIGTERM; then they are cut off
    ws_max_message_bytes: int = 1 << 16  # one WebSocket message; uvicorn closes the socket (1009) past it
    ws_max_buffered_chars: int = 1 << 16  # text a WebSocket session holds unspoken; a delta past it is refused
    ws_input_timeout: float = 30.0  # seconds a continuous utterance waits for more text before it ends
    max_concurrent_uploads: int = 4  # requests carrying reference audio read and analysed at once; more wait
    ui: bool = True  # the playground page at /
    model_aliases: tuple[str, ...] = OPENAI_MODELS


class ServerState:
    # Voice cloning and saved voices, on a Base checkpoint (set by `cadence serve`; docs/api.md).
    cloning: VoiceCloning | None = None

    def __init__(
        self,
        settings: ServerSettings,
        frontend: Frontend,
        voices: VoiceTable,
        replicas: list[EngineProcessConfig],
        on_ready: Callable[[P.EngineInfo], None] | None = None,
    ):
        """`replicas`: one engine process per data-parallel replica (their engine configs alike)."""
        self.settings = settings
        self.frontend = frontend
        self.voices = voices
        self.engine_config: EngineConfig = replicas[0].engine
        self.metrics = Metrics()
        self.engine = ReplicaPool(replicas, self.metrics, on_fatal=self._on_engine_death)
        self.limits = Limits(
            settings.max_input_chars,
            self.engine_config.max_input_tokens,
            (settings.model_name, *[a for a in settings.model_aliases if a != settings.model_name]),
            self.engine_config.max_seq_tokens,
            settings.long_form_chars,
        )
        self.on_ready = on_ready
        self.started = time.time()
        self.draining = False
        self.drain_expired = False  # the drain timeout ran out: what is still open is being cut off
        self.exit_code = 0
        # Set by the runner: stop the HTTP server (graceful: it drains open responses first).
        self.request_exit: Callable[[], None] = lambda: None
        self._ready_task: asyncio.Task | None = None
        self._started_all = False  # every replica has been ready once (after that, any one will do)

    @property
    def sample_rate(self) -> int:
        return self.frontend.sample_rate

    @property
    def ready(self) -> bool:
        return self._started_all and self.engine.ready and not self.draining

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.engine.start()
        self._ready_task = asyncio.create_task(self._await_ready(), name="cadence-engine-ready")

    async def _await_ready(self) -> None:
        try:
            info = await self.engine.wait_ready()
        except EngineStartError as e:
            log.error("the engine failed to start: %s", e)
            self._fail()
            return
        self.metrics.kv_pages_total.set(info.kv_pages_total)
        freeze_startup_heap()  # what start-up made, never walked by a collection again
        self.metrics.api_gc.install()
        self._started_all = True
        self.metrics.ready.set(1)
        if self.on_ready is not None:
            self.on_ready(info)

    async def stop(self, timeout: float = 10.0) -> None:
        self.draining = True
        self.metrics.ready.set(0)
        self.metrics.api_gc.uninstall()
        if self._ready_task is not None:
            self._ready_task.cancel()
        await self.engine.shutdown(timeout)

    def begin_drain(self) -> None:
        """SIGTERM: refuse new requests (503) while open streams finish; after `drain_timeout` the
        ones still open are cancelled in the engine and end with a `draining` error of their own."""
        if not self.draining:
            log.info("draining: %d requests in flight", self.engine.outstanding)
            with contextlib.suppress(RuntimeError):  # no loop: nothing is open to cut
                loop = asyncio.get_running_loop()
                loop.call_soon_threadsafe(loop.call_later, self.settings.drain_timeout, self._cut_open_requests)
        self.draining = True
        self.metrics.ready.set(0)

    def _cut_open_requests(self) -> None:
        if self.engine.outstanding:
            log.warning("the drain timeout ran out: cutting off %d open requests", self.engine.outstanding)
        self.drain_expired = True
        self.engine.cancel_all()

    def _on_engine_death(self, reason: str) -> None:
        log.error("%s: the server cannot serve any more and exits", reason)
        self._fail()

    def _fail(self) -> None:
        self.exit_code = 1
        self.metrics.ready.set(0)
        self.request_exit()

    def form_limits(self) -> FormLimits:
        """What a multipart form may hold here: a reference audio file only on a Base server."""
        if self.cloning is None:
            kind = self.frontend.capabilities().kind
            reason = f"needs a base checkpoint (voice cloning); this is {kind}"
            return FormLimits(self.settings.max_body_bytes, 0, reason)
        return FormLimits(self.settings.max_body_bytes, self.cloning.limits.max_bytes)

    # -- admission --------------------------------------------------------------------------------

    def check_serving(self) -> None:
        """503 unless a request can be taken now; 429 when the engine holds all it may."""
        if self.engine.dead:
            raise E.unavailable("the engine process has exited; the server is shutting down", "engine_dead")
        if self.draining:
            raise E.unavailable("the server is shutting down", "draining")
        if not self.engine.ready:
            if self.engine.info is not None:  # it was ready: every replica is restarting
                raise E.unavailable("no engine replica is ready (restarting); retry shortly", "not_ready")
            raise E.unavailable("the model is still loading; poll GET /ready", "not_ready")
        if self.engine.outstanding >= self.engine.capacity:
            # Decided here so that a full server answers at once, without a round trip to the engine.
            step = self.engine.stats.last_step_seconds
            replicas = len(self.engine.replicas)
            per = f" in each of {replicas} replicas" if replicas > 1 else ""
            raise E.queue_full(
                f"the server is at capacity ({self.engine.info.max_streams} streams generating, "
                f"{self.engine_config.max_queue} queued{per}); retry later",
                retry_after=max(1.0, step * 50),
            )
