"""Comparing cadence's reference loop with the official implementation without being fooled by ties.

Random weights give greedy margins (top1 - top2) down to 1e-7, so a code can legitimately differ
where both implementations are within rounding of a tie. The comparison therefore:
1. runs the official greedy generate, recording its processed scores per step;
2. runs cadence teacher-forced on the official codes, recording its processed logits per step,
   so every step is compared under identical conditions (no divergence cascades);
3. requires logits within `tol` everywhere, and equal choices except where the official margin is
   below `tol` (a tie, counted and reported);
4. runs cadence free (greedy) and requires identical codes up to the first tie.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cadence.models.qwen3_tts import Prompt, Qwen3TTS, SamplingParams
from cadence.models.qwen3_tts.reference import generate

from official import Official, OfficialRun


@dataclass
class ParityReport:
    frames: int = 0  # frames compared (summed over rows)
    code0_max_err: float = 0.0
    codes_max_err: float = 0.0
    ties: int = 0  # choices that differ at a step whose official margin < tol
    first_tie: list[int | None] = field(default_factory=list)  # per row: step of the first tie
    free_run_equal_frames: int = 0  # frames equal in the free run, up to the first tie
    prefill_max_err: float = 0.0  # prefill and trailing embeddings

    def line(self) -> str:
        return (
            f"frames={self.frames} prefill_max_err={self.prefill_max_err:.2e} "
            f"code0_logits_max_err={self.code0_max_err:.2e} "
            f"codes_logits_max_err={self.codes_max_err:.2e} ties={self.ties} "
            f"free_run_equal_frames={self.free_run_equal_frames}"
        )


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max |a-b| over finite entries; -inf (masked) positions must agree exactly."""
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    assert torch.equal(fa, fb), "masked (-inf) positions differ"
    return float((a[fa] - b[fb]).abs().max()) if fa.any() else 0.0


def _margin(scores: torch.Tensor) -> torch.Tensor:
    top = scores.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def compare(
    ours: Qwen3TTS,
    official: Official,
    prompts: list[Prompt],
    texts: list[str],
    speakers: list[str] | None,
    languages: list[str],
    frames: int,
    streaming_layout: bool,
    instructs: list[str | None] | None = None,
    tol: float = 1e-4,
    clones: list | None = None,
) -> ParityReport:
    ref = official.generate(texts, speakers, languages, frames, streaming_layout, instructs, clones)
    report = ParityReport(first_tie=[None] * len(prompts))
    report.prefill_max_err = _check_prefill(ours, prompts, ref, tol=1e-5)
    params = SamplingParams(max_new_tokens=frames).greedy()
    forced = generate(ours, prompts, params, teacher=ref.codes, record=True)

    for step, (mine, theirs) in enumerate(zip(forced.trace, ref.code0_scores, strict=False)):
        report.code0_max_err = max(report.code0_max_err, _max_err(mine.code0_logits, theirs))
        for row in range(len(prompts)):
            if step >= len(ref.codes[row]):
                continue
            _check_choice(report, row, step, mine.code0_logits[row], theirs[row], int(ref.codes[row][step, 0]), tol)
            if mine.code_logits.shape[1] == 0:
                continue
            for j, cp_scores in enumerate(ref.cp_scores[step]):
                report.codes_max_err = max(report.codes_max_err, _max_err(mine.code_logits[row, j], cp_scores[row]))
                chosen = int(ref.codes[row][step, j + 1])
                _check_choice(report, row, step, mine.code_logits[row, j], cp_scores[row], chosen, tol)
    assert report.code0_max_err <= tol, f"code0 logits differ by {report.code0_max_err:.3g} > {tol}"
    assert report.codes_max_err <= tol, f"code-predictor logits differ by {report.codes_max_err:.3g} > {tol}"

    free = generate(ours, prompts, params)
    for row, gen in enumerate(free.generations):
        theirs = ref.codes[row]
        report.frames += len(theirs)
        upto = report.first_tie[row] if report.first_tie[row] is not None else len(theirs)
        assert gen.codes.shape[0] >= upto, f"row {row}: {gen.codes.shape[0]} frames, official {len(theirs)}"
        assert torch.equal(gen.codes[:upto], theirs[:upto]), f"row {row}: free-run codes differ before any tie"
        if report.first_tie[row] is None:
            assert gen.codes.shape == theirs.shape, f"row {row}: {tuple(gen.codes.shape)} vs {tuple(theirs.shape)}"
        report.free_run_equal_frames += upto
    return report


def _check_prefill(ours: Qwen3TTS, prompts: list[Prompt], ref: OfficialRun, tol: float) -> float:
    """The prefill embeddings (right-aligned: the official left-pads) and the trailing text equal the
    official ones: the same rows, the same lookups and additions. Not bit for bit: the official code
    projects the text ids segment by segment, cadence all rows at once, and a CPU matmul may round
    a row differently with the number of rows (~1 ulp). Returns the largest difference."""
    worst = 0.0
    for row, prompt in enumerate(prompts):
        mine = ours.prefill_embeddings(prompt).float()
        assert mine.shape[0] <= ref.prefill.shape[1], f"row {row}: our prompt is longer than the official"
        theirs = ref.prefill[row, ref.prefill.shape[1] - mine.shape[0] :]
        pad = ref.prefill[row, : ref.prefill.shape[1] - mine.shape[0]]
        assert not pad.any(), f"row {row}: the official prompt is longer than ours"
        trailing = ours.trailing_embeddings(prompt).float()
        official_trailing = ref.trailing[row]
        n = trailing.shape[0] - 1  # ours ends with the tts_pad that follows; the official pads with it
        assert official_trailing.shape[0] >= n, f"row {row}: our trailing text is longer"
        expected = torch.cat([trailing[:n], trailing[-1:].expand(official_trailing.shape[0] - n, -1)])
        worst = max(worst, _max_err(mine, theirs), _max_err(expected, official_trailing))
    assert worst <= tol, f"prefill/trailing embeddings differ by {worst:.3g} > {tol}"
    return worst


def _check_choice(
    report: ParityReport, row: int, step: int, mine: torch.Tensor, theirs: torch.Tensor, chosen: int, tol: float
) -> None:
    if int(mine.argmax()) == chosen:
        return
    margin = float(_margin(theirs))
    assert margin < tol, f"row {row} step {step}: choice differs with official margin {margin:.3g} >= {tol}"
    report.ties += 1
    if report.first_tie[row] is None or step < report.first_tie[row]:
        report.first_tie[row] = step
