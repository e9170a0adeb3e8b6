"""The reference generation loop: small, eager, and the oracle for every fast path.

One request or a lockstep batch, as the official `generate()` runs them: prompts left-padded,
every row decodes until all rows have stopped, each row cut at its first EOS. It can also be
teacher-forced (feed given codes instead of its own choices) and record the processed logits of
every step, which is how the parity tests tell a real mismatch from a near-tie.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .layers import ContiguousKVCache
from .logits import choose, mask_code0, repetition_penalty
from .model import Qwen3TTSModel
from .prompt import Prompt
from .sampling import MIN_NEW_TOKENS, SamplingParams


@dataclass
class StepTrace:
    """What one frame's choices were made from (fp32, after logits processing)."""

    code0_logits: torch.Tensor  # [B, vocab]
    code_logits: torch.Tensor  # [B, 15, cp_vocab]


@dataclass
class Generation:
    codes: torch.Tensor  # [frames, 16] long, EOS frame excluded
    finish_reason: str  # "stop" (EOS) or "length" (max_new_tokens)


@dataclass
class BatchResult:
    generations: list[Generation]
    trace: list[StepTrace] = field(default_factory=list)


@torch.no_grad()
def generate(
    model: Qwen3TTSModel,
    prompts: list[Prompt],
    params: SamplingParams,
    generator: torch.Generator | None = None,
    teacher: list[torch.Tensor] | None = None,
    record: bool = False,
    on_frame: Callable[[int], None] | None = None,
) -> BatchResult:
    """Generate the codes of `prompts` in lockstep.

    teacher: per prompt, codes [T,16] to feed instead of the model's choices (frame k of a row is
    forced while k < T; a row whose teacher ends is stopped as if it had emitted EOS).
    record: keep the processed logits of every step in the result's trace.
    """
    params.validate()
    cfg = model.config.talker
    dev = model.device
    b = len(prompts)
    eos = cfg.codec_eos_token_id
    if generator is None and params.seed is not None:
        generator = torch.Generator(device=dev).manual_seed(params.seed)

    hidden, cache, next_pos, text_track = _prefill(model, prompts)
    steps_text = text_track.shape[1] - 1
    history = torch.zeros(b, 0, dtype=torch.long, device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    frames: list[torch.Tensor] = []
    trace: list[StepTrace] = []

    for k in range(params.max_new_tokens):
        logits, code0 = _choose_code0(model, hidden, history, k, params, generator)
        forced = None
        if teacher is not None:
            forced = torch.stack([_teacher_frame(t, k, eos, cfg.num_code_groups, dev) for t in teacher])
            code0 = forced[:, 0]
        # Rows that already stopped keep feeding EOS, as HF's generate() pads finished rows.
        code0 = torch.where(done, torch.full_like(code0, eos), code0)
        history = torch.cat([history, code0[:, None]], dim=1)
        done = done | (code0 == eos)
        if bool(done.all()):
            if record:
                trace.append(StepTrace(logits, torch.empty(b, 0, device=dev)))
            break
        rest, cp_logits = _predict_codes(model, hidden, code0, params, generator, forced)
        frame = torch.cat([code0[:, None], rest], dim=1)
        frames.append(frame)
        if record:
            trace.append(StepTrace(logits, torch.stack(cp_logits, dim=1)))
        if on_frame is not None:
            on_frame(k)
        if k + 1 == params.max_new_tokens:
            break
        step_text = text_track[:, min(k, steps_text)]
        x = (model.talker.embed_frame(frame) + step_text)[:, None]
        hidden = model.talker(x, next_pos[:, None], cache.step(torch.ones(b, 1, dtype=torch.bool, device=dev)))
        hidden = hidden[:, 0]
        next_pos = next_pos + 1

    return BatchResult(_generations(frames, done, eos, cfg.num_code_groups), trace)


def _prefill(
    model: Qwen3TTSModel, prompts: list[Prompt]
) -> tuple[torch.Tensor, ContiguousKVCache, torch.Tensor, torch.Tensor]:
    """The prompts' prefill, left-padded: the last hidden state of each row [B, H], the KV cache,
    each row's next position, and the trailing text per row and step [B, steps + 1, H] (the last
    column tts_pad for every row)."""
    cfg = model.config.talker
    dev = model.device
    b = len(prompts)
    # Left-pad the prefills; positions count real tokens only.
    embeds = [model.prefill_embeddings(p) for p in prompts]
    longest = max(e.shape[0] for e in embeds)
    x = torch.zeros(b, longest, embeds[0].shape[1], dtype=model.dtype, device=dev)
    valid = torch.zeros(b, longest, dtype=torch.bool, device=dev)
    for i, e in enumerate(embeds):
        x[i, longest - e.shape[0] :] = e
        valid[i, longest - e.shape[0] :] = True
    positions = (valid.long().cumsum(1) - 1).clamp(min=0)
    next_pos = valid.sum(1)

    # Trailing text per row and step, padded with tts_pad (each row's last trailing row).
    trailing = [model.trailing_embeddings(p) for p in prompts]
    steps_text = max(t.shape[0] for t in trailing) - 1
    text_track = torch.stack(
        [torch.cat([t[:-1], t[-1:].expand(steps_text - (t.shape[0] - 1) + 1, -1)]) for t in trailing]
    )  # [B, steps_text + 1, H]; the last column is tts_pad for every row

    cache = ContiguousKVCache(cfg.num_hidden_layers)
    hidden = model.talker(x, positions, cache.step(valid))[:, -1]
    return hidden, cache, next_pos, text_track


def _choose_code0(
    model: Qwen3TTSModel,
    hidden: torch.Tensor,
    history: torch.Tensor,
    k: int,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame k's first code: the talker's logits processed as the official order has it (penalty,
    control tokens and the EOS ban, then temperature, top-k, top-p). Returns (processed logits, code0)."""
    cfg = model.config.talker
    logits = model.talker.codec_head(hidden).float()
    logits = repetition_penalty(logits, history, params.repetition_penalty)
    logits = mask_code0(logits, cfg.codec_eos_token_id, cfg.suppressed_code0_range, ban_eos=k < MIN_NEW_TOKENS)
    code0 = choose(logits, params.do_sample, params.temperature, params.top_k, params.top_p, generator)
    return logits, code0


def _predict_codes(
    model: Qwen3TTSModel,
    hidden: torch.Tensor,
    code0: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    forced: torch.Tensor | None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Codes 1-15 of the frame from the code predictor (the teacher's where `forced`), and the
    logits each was chosen from."""
    cp_logits: list[torch.Tensor] = []

    def pick(j: int, cp_scores: torch.Tensor) -> torch.Tensor:
        cp_logits.append(cp_scores)
        code = choose(
            cp_scores,
            params.subtalker_dosample,
            params.subtalker_temperature,
            params.subtalker_top_k,
            params.subtalker_top_p,
            generator,
        )
        return code if forced is None else forced[:, j + 1]

    return model.talker.predict_codes(hidden, code0, pick), cp_logits


def _generations(frames: list[torch.Tensor], done: torch.Tensor, eos: int, groups: int) -> list[Generation]:
    """Each row's codes cut at its first EOS frame (stop), or all of them (length)."""
    b = done.shape[0]
    codes = torch.stack(frames, dim=1) if frames else torch.zeros(b, 0, groups, dtype=torch.long)
    generations = []
    for i in range(b):
        stops = (codes[i, :, 0] == eos).nonzero()
        if len(stops):
            generations.append(Generation(codes[i, : int(stops[0])].cpu(), "stop"))
        elif bool(done[i]):  # stopped on the step that ended the loop: no EOS frame was stored
            generations.append(Generation(codes[i].cpu(), "stop"))
        else:
            generations.append(Generation(codes[i].cpu(), "length"))
    return generations


@dataclass
class GreedyMiss:
    """A code that is not the model's argmax: frame, codebook, the code chosen, how much the model's
    logits preferred their own top choice over it (top1 - chosen), and the model's own margin
    between its two best (top1 - top2: below rounding's reach, a near-tie either may flip)."""

    frame: int
    codebook: int
    chosen: int
    margin: float
    gap: float


def greedy_misses(
    model: Qwen3TTSModel, prompt: Prompt, params: SamplingParams, codes: torch.Tensor
) -> list[GreedyMiss]:
    """Teacher-force `model` on `codes` [T, 16] (another walk's greedy choices for `prompt`) and
    return every code that is not the model's own argmax at that step, with its margin."""
    trace = generate(model, [prompt], params, teacher=[codes.to(model.device)], record=True).trace
    misses = []
    for k in range(codes.shape[0]):
        scores = [trace[k].code0_logits[0]] + list(trace[k].code_logits[0])
        for j, s in enumerate(scores):
            chosen = int(codes[k, j])
            if int(s.argmax()) != chosen:
                top = s.topk(2).values
                misses.append(GreedyMiss(k, j, chosen, float(top[0] - s[chosen]), float(top[0] - top[1])))
    return misses


def _teacher_frame(codes: torch.Tensor, k: int, eos: int, groups: int, dev: torch.device) -> torch.Tensor:
    if k < codes.shape[0]:
        return codes[k].to(dev)
    frame = torch.zeros(groups, dtype=torch.long, device=dev)
    frame[0] = eos
    return frame
