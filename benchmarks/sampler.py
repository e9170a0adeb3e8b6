"""The sampler kernel (`triton_ops.sample_tokens`) alone: how the top-k threshold's search width
(`TOPK_WAYS`: 2 is a bisection) and the program's warps (`SAMPLE_WARPS`) set its time, on the
walk's two vocabularies (the code predictor's 2048 codes with the next step's embedding gathered,
the talker's 3072 with the repetition penalty and control-token mask), at the model's defaults
(temperature 0.9, top-k 50, top-p 1.0) and greedy. perf-notes #67 measured 16 calls a walk at
~11.5 µs each at batch 1 and 64.

Each configuration is timed as 32 calls in one CUDA graph, so launch cost counts as in the walk;
every configuration's tokens must equal the bisection's (the same kept set, the same noise).

    python benchmarks/sampler.py [--rows 1 64 256] [--json out.json]

GPU only.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from graph_timing import replay_ms

from cadence.engine.sampler import RowParams
from cadence.kernels import triton_ops, triton_sampler

CALLS = 32


def inputs(rows: int, vocab: int, sampled: bool, seed: int = 0) -> dict:
    """A call's arguments: bf16 logits like a head's, the model's default sampling parameters."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    args = dict(
        logits=(torch.randn(rows, vocab, device=dev, generator=g) * 3).bfloat16(),
        params=RowParams(
            torch.full((rows,), sampled, dtype=torch.bool, device=dev),
            torch.full((rows,), 0.9, device=dev),
            torch.full((rows,), 50, device=dev),
            torch.ones(rows, device=dev),
        ),  # fmt: skip
        seed=torch.arange(rows, device=dev) * 7919 + 1,
        frame=torch.full((rows,), 9, device=dev),
        codebook=1,
    )
    if vocab == 3072:  # code0: the penalty and the mask of control tokens
        args.update(seen=torch.rand(rows, vocab, device=dev, generator=g) < 0.05,
                    penalty=torch.full((rows,), 1.05, device=dev), ban_eos=torch.zeros(rows, dtype=torch.bool,
                    device=dev), eos_id=2150, suppress_start=2048)  # fmt: skip
    else:  # a code-predictor step: the code's embedding for the next step
        args.update(embed_table=torch.randn(vocab, 1024, device=dev, generator=g).bfloat16(),
                    embed_out=torch.empty(rows, 1024, dtype=torch.bfloat16, device=dev))  # fmt: skip
    return args


def time_config(args: dict, ways: int, warps: int) -> tuple[float, torch.Tensor]:
    """µs per call with this search width and warp count, and the tokens it picks."""
    triton_sampler.TOPK_WAYS, triton_sampler.SAMPLE_WARPS = ways, warps
    outs = [torch.empty(args["logits"].shape[0], dtype=torch.long, device="cuda") for _ in range(CALLS)]
    us = replay_ms(lambda: [triton_ops.sample_tokens(**args, out=o) for o in outs]) * 1e3 / CALLS
    return us, outs[0].clone()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 64, 256])
    p.add_argument("--ways", type=int, nargs="+", default=[2, 3, 4, 5])
    p.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    p.add_argument("--json", help="write every timing here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("sampler.py times the Triton kernel on a GPU")
    shipped = (triton_sampler.TOPK_WAYS, triton_sampler.SAMPLE_WARPS)
    results = []
    print(f"us per call (32 calls in a CUDA graph); shipped: {shipped[0]} ways, {shipped[1]} warps")
    for vocab, rows in itertools.product((2048, 3072), args.rows):
        greedy = inputs(rows, vocab, sampled=False)
        sampled = inputs(rows, vocab, sampled=True)
        greedy_us, _ = time_config(greedy, *shipped)
        line = [f"{vocab} codes, {rows:>3} rows: greedy {greedy_us:6.2f}"]
        reference = None
        for ways, warps in itertools.product(args.ways, args.warps):
            us, tokens = time_config(sampled, ways, warps)
            reference = tokens if reference is None else reference
            same = bool(torch.equal(tokens, reference))
            line.append(f"{ways}w/{warps}: {us:6.2f}{'' if same else ' DIFFERENT TOKENS'}")
            results.append(dict(vocab=vocab, rows=rows, ways=ways, warps=warps, us=us, greedy_us=greedy_us, same=same))
        print("  ".join(line))
    triton_sampler.TOPK_WAYS, triton_sampler.SAMPLE_WARPS = shipped
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
