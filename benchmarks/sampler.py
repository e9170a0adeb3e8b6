"""The sampler kernels alone: the Triton kernel (triton_sampler; its top-k search width `TOPK_WAYS`,
2 a bisection, and warps `SAMPLE_WARPS` can be swept) against the CUDA kernel (cuda_sampler, at
several CTA widths), on the walk's two calls: a code-predictor step's 2048 codes with the next
step's embedding, and code0's 3072 with the repetition penalty, the control-token mask and its
embedding, read through a slot list as the walk reads them, at the model's defaults (temperature
0.9, top-k 50, top-p 1.0) and greedy. perf-notes #68 and #103.

Each configuration is timed as 32 calls in one CUDA graph, with PDL as the walk launches them and
without (then each call's work before its wait is no longer hidden behind the call before: the
kernel's whole length); every sampled configuration's tokens must equal the definition's.

    python benchmarks/sampler.py [--rows 1 64] [--threads 128 256 512] [--ways 4] [--warps 4] [--json F]

GPU only.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable
from pathlib import Path

import torch
from graph_timing import replay_ms

from cadence.engine.sampler import RowParams
from cadence.kernels import cuda_sampler, torch_ops, triton_sampler
from cadence.kernels.triton_launch import pdl_settings

CALLS = 32


def inputs(rows: int, vocab: int, sampled: bool, seed: int = 0) -> dict:
    """A call's arguments: bf16 logits like a head's, slot tables as a walk holds them (one slot a
    row, in another order), the model's default sampling parameters."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    slots = rows + 1
    args = dict(
        logits=(torch.randn(rows, vocab, device=dev, generator=g) * 3).bfloat16(),
        params=RowParams(
            torch.full((slots,), sampled, dtype=torch.bool, device=dev),
            torch.full((slots,), 0.9, device=dev),
            torch.full((slots,), 50, device=dev),
            torch.ones(slots, device=dev),
        ),  # fmt: skip
        seed=torch.arange(slots, device=dev) * 7919 + 1,
        frame=torch.full((slots,), 9, device=dev),
        rows=torch.randperm(slots, device=dev, generator=g)[:rows],
        embed_table=torch.randn(vocab, 1024, device=dev, generator=g).bfloat16(),
        embed_out=torch.empty(rows, 1024, dtype=torch.bfloat16, device=dev),
        codebook=1,
    )
    if vocab == 3072:  # code0: the penalty and the mask of control tokens
        args.update(seen=torch.rand(slots, vocab, device=dev, generator=g) < 0.05,
                    penalty=torch.full((slots,), 1.05, device=dev), ban_eos=torch.zeros(slots, dtype=torch.bool,
                    device=dev), eos_id=2150, suppress_start=2048, eos_min_frames=2, codebook=0)  # fmt: skip
    return args


def time_kernel(sample: Callable, args: dict, pdl: bool) -> tuple[float, torch.Tensor]:
    """µs per call of `sample` (a sample_tokens) over CALLS calls in a graph, and the tokens it picks."""
    outs = [torch.empty(args["logits"].shape[0], dtype=torch.long, device="cuda") for _ in range(CALLS)]
    with pdl_settings(pdl, trigger_first=False):
        us = replay_ms(lambda: [sample(**args, out=o) for o in outs]) * 1e3 / CALLS
    return us, outs[0].clone()


def triton_with(ways: int, warps: int) -> Callable:
    def sample(**kw):
        triton_sampler.TOPK_WAYS, triton_sampler.SAMPLE_WARPS = ways, warps
        return triton_sampler.sample_tokens(**kw)

    return sample


def cuda_with(threads: int) -> Callable:
    return lambda **kw: cuda_sampler.cuda_sample_tokens(**kw, threads=threads)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 64])
    p.add_argument("--threads", type=int, nargs="+", default=[128, 256, 512], help="the CUDA kernel's CTA widths")
    p.add_argument("--ways", type=int, nargs="+", default=[triton_sampler.TOPK_WAYS])
    p.add_argument("--warps", type=int, nargs="+", default=[triton_sampler.SAMPLE_WARPS])
    p.add_argument("--json", help="write every timing here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("sampler.py times the kernels on a GPU")
    shipped = (triton_sampler.TOPK_WAYS, triton_sampler.SAMPLE_WARPS)
    kernels = {f"triton {w}w/{n}": triton_with(w, n) for w, n in itertools.product(args.ways, args.warps)}
    if cuda_sampler.sampler_supported(torch.device("cuda")):
        kernels.update({f"cuda {t}": cuda_with(t) for t in args.threads})
    results = []
    print(f"us per call ({CALLS} calls in a CUDA graph), with PDL / without")
    for vocab, rows in itertools.product((2048, 3072), args.rows):
        for sampled in (False, True):
            call = inputs(rows, vocab, sampled)
            want = torch_ops.sample_tokens(**call)
            line = [f"{vocab} codes, {rows:>3} rows, {'sampled' if sampled else 'greedy '}:"]
            for name, sample in kernels.items():
                us, tokens = time_kernel(sample, call, pdl=True)
                us_plain, _ = time_kernel(sample, call, pdl=False)
                same = bool(torch.equal(tokens, want))
                line.append(f"{name} {us:6.2f} / {us_plain:6.2f}{'' if same else ' NOT THE DEFINITION TOKENS'}")
                results.append(dict(vocab=vocab, rows=rows, sampled=sampled, kernel=name, us_pdl=us, us=us_plain,
                                    same=same))  # fmt: skip
            print("  ".join(line), flush=True)
    triton_sampler.TOPK_WAYS, triton_sampler.SAMPLE_WARPS = shipped
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
