"""How fast this GPU reads HBM, as a ceiling for the b64 talker attention (perf-notes #116): the
Triton decode attention streams its 28 layers' keys and values at ~3.3 TB/s and the CUDA kernel's
copies alone at ~3.6 (#105, #106). Is that the memory's rate for this access pattern, or is there
room up to the H200's 4.8 TB/s?

Reads of the same bytes a layer (64 rows of 500-token contexts: 131 MB of bf16 keys and values a
layer, 28 layers, each layer its own tensors so nothing is served from L2), each 28 layers in one
CUDA graph:
  contiguous   a Triton kernel summing the layer's keys and values as one flat run per program
  per head     the attention's pattern without its arithmetic: a program per (row, kv head) reads
               its 500 tokens' 256-byte pieces, 2 KB apart ([pages, 16, 8, 128] caches)
  runs H/S     (#117) a program per (row, H kv heads, S-th of the tokens) reads a token's H heads as
               one run of H x 256 bytes; the same 64 x 256 bytes of keys a step as `per head`, so
               only the runs' length and the programs' count change
  torch.sum    PyTorch's reduction over each layer's tensors

    python benchmarks/hbm_rate.py [--rows 64] [--context 500] [--runs 2/2 4/4 8/8 8/16] [--json out.json]

Prints ms for 28 layers and TB/s. GPU only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl
from graph_timing import replay_ms

LAYERS, KV_HEADS, HEAD_DIM = 28, 8, 128


@triton.jit
def _contiguous_kernel(k_ptr, v_ptr, out_ptr, per_program, BLOCK: tl.constexpr):
    """Program p sums elements [p * per_program, (p + 1) * per_program) of k and of v."""
    start = tl.program_id(0).to(tl.int64) * per_program
    acc = tl.zeros([BLOCK], tl.float32)
    for off in range(0, per_program, BLOCK):
        idx = start + off + tl.arange(0, BLOCK)
        acc += tl.load(k_ptr + idx).to(tl.float32) + tl.load(v_ptr + idx).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc))


@triton.jit
def _runs_kernel(k_ptr, v_ptr, out_ptr, tokens, HKV: tl.constexpr, D: tl.constexpr, HC: tl.constexpr,
                 SPLITS: tl.constexpr, BT: tl.constexpr):  # fmt: skip
    """Program (row, head group, split) sums its share of its row's `tokens` consecutive tokens, HC
    kv heads each: runs of HC * D elements, HKV * D apart, as a decode attention taking HC heads a
    program reads them (each row's pages in order). HC = 1, SPLITS = 1 is `per head`."""
    row, group, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    per = tl.cdiv(tokens, SPLITS)
    end = tl.minimum((split + 1) * per, tokens)
    t, d = tl.arange(0, BT), tl.arange(0, HC * D)
    acc = tl.zeros([BT, HC * D], tl.float32)
    for tok0 in range(split * per, end, BT):
        tok = tok0 + t
        cell = ((row.to(tl.int64) * tokens + tok) * HKV + group * HC)[:, None] * D + d[None, :]
        mask = (tok < end)[:, None]
        acc += tl.load(k_ptr + cell, mask=mask, other=0.0).to(tl.float32)
        acc += tl.load(v_ptr + cell, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + (row * (HKV // HC) + group) * SPLITS + split, tl.sum(acc))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=64, help="decode rows (streams), default 64")
    p.add_argument("--context", type=int, default=500, help="tokens a row, default 500")
    p.add_argument(
        "--runs",
        nargs="*",
        default=[],
        metavar="H/S",
        help="also read H kv heads a program over an S-th of the tokens (#117), e.g. 8/8",
    )
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    try:
        runs = [tuple(int(x) for x in r.split("/")) for r in args.runs]
    except ValueError:
        p.error(f"--runs takes H/S pairs of integers, got {args.runs}")
    if any(len(r) != 2 or r[0] not in (1, 2, 4, 8) or r[1] < 1 for r in runs):
        p.error(f"--runs: H must be 1, 2, 4 or 8 (kv heads a program, dividing {KV_HEADS}) and S at least 1")
    if not torch.cuda.is_available():
        raise SystemExit("hbm_rate.py needs a CUDA device")
    rows, tokens = args.rows, args.context
    shape = (rows * tokens, KV_HEADS, HEAD_DIM)  # each row's tokens in consecutive 16-token pages
    caches = [(torch.randn(shape, device="cuda", dtype=torch.bfloat16), torch.randn(shape, device="cuda",
               dtype=torch.bfloat16)) for _ in range(LAYERS)]  # fmt: skip
    layer_bytes = 2 * caches[0][0].numel() * 2
    programs, block = 1024, 2048
    per_program = caches[0][0].numel() // programs // block * block
    out = torch.empty(max([programs, rows * KV_HEADS] + [rows * KV_HEADS * s for _, s in runs]), device="cuda",
                      dtype=torch.float32)  # fmt: skip

    def contiguous():
        for k, v in caches:
            _contiguous_kernel[(programs,)](k, v, out, per_program, BLOCK=block, num_warps=8)

    def read_runs(hc: int, splits: int):
        def read():
            for k, v in caches:
                _runs_kernel[(rows, KV_HEADS // hc, splits)](k, v, out, tokens, HKV=KV_HEADS, D=HEAD_DIM, HC=hc,
                                                             SPLITS=splits, BT=64 // hc, num_warps=4)  # fmt: skip

        return read

    def torch_sum():
        for k, v in caches:
            out[:1] = k.sum(dtype=torch.float32) + v.sum(dtype=torch.float32)

    results = {"rows": rows, "context": tokens, "layers": LAYERS, "bytes_a_layer": layer_bytes}
    print(f"{rows} rows x {tokens} tokens: {layer_bytes / 1e6:.0f} MB of keys and values a layer, {LAYERS} layers")
    reads = [
        ("contiguous", contiguous, per_program * programs * 4 * LAYERS),
        ("per head", read_runs(1, 1), layer_bytes * LAYERS),
        ("torch.sum", torch_sum, layer_bytes * LAYERS),
    ] + [(f"runs {hc}/{s}", read_runs(hc, s), layer_bytes * LAYERS) for hc, s in runs]
    for name, fn, read in reads:
        ms = replay_ms(fn)
        results[name] = {"ms": ms, "tb_s": read / (ms * 1e-3) / 1e12}
        print(f"  {name:<11} {ms:7.3f} ms  {results[name]['tb_s']:5.2f} TB/s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
