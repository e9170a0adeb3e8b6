"""What one sampling call takes and where its results go: the sampler's arguments as types, the same
for the PyTorch definition and the Triton and CUDA kernels.

A decode step samples code0 (its history for the repetition penalty, the EOS rule, the token's
embedding for the code predictor's next step) and 15 more codes (the embedding only, and none for
the last). Every per-row table is read at logits row i, or with `rows` at row rows[i]: a walk passes
the slot-indexed state and its slots, so no gather kernel runs before the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class RowParams:
    """Per-row sampling parameters, each a [B] tensor on the logits' device."""

    do_sample: torch.Tensor  # bool
    temperature: torch.Tensor  # float
    top_k: torch.Tensor  # long, 0 = off
    top_p: torch.Tensor  # float, 1.0 = off

    def take(self, rows: torch.Tensor) -> RowParams:
        """The parameters of table rows `rows` (e.g. a batch's slots)."""
        return RowParams(self.do_sample[rows], self.temperature[rows], self.top_k[rows], self.top_p[rows])


@dataclass(frozen=True)
class CodeHistory:
    """The codes a row has chosen before, for the repetition penalty: `seen` [rows, V] bool
    (contiguous), `penalty` [rows]; `record` adds each chosen token to `seen`."""

    seen: torch.Tensor
    penalty: torch.Tensor
    record: bool = False


@dataclass(frozen=True)
class EosRule:
    """The control tokens' mask: codes from `suppress_start` on are banned except `eos_id`, which is
    banned where `ban` [rows] is set or the row's frame counter is below `min_frames`."""

    ban: torch.Tensor
    eos_id: int
    suppress_start: int
    min_frames: int = 0


@dataclass(frozen=True)
class TokenSampling:
    """One sampling call: per-row parameters, seeds and frame counters (the noise is a function of
    seed, frame, `codebook` and column), optionally read through `rows`, with the repetition
    penalty where `history` is given and the control-token mask where `eos` is."""

    params: RowParams
    seed: torch.Tensor
    frame: torch.Tensor
    codebook: int
    rows: torch.Tensor | None = None
    history: CodeHistory | None = None
    eos: EosRule | None = None


@dataclass(frozen=True)
class TokenOutputs:
    """Where a sampling call writes: the tokens [n] long to `tokens` (a view, say a column of the
    frame) or a new tensor; with `embed_table`, `embed_out` [n, H] receives each token's row of it
    (the next step's input embedding, gathered by the sampler instead of a lookup kernel)."""

    tokens: torch.Tensor | None = None
    embed_table: torch.Tensor | None = None
    embed_out: torch.Tensor | None = None


NEW_TOKENS = TokenOutputs()  # the tokens to a new tensor, no embedding rows
