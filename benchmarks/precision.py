"""How far bf16 is from fp32: logits error and greedy agreement, teacher-forced.

    python benchmarks/precision.py --model DIR --device cuda --frames 32

Both precisions are teacher-forced on the fp32 model's greedy codes, so every step compares the two
on identical inputs: max |logit_bf16 - logit_fp32| over code0 and code-predictor heads, relative to
the fp32 logits' scale, and how often the greedy choice agrees. Uses the reference loop (the eager
model); the fused walk computes the same functions. Numbers, not assertions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.models.qwen3_tts import Qwen3TTS, SamplingParams  # noqa: E402
from cadence.models.qwen3_tts.reference import generate  # noqa: E402

TEXTS = [
    ("Precision matters most where the margins are thin.", "ryan", "english"),
    ("今天的天气非常好，我们一起去公园散步吧。", "vivian", "chinese"),
    ("Bonjour à tous, et bienvenue.", "serena", "french"),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--frames", type=int, default=32)
    p.add_argument("--json")
    args = p.parse_args()
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    fp32 = Qwen3TTS.from_pretrained(args.model, args.device, "fp32")
    bf16 = Qwen3TTS.from_pretrained(args.model, args.device, "bf16")
    params = SamplingParams(max_new_tokens=args.frames).greedy()
    rows = []
    for text, voice, language in TEXTS:
        prompt = fp32.prompt(text, voice, language)
        codes = generate(fp32, [prompt], params).generations[0].codes
        ref = generate(fp32, [prompt], params, teacher=[codes], record=True).trace
        low = generate(bf16, [prompt], params, teacher=[codes], record=True).trace
        err, scale, agree, total = 0.0, 0.0, 0, 0
        for a, b in zip(ref[: codes.shape[0]], low[: codes.shape[0]], strict=True):
            for x, y in [(a.code0_logits[0], b.code0_logits[0])] + list(
                zip(a.code_logits[0], b.code_logits[0], strict=True)
            ):
                finite = torch.isfinite(x) & torch.isfinite(y)
                err = max(err, float((x[finite] - y[finite]).abs().max()))
                scale = max(scale, float(x[finite].abs().max()))
                agree += int(x.argmax() == y.argmax())
                total += 1
        rows.append({"text": text, "frames": int(codes.shape[0]), "max_abs_err": err, "max_abs_logit": scale,
                     "greedy_agreement": agree / total, "choices": total})  # fmt: skip
        print(f"{voice:>8} {language:>8}: {codes.shape[0]} frames, bf16-vs-fp32 logits max abs err {err:.3g} "
              f"(logits up to {scale:.3g}), greedy agreement {agree}/{total} = {agree / total:.1%}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
