"""Greedy codes of the fused bf16 walk against the fp32 eager model, teacher-forced, with and without
the slab GEMM (issue 4's bf16 agreement; perf-notes #95).

    python benchmarks/walk_agreement.py --model DIR --frames 48 --slab 0 2

For each setting of `slab_max_rows`, the engine (Triton walk, CUDA graphs, bf16) decodes a few
greedy requests one at a time (batch 1, where the slab GEMM runs); then the fp32 eager model is
teacher-forced on each request's codes and says, code by code, whether the walk chose its argmax
and, where not, by how much the fp32 logits preferred their own choice (a near-tie that bf16
rounding may flip, or a real error). Numbers, not assertions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.engine.config import EngineConfig, RunawayGuard  # noqa: E402
from cadence.engine.engine import SynthesisRequest, build_core, prepare_request  # noqa: E402
from cadence.models.qwen3_tts import Qwen3TTS  # noqa: E402
from cadence.models.qwen3_tts.reference import greedy_misses  # noqa: E402

TEXTS = [
    ("Precision matters most where the margins are thin.", "ryan"),
    ("今天的天气非常好，我们一起去公园散步吧。", "vivian"),
    ("Bonjour à tous, et bienvenue.", "serena"),
]


def walk_codes(model: Qwen3TTS, slab_max_rows: int, frames: int, backend: str) -> list[torch.Tensor]:
    """Each text's greedy codes [frames, 16] from the engine, one request at a time."""
    config = EngineConfig(max_streams=2, kv_cache_memory=2.0, return_codes=True, attention_backend=backend,
                          slab_max_rows=slab_max_rows, graph_buckets=(1,),
                          runaway=RunawayGuard(frames_per_token=0, loop_window=0, silence_seconds=0))  # fmt: skip
    core = build_core(model, config)
    out = []
    for i, (text, voice) in enumerate(TEXTS):
        req = prepare_request(model, SynthesisRequest(text, voice=voice, greedy=True, max_new_tokens=frames,
                                                      request_id=f"r{i}", ignore_eos=True), 4096)  # fmt: skip
        core.add_request(req)
        codes = []
        while core.has_work():
            codes += [c.codes for c in core.step() if c.codes is not None]
        out.append(torch.from_numpy(np.concatenate(codes)))
    return out


def agreement(oracle: Qwen3TTS, codes: torch.Tensor, text: str, voice: str) -> tuple[int, int, float]:
    """(codes that are the fp32 argmax, codes, the largest fp32 margin top1 - chosen where not)."""
    req = prepare_request(oracle, SynthesisRequest(text, voice=voice, greedy=True, max_new_tokens=codes.shape[0],
                                                   ignore_eos=True), 4096)  # fmt: skip
    misses = greedy_misses(oracle, req.prompt, req.params, codes)
    return codes.numel() - len(misses), codes.numel(), max((m.margin for m in misses), default=0.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory or Hugging Face id")
    p.add_argument("--frames", type=int, default=48, help="frames a request (default 48)")
    p.add_argument("--slab", type=int, nargs="+", default=[0, 2], help="slab_max_rows settings (default 0 2)")
    p.add_argument("--device", default="cuda", help="cuda (default), or cpu with --backend torch (a dry run)")
    p.add_argument("--backend", default="triton", help="the walk's kernels: triton (default) or torch")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("walk_agreement.py needs a CUDA device for the Triton walk (or --device cpu --backend torch)")
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3TTS.from_pretrained(args.model, args.device, "bf16")
    walks = {s: walk_codes(model, s, args.frames, args.backend) for s in args.slab}
    del model
    oracle = Qwen3TTS.from_pretrained(args.model, args.device, "fp32")
    rows = []
    print(f"{'slab_max_rows':>13} {'text':>4} {'fp32 argmax':>12} {'share':>7} {'worst margin':>13}")
    for s, codes in walks.items():
        for i, c in enumerate(codes):
            same, total, worst = agreement(oracle, c, *TEXTS[i])
            rows.append(dict(slab_max_rows=s, text=i, same=same, codes=total, worst_margin=worst))
            print(f"{s:>13} {i:>4} {same:>6}/{total:<5} {same / total:>7.3f} {worst:>13.4f}")
        equal = sum(int(torch.equal(a, b)) for a, b in zip(codes, walks[args.slab[0]], strict=True))
        print(f"{s:>13}  requests with the same codes as slab_max_rows={args.slab[0]}: {equal}/{len(codes)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
