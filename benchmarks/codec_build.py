"""Codec graph capture: how long each graph takes to capture, and what cuDNN's autotuning
(torch.backends.cudnn.benchmark) buys in its replay time.

Run once per setting, each in a process of its own (cuDNN keeps its choice per conv shape for the
life of the process, so a second build in the same process would reuse the first one's):
    python benchmarks/codec_build.py --model DIR --autotune-from 1 --json all.json     # every graph
    python benchmarks/codec_build.py --model DIR --autotune-from 0x7fffffff --json none.json
`--autotune-from N`: graphs of at least N stream-frames (batch x frames) are autotuned.
`--benchmark-limit N`: cuDNN tries at most N algorithms a convolution shape while autotuning
(torch.backends.cudnn.benchmark_limit; PyTorch's default 10): fewer tries, shorter capture.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from graph_timing import graph_replay_ms  # a sibling module (python benchmarks/codec_build.py)

from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.partitions import Qwen3TTSCodec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (e.g. a random full-size one)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--streams", type=int, default=256, help="max streams (the engine's max_streams)")
    p.add_argument("--autotune-from", type=lambda s: int(s, 0), default=1)
    p.add_argument("--benchmark-limit", type=int, default=None,
                   help="cuDNN algorithms tried a conv shape when autotuning (default: PyTorch's, 10)")  # fmt: skip
    p.add_argument("--json", help="write every number here")
    args = p.parse_args()
    if args.benchmark_limit is not None:
        torch.backends.cudnn.benchmark_limit = args.benchmark_limit
    model = Qwen3TTS.from_pretrained(args.model, args.device, "bf16")
    start = time.perf_counter()
    codec = Qwen3TTSCodec(model, args.streams, use_graphs=True, autotune_from=args.autotune_from)
    total = time.perf_counter() - start
    rows = []
    for (b, f), (graph, *_) in sorted(codec.graphs.items()):
        replay = graph_replay_ms(graph, warmup=2)
        rows.append({"batch": b, "frames": f, "capture_s": codec.capture_seconds[(b, f)], "replay_ms": replay})
    limit = torch.backends.cudnn.benchmark_limit
    print(f"autotune from {args.autotune_from} stream-frames, cuDNN limit {limit}: {len(rows)} graphs in {total:.1f} s")
    print(f"{'batch':>6} {'frames':>7} {'capture s':>10} {'replay ms':>10} {'audio s/s':>10}")
    for r in rows:
        audio = r["batch"] * r["frames"] * 0.08 / r["replay_ms"] * 1e3
        print(f"{r['batch']:>6} {r['frames']:>7} {r['capture_s']:>10.2f} {r['replay_ms']:>10.3f} {audio:>10.0f}")
    if args.json:
        out = {"autotune_from": args.autotune_from, "benchmark_limit": limit, "total_s": total, "graphs": rows}
        Path(args.json).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
