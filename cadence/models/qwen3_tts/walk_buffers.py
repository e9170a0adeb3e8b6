"""The fast walk's buffers and indices (fast_step.FastDecoder): what its CUDA graphs write and read
besides the model's weights and the slot state, and where the code predictor's query rows sit."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PrefillGraph:
    """A captured prefill of `inputs.shape[1]` token rows (the prompt embeddings included) and its
    input buffers: one host->device copy of `inputs` a prefill, `extra` only for cloned voices."""

    graph: torch.cuda.CUDAGraph
    inputs: torch.Tensor  # [9, rows] int64 (see FastDecoder._prefill_inputs)
    extra: torch.Tensor  # [rows, H]: codec-track embeddings replaced where inputs[4] is 1


@dataclass
class WalkInputs:
    """What a walk's talker layers read besides its frame, per batch row. None of it depends on the
    frame, so frame() gathers it beside the code predictor."""

    text: torch.Tensor  # [B, H] the step's trailing-text embedding (tts_pad's past the text)
    step: torch.Tensor  # [B] frames generated before this one
    position: torch.Tensor  # [B] the frame's talker position
    context: torch.Tensor  # [B] position + 1: the tokens it attends over
    block_table: torch.Tensor  # [B, pages]
    slot_index: torch.Tensor  # [B] the flat KV-cache slot its key and value go to


@dataclass
class DecodeGraph:
    """One batch bucket's walk as two captured graphs over shared buffers: `frame` writes `frames`,
    `eos` and `inputs` for the slots in `slots`; `advance` runs the talker layers over those frames."""

    frame: torch.cuda.CUDAGraph
    advance: torch.cuda.CUDAGraph
    slots: torch.Tensor  # [bucket] slot per row, the dummy slot in padding rows
    frames: torch.Tensor  # [bucket, 16]
    eos: torch.Tensor  # [bucket]
    inputs: WalkInputs  # written by `frame`, read by `advance`
    host_slots: tuple[int, ...] = ()  # the batch `slots` holds now: an unchanged batch copies nothing


@dataclass(frozen=True)
class CodePredictorIndex:
    """Where each code-predictor query row sits, made once for up to `rows` batch rows: positions,
    context lengths, cache pages (row r's one 16-token page is cache row r) and flat cache slots.
    A walk takes prefixes of them, which costs no kernel, instead of building them per step.

    first_*: the first step's 2R rows (talker hidden, code0 embedding) at positions 0, 1 of each
    row; step_*[j]: step j's R rows at position j + 2."""

    first_pos: torch.Tensor  # [2R]
    first_ctx: torch.Tensor  # [2R]
    first_page: torch.Tensor  # [2R, 1]
    first_slot: torch.Tensor  # [2R]
    page: torch.Tensor  # [R, 1]
    step_pos: torch.Tensor  # [groups - 2, R]
    step_ctx: torch.Tensor  # [groups - 2, R]
    step_slot: torch.Tensor  # [groups - 2, R]

    @classmethod
    def build(cls, rows: int, groups: int, device: torch.device) -> CodePredictorIndex:
        r = torch.arange(rows, device=device)
        pos2 = torch.arange(2, device=device).repeat(rows)
        pos = torch.arange(2, groups, device=device)[:, None].expand(-1, rows).contiguous()
        return cls(
            first_pos=pos2, first_ctx=pos2 + 1, first_page=r.repeat_interleave(2)[:, None],
            first_slot=r.repeat_interleave(2) * groups + pos2, page=r[:, None],
            step_pos=pos, step_ctx=pos + 1, step_slot=r[None, :] * groups + pos,
        )  # fmt: skip
