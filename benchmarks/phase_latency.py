"""What one phase of a persistent kernel costs, and how much of it loading the next phase's weights
before the grid-wide barrier would save (perf-notes #37; the lead left by #35 and #36).

One launch, one program per SM, runs PHASES phases of a code-predictor-shaped GEMM: out[16, N] =
x[16, K] @ W_p^T, each phase with its own weight (cycled over enough copies that they come from
HBM, not L2), each program owning BLOCK_N rows of W_p. The orders:

    after    barrier, then the weight tile and the input rows, then the dot (#35's phases)
    before   the next phase's weight tile loaded into registers before the barrier, so only the
             input rows and the dot follow it
    nobarrier  as `after` without barriers: the floor set by streaming the weights alone
    split    the barrier split in two: arrive (the release: waits for this program's stores) as soon
             as the phase's output is stored, then issue the next phase's weight loads, then wait
             (spin, acquire). In `before` the release also waited for those loads (#37); here they
             are issued after it, so they can overlap the other programs' arrival
    split_l2   as split, but the next weights only prefetched into L2 (no registers held across
             the wait; a whole 64-192 KB tile of the real kernel does not fit in registers), then
             loaded after the wait as in `after`
    ahead      as after, but each phase first prefetches into L2 the lines of the phase `--ahead`
             phases later (weights never depend on a barrier, so HBM can stream them long before
             they are needed, and the phase's own loads hit L2)
    split_ahead  split, with the same prefetch `--ahead` phases ahead
    bulk_ahead   as ahead, with one bulk L2 prefetch of the whole tile by the copy engine
             (`cp.async.bulk.prefetch.L2`, thread 0) instead of a prefetch per 128-byte line

us per phase = (ms of the launch - ms of a 1-phase launch) / (PHASES - 1), in a CUDA graph.

    python benchmarks/phase_latency.py [--n 4096 --k 1024] [--phases 200] [--json out.json]
    python benchmarks/phase_latency.py --check   # the loop under TRITON_INTERPRET=1, one program
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from cadence.kernels.triton_code_predictor import grid_arrive, grid_barrier, grid_wait
from cadence.kernels.triton_launch import prefetch_l2

ORDERS = ("after", "before", "nobarrier", "split", "split_l2", "ahead", "split_ahead", "bulk_ahead")


@triton.jit
def _bulk_prefetch_l2(ptr, nbytes):
    """Thread 0 asks the copy engine to pull `nbytes` (a multiple of 16) at `ptr` into L2."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [ptr, nbytes], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit
def _phases_kernel(x_ptr, w_ptr, out_ptr, counter_ptr, N, copies, PHASES: tl.constexpr, K: tl.constexpr,
                   BLOCK_N: tl.constexpr, ORDER: tl.constexpr, HINT: tl.constexpr,
                   AHEAD: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    rm = tl.arange(0, 16)
    rk = tl.arange(0, K)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)  # one tile per program: the grid covers N, all resident
    w_tile = rn[:, None] * K + rk[None, :]
    w = tl.load(w_ptr + w_tile, mask=rn[:, None] < N, other=0.0)
    line_tile = rn[:, None] * K + (tl.arange(0, K // 64) * 64)[None, :]  # one address per 128-byte line (bf16)
    for phase in range(PHASES):
        if (ORDER == 5 or ORDER == 6) and HINT:  # ahead, split_ahead: phase + AHEAD's lines into L2
            prefetch_l2(w_ptr + ((phase + AHEAD) % copies) * N * K + line_tile)
        if ORDER == 7 and HINT:
            _bulk_prefetch_l2(w_ptr + ((phase + AHEAD) % copies) * N * K + pid * BLOCK_N * K, BLOCK_N * K * 2)
        if ORDER == 0 or ORDER == 5 or ORDER == 7:  # after: wait, then load this phase's weights
            grid_barrier(counter_ptr, (phase + 1) * P)
            w = tl.load(w_ptr + (phase % copies) * N * K + w_tile, mask=rn[:, None] < N, other=0.0)
        elif ORDER == 1:  # before: this phase's weights were loaded before the barrier
            w_next = tl.load(w_ptr + ((phase + 1) % copies) * N * K + w_tile, mask=rn[:, None] < N, other=0.0)
            grid_barrier(counter_ptr, (phase + 1) * P)
        elif ORDER == 2 or ORDER == 4:  # nobarrier; split_l2 (its lines were prefetched into L2)
            w = tl.load(w_ptr + (phase % copies) * N * K + w_tile, mask=rn[:, None] < N, other=0.0)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], cache_modifier=".cg")
        acc = tl.dot(x, tl.trans(w))
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=rn[None, :] < N)
        if ORDER == 1:
            w = w_next
        if ORDER == 3 or ORDER == 6:  # split: arrive, load the next phase's weights, then wait
            grid_arrive(counter_ptr)
            w = tl.load(w_ptr + ((phase + 1) % copies) * N * K + w_tile, mask=rn[:, None] < N, other=0.0)
            grid_wait(counter_ptr, (phase + 1) * P)
        if ORDER == 4:  # split_l2: arrive, prefetch the next phase's 128-byte lines into L2, then wait
            grid_arrive(counter_ptr)
            if HINT:  # inline assembly: not under the interpreter
                prefetch_l2(w_ptr + ((phase + 1) % copies) * N * K + line_tile)
            grid_wait(counter_ptr, (phase + 1) * P)


