"""The engine-core process: loads the model, warms it up, freezes the start-up heap out of the
garbage collector's walks (cadence/gc_pauses.py), then steps the core in a tight loop.

    loop: drain ZMQ inputs (submits, cancels) -> core.step() -> send the step's chunks and stats

While the device still runs the last step (EngineConfig.step_on_idle) the loop keeps draining its
inbox instead of stepping, so a request that comes meanwhile is admitted by the step that follows,
on an idle device.

It never waits on HTTP: when there is work it only polls its inbox without blocking; when idle it
blocks on the inbox for at most IDLE_POLL_S. It ignores SIGINT/SIGTERM (the API process owns
shutdown and drains first) and exits on its own when the API process disappears. An exception that
escapes core.step() is an engine bug that leaves the core in an unknown state: the process exits
non-zero, and the API answers 503 and exits too, rather than serving from a broken core.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

import msgspec
import torch
import zmq

from ..gc_pauses import GcPauses, freeze_startup_heap
from . import protocol as P
from .config import EngineConfig
from .core import EngineCore
from .engine import build_core
from .partition import ModelRuntime
from .process_config import EngineProcessConfig
from .request import EngineStats, FinishReason, QueueFullError, RequestTooLargeError

log = logging.getLogger("cadence.engine")

IDLE_POLL_S = 0.1  # longest the idle loop blocks on its inbox
HEARTBEAT_S = 1.0  # idle stats messages (also how often the parent is checked)


def run(cfg: EngineProcessConfig) -> None:
    """The process entry point (client.py's spawn target calls it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    who = "%(name)s" if cfg.replica is None else f"%(name)s[replica {cfg.replica}]"
    logging.basicConfig(level=cfg.log_level, format=f"%(asctime)s %(levelname)s {who}: %(message)s")
    torch.set_grad_enabled(False)
    if cfg.device.startswith("cuda:"):
        # CUDA graph capture and new streams use the current device, not the tensors' device.
        torch.cuda.set_device(cfg.device)
    ctx = zmq.Context()
    inbox = ctx.socket(zmq.PULL)
    inbox.connect(cfg.input_address)
    outbox = ctx.socket(zmq.PUSH)
    outbox.setsockopt(zmq.SNDHWM, 0)  # never block the loop on a slow reader; the reader is local
    outbox.connect(cfg.output_address)
    code = 0
    try:
        model, core, info = load(cfg)
    except Exception as e:
        log.exception("engine failed to start")
        outbox.send(P.encode(P.Failed(f"{type(e).__name__}: {e}")))
        code = 1
    else:
        freeze_startup_heap()  # the model, graphs and imports: never walked by a collection again
        outbox.send(P.encode(P.Ready(info)))
        decoder = P.input_decoder(model.prompt_type, model.params_type)
        try:
            EngineLoop(core, inbox, outbox, os.getppid(), decoder).run()
        except Exception:
            log.exception("engine loop failed; exiting")
            code = 1
    inbox.close(linger=0)
    outbox.close(linger=1000)  # let the last messages (final chunks, Failed) reach the API
    ctx.term()
    sys.exit(code)


def load(cfg: EngineProcessConfig) -> tuple[ModelRuntime, EngineCore, P.EngineInfo]:
    """Weights (or random weights, as the model family's loader reads cfg.model), the core sized by
    the engine config, and a warm-up synthesis."""
    start = time.monotonic()
    model = cfg.loader(cfg.model)
    if model.device.type == "cpu":
        # Leave a core to the API process (HTTP, audio encoding): OpenMP threads that compete for
        # every core spin against it, and a step can take ten times as long.
        threads = cfg.cpu_threads or max(1, len(os.sched_getaffinity(0)) - 1)
        torch.set_num_threads(threads)
        log.info("CPU inference with %d torch thread%s", threads, "" if threads == 1 else "s")
    core = build_core(model, cfg.engine, cfg.codec_device)
    kv = core.talker.kv
    log.info(
        "loaded %s in %.1f s; KV cache %d pages x %d tokens = %d tokens; %d streams",
        cfg.model_name, time.monotonic() - start, kv.num_pages, kv.page_size, kv.num_pages * kv.page_size,
        core.config.max_streams,
    )  # fmt: skip
    warmup_s = warm_up(model, core, cfg.engine, cfg.warmup_frames)
    info = P.EngineInfo(
        model=cfg.model_name,
        model_size=model.describe(),
        device=str(model.device),
        codec_device=str(core.codec.device) if core.codec.device != model.device else None,
        dtype=str(model.dtype).removeprefix("torch."),
        random_weights=cfg.model.random_weights,
        max_streams=core.config.max_streams,
        max_queue=cfg.engine.max_queue,
        kv_pages_total=kv.num_pages,
        page_size=kv.page_size,
        kv_bytes=kv.nbytes,  # as allocated: a fraction of free memory would be read after the allocation
        sample_rate=model.sample_rate,
        warmup_seconds=warmup_s,
    )
    return model, core, info


def warm_up(model: ModelRuntime, core: EngineCore, config: EngineConfig, frames: int) -> float:
    """One short synthesis through every walk (prefill, decode, growing codec chunks), so the first
    real request does not pay for lazy initialisation; /ready turns 200 only after it. The model
    makes the request (seeded: every start samples the same warm-up)."""
    start = time.monotonic()
    if frames <= 0:
        return 0.0
    core.add_request(model.warmup_request(frames, config.max_input_tokens))
    finished = None
    while core.has_work():
        for chunk in core.step():
            if chunk.is_final:
                finished = chunk
    if finished is None or finished.finish_reason is not FinishReason.LENGTH:
        reason = finished.error if finished is not None else "no final chunk"
        raise RuntimeError(f"warm-up synthesis failed: {reason}")
    seconds = time.monotonic() - start
    log.info("warm-up synthesis of %d frames took %.2f s", frames, seconds)
    return seconds


class EngineLoop:
    def __init__(
        self, core: EngineCore, inbox: zmq.Socket, outbox: zmq.Socket, parent_pid: int, decoder: msgspec.msgpack.Decoder
    ):
        self.core = core
        self.decoder = decoder  # P.input_decoder for the model's request types
        self.inbox = inbox
        self.outbox = outbox
        self.parent_pid = parent_pid
        self.stopping = False
        self._last_sent = 0.0
        self._last_parent_check = time.monotonic()
        self.gc_pauses = GcPauses().install()

    def run(self) -> None:
        while True:
            busy = self.core.has_work()
            if self.inbox.poll(0 if busy else int(IDLE_POLL_S * 1000)):
                self._drain_inbox()
            if self.stopping:
                self._cancel_all()
                return
            now = time.monotonic()
            if now - self._last_parent_check >= HEARTBEAT_S:
                self._last_parent_check = now
                if os.getppid() != self.parent_pid:  # reparented: the API process died without a Shutdown
                    log.warning("the API process is gone; exiting")
                    return
            if self.core.has_work():
                if not self.core.ready():
                    continue  # the device still runs the last step: the inbox is polled again meanwhile
                chunks = self.core.step()
                self._send(P.StepOutput([P.Chunk.from_audio(c) for c in chunks], self._stats(), True))
            elif now - self._last_sent >= HEARTBEAT_S:
                self._send(P.StepOutput([], self._stats(), False))

    def _stats(self) -> EngineStats:
        stats, pauses = self.core.stats, self.gc_pauses
        stats.gc_collections, stats.gc_seconds = pauses.collections, pauses.seconds
        stats.gc_longest_seconds = pauses.longest_seconds
        return stats

    def _drain_inbox(self) -> None:
        while True:
            try:
                data = self.inbox.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            msg = self.decoder.decode(data)
            if isinstance(msg, P.Submit):
                self._add(msg.request)
            elif isinstance(msg, P.Cancel):
                self.core.cancel(msg.request_id)
            elif isinstance(msg, P.AppendText):
                try:
                    self.core.append_text(msg.request_id, msg.ids, msg.done, msg.text_tokens)
                except ValueError as e:  # text for a request whose text had ended: an API bug
                    log.error("text for request %s refused: %s", msg.request_id, e)
            elif isinstance(msg, P.Shutdown):
                self.stopping = True

    def _add(self, request) -> None:
        try:
            self.core.add_request(request)
        except QueueFullError as e:
            self._send(P.Rejected(request.request_id, str(e), e.retry_after))
        except RequestTooLargeError as e:
            self._send(P.Rejected(request.request_id, str(e), 0.0, e.prompt_too_long))
        except ValueError as e:  # a duplicate id: an API bug, refused without touching the other stream
            log.error("request %s refused: %s", request.request_id, e)
            self._send(P.Rejected(request.request_id, str(e), 0.0))

    def _cancel_all(self) -> None:
        """Shutdown: cancel what is left and step until every stream has its final chunk."""
        for rid in list(self.core.streams):
            self.core.cancel(rid)
        while self.core.has_work():
            chunks = self.core.step()
            self._send(P.StepOutput([P.Chunk.from_audio(c) for c in chunks], self._stats(), True))

    def _send(self, msg: P.StepOutput | P.Rejected) -> None:
        self.outbox.send(P.encode(msg))
        self._last_sent = time.monotonic()
