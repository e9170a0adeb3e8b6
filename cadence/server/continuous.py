"""Continuous WebSocket input: one utterance spoken while its text is still being written.

With `"input_mode": "continuous"` every `input.text` delta joins the utterance being spoken, instead
of being cut into sentences that are each spoken on their own. A model that feeds its text one token
per audio frame (Qwen3-TTS's streaming text layout) can start speaking with the first words: the
text is tokenised as it arrives (the frontend's TextInPieces commits a token once no later text can
change it), the utterance's engine request starts with the first committed tokens and takes the rest
as they come (the engine's append_text), and a stream that has spoken all of its text waits, holding
its slot and pages but taking no GPU time. `input.done` ends the text and the model's end of text
follows, as in a one-shot request: the audio is exactly that of the one-shot request over the whole
text in the same layout, however the text was split and however long it took to come.

A session's utterances are spoken in order (an utterance after `input.done` may start generating
while the previous one is still being sent). An utterance whose text stops coming for the session's
input timeout is ended as if `input.done` had come, with an `error` event that says so.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ..models.interfaces import MoreTextNeeded
from . import errors as E
from .segment import OpenUtterance

if TYPE_CHECKING:
    from .state import ServerState

INPUT_MODES = ("sentence", "continuous")
INLINE_DELTA_CHARS = 2048  # larger deltas are segmented or tokenised in a worker thread


class ContinuousInput:
    """The continuous input of a WebSocket session (websocket.SpeechSession mixes it in): the open
    utterance's deltas, its start, its end and its input timeout."""

    state: ServerState
    open: OpenUtterance | None
    utterance: int

    async def _continue(self, delta: str) -> None:
        """A delta of the open utterance: its tokens to the engine as they are committed."""
        utt = self.open
        if utt is None:
            utt = self.open = OpenUtterance(self.state.frontend.text_in_pieces(), self.utterance)
        utt.received += delta
        utt.last_input = time.monotonic()
        push = utt.text.push
        ids = await asyncio.to_thread(push, delta) if len(delta) > INLINE_DELTA_CHARS else push(delta)
        if utt.committed > self.state.limits.max_input_tokens:
            limit = self.state.limits.max_input_tokens
            await self._send_error(
                E.too_large(f"the utterance's text is over {limit} tokens: it ends here", "text"),
                utterance_index=utt.index,
            )
            await self.flush()
            return
        if utt.segment is None:
            await self._start_open(utt, done=False)
        elif ids:
            self._feed(utt, ids, done=False)

    async def _end_open(self) -> None:
        """input.done for the open utterance: the rest of its text, and its end."""
        utt, self.open = self.open, None
        if utt is None:
            return
        rest = utt.text.finish()
        if utt.segment is None:
            if utt.text.ids:  # it never had enough text to start: spoken as a whole text
                await self._start_open(utt, done=True)
            return
        self._feed(utt, rest + self.state.frontend.end_of_text(), done=True)
        utt.segment.chars = len(utt.received)
        self.queued_chars += utt.segment.chars

    async def _start_open(self, utt: OpenUtterance, done: bool) -> None:
        if not utt.text.ids:
            return  # no token committed yet
        try:
            job = self._validate(utt.received, utt.text.tokens, text_open=not done)
        except MoreTextNeeded:
            return
        utt.segment = await self._enqueue(utt.received, job, utt.arrival, open=None if done else utt)
        if utt.segment is None and self.open is utt:  # refused: the rest of this utterance goes nowhere
            self.open = None

    def _feed(self, utt: OpenUtterance, ids: list[int], done: bool) -> None:
        if utt.submitted:
            self.state.engine.append_text(utt.segment.job.request_id, ids, done, utt.committed)
        else:
            utt.held.append((ids, done))

    async def input_timed_out(self) -> None:
        """The open utterance's text stopped coming: it ends as it is."""
        utt = self.open
        timeout = self.state.settings.ws_input_timeout
        await self._send_error(
            E.APIError(408, f"no text for {timeout:g} s: the utterance ends here", param="text", code="input_timeout"),
            utterance_index=utt.index,
        )
        await self.flush()

    def input_deadline(self) -> float | None:
        """When the open utterance times out (monotonic seconds), or None."""
        if self.open is None or self.open.segment is None:
            return None
        return self.open.last_input + self.state.settings.ws_input_timeout