def launch(x, w, out, counter, phases: int, order: str, block_n: int, warps: int, ahead: int = 2) -> None:
    n, k = w.shape[1], w.shape[2]
    counter.zero_()
    _phases_kernel[(triton.cdiv(n, block_n),)](
        x, w, out, counter, n, w.shape[0], PHASES=phases, K=k, BLOCK_N=block_n, ORDER=ORDERS.index(order),
        HINT=x.is_cuda, AHEAD=ahead, num_warps=warps,
    )  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4096, help="weight rows (the code predictor's QKV: 4096)")
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--phases", type=int, default=200)
    p.add_argument("--copies", type=int, default=0,
                   help="weights cycled over (default: 120 MB of them, past the L2; 2: L2-resident)")  # fmt: skip
    p.add_argument("--tiles", nargs="+", default=["16x4"],
                   help="rows per program x warps, e.g. 16x4 16x8 32x8 (16 rows: two programs per SM)")  # fmt: skip
    p.add_argument("--orders", nargs="+", default=list(ORDERS), choices=ORDERS)
    p.add_argument("--ahead", type=int, nargs="+", default=[2], help="phases ahead that ahead orders prefetch")
    p.add_argument("--check", action="store_true", help="one program, 3 phases, every order (TRITON_INTERPRET=1)")
    p.add_argument("--json")
    args = p.parse_args()
    if args.check:
        g = torch.Generator().manual_seed(0)
        w = torch.randn(2, 32, 64, generator=g)
        x = torch.randn(16, 64, generator=g)
        for order in ORDERS:
            out, counter = torch.zeros(16, 32), torch.zeros(1, dtype=torch.int32)
            launch(x, w, out, counter, 3, order, 32, 4)
            expect = x @ w[2 % 2].T  # the last phase's weights
            assert torch.allclose(out, expect, atol=1e-3), order
        print("phase loop ok: 1 program, 3 phases, every order")
        return
    from graph_timing import replay_ms

    copies = args.copies or max(2, (120 << 20) // (args.n * args.k * 2))  # > 2x the L2: weights from HBM
    w = (torch.randn(copies, args.n, args.k, device="cuda") / 32).to(torch.bfloat16)
    x = torch.randn(16, args.k, device="cuda").to(torch.bfloat16)
    out = torch.empty(16, args.n, device="cuda", dtype=torch.bfloat16)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    results = []
    for tile in args.tiles:
        block_n, warps = (int(v) for v in tile.split("x"))
        for order, ahead in [(o, a) for o in args.orders for a in (args.ahead if "ahead" in o else [0])]:
            run = lambda phases: launch(x, w, out, counter, phases, order, block_n, warps, ahead)  # noqa: B023, E731
            us = (replay_ms(lambda: run(args.phases)) - replay_ms(lambda: run(1))) / (args.phases - 1) * 1e3  # noqa: B023
            floor = args.n * args.k * 2 / 4.8e12 * 1e6
            name = f"{order} {ahead}" if ahead else order
            results.append({"order": order, "ahead": ahead, "copies": copies, "warps": warps,
                            "block_n": block_n, "us_per_phase": us})  # fmt: skip
            print(f"{name:>13} {warps} warps, {triton.cdiv(args.n, block_n)} programs x {block_n} rows: "
                  f"{us:.2f} us per phase (weights alone at 4.8 TB/s: {floor:.2f} us)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
