"""The API process's handle on the engine-core process: spawn it, submit, stream chunks, cancel.

`synthesize()` has the shape of the in-process `Engine.synthesize`: an async iterator of AudioChunks
that cancels its request when closed early. The engine process is watched through its sentinel:
when it dies every open stream fails with EngineDeadError at once (nothing waits forever) and
`on_death` is called, so the server can answer 503 and exit non-zero.

No torch: the spawned process's target is `_engine_main`, which imports the engine process's
module (process.py: torch, the core) in the child only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import zmq
import zmq.asyncio

from . import protocol as P
from .process_config import EngineProcessConfig
from .request import AudioChunk, EngineRequest, EngineStats, QueueFullError, RequestTooLargeError

log = logging.getLogger("cadence.server")


def _engine_main(config: EngineProcessConfig) -> None:
    """The engine process's entry point: the spawned child imports process.py, the parent never does."""
    from .process import run

    run(config)


class EngineDeadError(RuntimeError):
    """The engine process has exited; no request can be served."""


class EngineStartError(RuntimeError):
    """The engine process failed while loading or warming up."""


class EngineClient:
    def __init__(
        self,
        config: EngineProcessConfig,
        on_death: Callable[[], None] | None = None,
        on_step: Callable[[P.StepOutput], None] | None = None,
    ):
        self.config = config
        self.on_death = on_death
        self.on_step = on_step
        self.info: P.EngineInfo | None = None
        self.stats = EngineStats()
        self.dead = False
        self._closing = False
        self._streams: dict[str, asyncio.Queue[AudioChunk | BaseException]] = {}
        self._ready: asyncio.Future[P.EngineInfo] | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._receiver: asyncio.Task | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="cadence-"))  # ipc socket files
        self._ctx = zmq.Context()
        self._actx = zmq.asyncio.Context()
        # Sending is synchronous and never blocks (no high-water mark, local peer): cancel() can run
        # from a generator's `finally` during cancellation, where awaiting is not possible.
        self._push = self._ctx.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, 0)
        self._pull = self._actx.socket(zmq.PULL)

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the engine process; `wait_ready()` then waits for its weights and warm-up."""
        loop = asyncio.get_running_loop()
        inp, out = f"ipc://{self._dir}/input", f"ipc://{self._dir}/output"
        self._push.bind(inp)
        self._pull.bind(out)
        self._ready = loop.create_future()
        config = replace(self.config, input_address=inp, output_address=out)
        # spawn, not fork: the engine initialises CUDA, which a forked child of a process holding
        # threads and sockets must not inherit.
        self._process = multiprocessing.get_context("spawn").Process(
            target=_engine_main, args=(config,), name="cadence-engine", daemon=True
        )
        self._process.start()
        loop.add_reader(self._process.sentinel, self._on_exit)
        self._receiver = asyncio.create_task(self._receive(), name="cadence-engine-receiver")

    async def wait_ready(self) -> P.EngineInfo:
        assert self._ready is not None, "start() first"
        return await asyncio.shield(self._ready)

    @property
    def ready(self) -> bool:
        return self.info is not None and not self.dead

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def outstanding(self) -> int:
        """Requests submitted and not finished (running or queued in the engine)."""
        return len(self._streams)

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Ask the engine to cancel what is left and exit; terminate it if it does not."""
        self._closing = True
        proc = self._process
        if proc is not None and proc.is_alive():
            self._send(P.Shutdown())
            await asyncio.to_thread(proc.join, timeout)
            if proc.is_alive():
                log.warning("engine process did not exit within %.0f s; terminating it", timeout)
                proc.terminate()
                await asyncio.to_thread(proc.join, 5)
            if proc.is_alive():
                proc.kill()
        if self._receiver is not None:
            self._receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._receiver
        self._push.close(linger=0)
        self._pull.close(linger=0)
        self._ctx.term()
        self._actx.term()
        shutil.rmtree(self._dir, ignore_errors=True)

    def kill(self) -> None:
        """Last resort when the API process leaves without a graceful shutdown (a second Ctrl-C):
        the engine ignores SIGTERM, and multiprocessing's exit handler would wait for it forever."""
        proc = self._process
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(5)

    # -- requests ---------------------------------------------------------------------------------

    def synthesize(self, request: EngineRequest) -> AsyncIterator[AudioChunk]:
        """Submit a request now and return its chunks as they come. Raises EngineDeadError now; the
        iterator raises QueueFullError (refused by the core), RequestTooLargeError or
        EngineDeadError; closing it before the final chunk cancels the request."""
        if self.dead or not self._send(P.Submit(request)):
            raise EngineDeadError("the engine process has exited")
        queue: asyncio.Queue[AudioChunk | BaseException] = asyncio.Queue()
        self._streams[request.request_id] = queue
        return self._chunks(request.request_id, queue)

    async def _chunks(self, rid: str, queue: asyncio.Queue[AudioChunk | BaseException]) -> AsyncIterator[AudioChunk]:
        finished = False
        try:
            while not finished:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True  # the engine has nothing of this request left to cancel
                    raise item
                finished = item.is_final
                yield item
        finally:
            self._streams.pop(rid, None)
            if not finished and not self.dead:
                self._send(P.Cancel(rid))

    def cancel(self, request_id: str) -> None:
        if not self.dead:
            self._send(P.Cancel(request_id))

    def append_text(self, request_id: str, ids: list[int], done: bool, text_tokens: int) -> None:
        """More text of a request submitted with its text still arriving."""
        if not self.dead:
            self._send(P.AppendText(request_id, ids, done, text_tokens))

    def cancel_all(self) -> None:
        for rid in list(self._streams):
            self.cancel(rid)

    def _send(self, msg: P.EngineInput) -> bool:
        """False when no engine is connected (it exited, or has not connected yet)."""
        try:
            self._push.send(P.encode(msg), zmq.NOBLOCK)
            return True
        except zmq.Again:
            log.debug("no engine process to send %s to", type(msg).__name__)
            return False

    # -- engine output ----------------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            msg = P.output_decoder.decode(await self._pull.recv())
            if isinstance(msg, P.StepOutput):
                self.stats = msg.stats
                for chunk in msg.chunks:
                    queue = self._streams.get(chunk.request_id)
                    if queue is not None:  # else: a cancelled request's last chunk
                        queue.put_nowait(chunk.to_audio())
                if self.on_step is not None:
                    self.on_step(msg)
            elif isinstance(msg, P.Rejected):
                queue = self._streams.get(msg.request_id)
                if queue is not None:
                    error = (
                        QueueFullError(msg.message, msg.retry_after)
                        if msg.retry_after > 0
                        else RequestTooLargeError(msg.message, msg.prompt_too_long)
                    )
                    queue.put_nowait(error)
            elif isinstance(msg, P.Ready):
                self.info = msg.info
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(msg.info)
            elif isinstance(msg, P.Failed):
                if self._ready is not None and not self._ready.done():
                    self._ready.set_exception(EngineStartError(msg.message))

    def _on_exit(self) -> None:
        """The engine process exited (the sentinel became readable)."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._process.sentinel)
        self.dead = True
        self._process.join(1.0)  # reap it: its exit code is known only then
        code = _describe_exit(self._process.exitcode)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(EngineStartError(f"the engine process exited ({code}) while starting"))
        if self._closing:
            return
        log.error("the engine process exited (%s); failing %d open requests", code, len(self._streams))
        for queue in self._streams.values():
            queue.put_nowait(EngineDeadError(f"the engine process exited ({code})"))
        if self.on_death is not None:
            self.on_death()


def _describe_exit(code: int | None) -> str:
    """An exit code as words: 'code 1', 'killed by SIGKILL'."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"code {code}"
