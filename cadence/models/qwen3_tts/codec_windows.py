"""The official package's windowed decode, reproduced by the streaming codec (`--codec-decode chunked`).

The official package decodes an utterance of more than 300 frames (24 s) in windows: frames
[s, s + 300) come from a cold decoder fed frames [s - 25, s + 300), the first 25 frames' audio
dropped (`CodecDecoder.chunked_decode`). That bounds its memory, and adds a seam at every window
start: the decoder's receptive field is wider than 25 frames (its transformer alone sees 72), so
from frame 300 on its audio differs from the exact decode of the whole utterance (by up to ~0.4 on
the full-size codec with random weights).

cadence's streaming decoder is exact by default: its carried state makes every chunk equal the
whole utterance's decode, at any length. `CodecWindows` makes it reproduce the official windows
instead, for bit-parity with `qwen-tts` past 24 s: when a stream reaches a window start it drops
the stream's state, feeds the decoder the window's context frames (their audio discarded), and goes
on from there, exactly as the official decode starts each window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .codec import OFFICIAL_CHUNK_FRAMES, OFFICIAL_LEFT_CONTEXT_FRAMES
from .codec_stream import StreamingCodecDecoder

BatchDecode = Callable[[list[int], torch.Tensor], torch.Tensor]


class CodecWindows:
    """Per-slot positions and recent frames, and the decode that restarts streams at window starts."""

    def __init__(
        self,
        decoder: StreamingCodecDecoder,
        slots: int,
        device: torch.device,
        window: int = OFFICIAL_CHUNK_FRAMES,
        context: int = OFFICIAL_LEFT_CONTEXT_FRAMES,
    ):
        if not 0 <= context < window:
            raise ValueError(f"the left context ({context}) must be shorter than the window ({window})")
        self.decoder = decoder
        self.window = window
        self.context = context
        self.position = [0] * slots  # frames of each stream decoded so far (a clone's reference included)
        q = decoder.cfg.num_quantizers
        self.recent = torch.zeros(slots, context, q, dtype=torch.long, device=device)  # the last `context` frames

    def reset(self, slots: Sequence[int]) -> None:
        for slot in slots:
            self.position[slot] = 0

    def _restarts(self, position: int, count: int) -> list[int]:
        """Offsets among a stream's next `count` frames, from frame `position` on, where a window
        starts (frame 0 is the first window's, which a cold decoder starts anyway)."""
        first = max(-(-position // self.window) * self.window, self.window)
        return list(range(first - position, count, self.window))

    def decode(self, slots: list[int], frames: torch.Tensor, batch_decode: BatchDecode) -> torch.Tensor:
        """`frames` [B, F, 16] of `slots` -> audio [B, F * samples_per_frame]: streams that reach no
        window start through `batch_decode` (graphs, batching), the others one by one."""
        count = frames.shape[1]
        restarting = {i for i, slot in enumerate(slots) if self._restarts(self.position[slot], count)}
        if not restarting:
            audio = batch_decode(slots, frames)
        else:
            steady = [i for i in range(len(slots)) if i not in restarting]
            parts: dict[int, torch.Tensor] = {}
            if steady:
                rows = torch.tensor(steady, device=frames.device)
                decoded = batch_decode([slots[i] for i in steady], frames.index_select(0, rows))
                parts.update(zip(steady, decoded, strict=True))
            for i in sorted(restarting):
                parts[i] = self._decode_across(slots[i], frames[i])
            audio = torch.stack([parts[i] for i in range(len(slots))])
        self._remember(slots, frames)
        return audio

    def _decode_across(self, slot: int, frames: torch.Tensor) -> torch.Tensor:
        """One stream's frames [F, 16], the decoder restarted at each window start among them."""
        position, count = self.position[slot], frames.shape[0]
        bounds = [0, *self._restarts(position, count), count]
        pieces = []
        for k in range(len(bounds) - 1):
            begin, end = bounds[k], bounds[k + 1]
            if k > 0:  # a window starts at `begin`: a cold decoder fed its context first
                start = position + begin
                context = self.context if start - self.context > 0 else start  # the official rule
                history = torch.cat([self.recent[slot], frames[:begin]])[-context:] if context else None
                self.decoder.reset([slot])
                if history is not None:
                    self.decoder.decode([slot], history[None])  # its audio is the last window's: dropped
            if end > begin:
                pieces.append(self.decoder.decode([slot], frames[None, begin:end])[0])
        return torch.cat(pieces)

    def _remember(self, slots: list[int], frames: torch.Tensor) -> None:
        for slot in slots:
            self.position[slot] += frames.shape[1]
        if self.context:
            idx = torch.tensor(slots, device=self.recent.device)
            joined = torch.cat([self.recent.index_select(0, idx), frames.to(self.recent.device).long()], dim=1)
            self.recent.index_copy_(0, idx, joined[:, -self.context :])
