"""What a grid-wide barrier costs inside one Triton kernel on this GPU: the number that decides
whether a persistent code-predictor kernel pays (docs/perf-notes.md, "Where the remaining time
goes": ~600 barriers a frame).

Every program of one launch arrives at a global counter (an atomic add, release) and spins until
all have (atomic reads, acquire), ROUNDS times over; a barrier costs (time of ROUNDS - time of 0
rounds) / ROUNDS, each launch replayed in a CUDA graph with the counter's reset. A spinning barrier
needs every program resident at once, so grids stay at or under the SM count times what fits per
SM. Under TRITON_INTERPRET=1 programs run one after another, so only a grid of 1 can finish there
(`--check`: the loop's logic, not its cost).

    python benchmarks/grid_barrier.py [--programs 132 264] [--rounds 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl
from graph_timing import replay_ms

from cadence.kernels.triton_code_predictor import grid_arrive, grid_wait


@triton.jit
def barrier_rounds(counter_ptr, out_ptr, ROUNDS: tl.constexpr):
    """ROUNDS barriers of the persistent code predictor's kind (grid_arrive, grid_wait)."""
    programs = tl.num_programs(0)
    for r in range(ROUNDS):
        grid_arrive(counter_ptr)
        grid_wait(counter_ptr, (r + 1) * programs)
    tl.store(out_ptr + tl.program_id(0), tl.atomic_add(counter_ptr, 0, sem="acquire"))


def run(counter: torch.Tensor, out: torch.Tensor, programs: int, rounds: int, warps: int) -> None:
    counter.zero_()
    barrier_rounds[(programs,)](counter, out, ROUNDS=rounds, num_warps=warps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--programs", type=int, nargs="+", default=None, help="grid sizes (default: 1 and 2 per SM)")
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    p.add_argument("--check", action="store_true", help="one program, 3 rounds (runs under TRITON_INTERPRET=1)")
    p.add_argument("--json")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    counter = torch.zeros(1, dtype=torch.int32, device=device)
    if args.check:
        out = torch.zeros(1, dtype=torch.int32, device=device)
        run(counter, out, 1, 3, 4)
        assert int(out[0]) == 3 and int(counter[0]) == 3, (out, counter)
        print("barrier loop ok: 1 program, 3 rounds")
        return
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = []
    for programs in args.programs or [sms, 2 * sms]:
        out = torch.zeros(programs, dtype=torch.int32, device=device)
        for warps in args.warps:
            base = replay_ms(lambda: run(counter, out, programs, 0, warps))  # noqa: B023
            full = replay_ms(lambda: run(counter, out, programs, args.rounds, warps))  # noqa: B023
            assert int(counter[0]) == args.rounds * programs
            us = (full - base) / args.rounds * 1e3
            results.append({"programs": programs, "warps": warps, "rounds": args.rounds, "us_per_barrier": us})
            print(f"{programs:>5} programs x {warps} warps: {us:.2f} us per barrier ({args.rounds} rounds, {sms} SMs)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
