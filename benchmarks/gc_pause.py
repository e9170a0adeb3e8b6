"""How long a full garbage collection stops the engine's process, with and without the start-up heap
frozen (cadence/gc_pauses.py): the model loaded and the engine built (graphs and all, as `cadence
serve` builds it), then full collections timed, then the heap frozen and timed again.

    python benchmarks/gc_pause.py --model DIR [--device cuda] [--repeats 5] [--json out.json]

A full collection walks every object the process tracks, so this is the pause a serving engine
takes now and then, with every stream stopped, unless the start-up heap is frozen. Numbers, not
assertions.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.engine.config import EngineConfig  # noqa: E402
from cadence.engine.engine import build_core  # noqa: E402
from cadence.models.qwen3_tts import Qwen3TTS  # noqa: E402


def full_collections_ms(repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        gc.collect()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--kv-gb", type=float, default=4.0, help="KV cache size (GB)")
    p.add_argument("--repeats", type=int, default=5, help="full collections timed each way")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    torch.set_grad_enabled(False)
    model = Qwen3TTS.from_pretrained(args.model, args.device)
    core = build_core(model, EngineConfig(kv_cache_memory=args.kv_gb))
    tracked = len(gc.get_objects())
    before = full_collections_ms(args.repeats)
    gc.freeze()
    frozen = gc.get_freeze_count()
    after = full_collections_ms(args.repeats)
    result = {
        "device": str(model.device),
        "graphs": bool(getattr(core.codec, "graphs", None)),
        "tracked_objects": tracked,
        "frozen_objects": frozen,
        "full_collection_ms": statistics.median(before),
        "full_collection_frozen_ms": statistics.median(after),
    }
    print(
        f"{tracked} objects tracked; a full collection takes {result['full_collection_ms']:.1f} ms "
        f"(median of {args.repeats}), {result['full_collection_frozen_ms']:.2f} ms with the {frozen} of "
        "start-up frozen"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
