"""Peak memory of one streaming codec call, counted tensor by tensor (runs on the CPU).

A CUDA graph of a codec chunk holds, in its memory pool, about the most bytes its call ever has
alive at once; on one capture stream a pool of graphs holds about its largest graph's (perf-notes
#62). This counts those bytes without a GPU: every tensor the call's operators make, and when it is
freed, under a dispatch mode, on the full-size codec's shapes with random weights. The CPU path runs
the same Python as the GPU one, with PyTorch definitions of the fused kernels, whose temporaries
(SnakeBeta's) the GPU does not make: an upper bound for the GPU.

    python benchmarks/codec_memory.py   # --config: another speech_tokenizer/config.json
"""

from __future__ import annotations

import argparse
import json
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from cadence.models.qwen3_tts.codec import CodecDecoder
from cadence.models.qwen3_tts.codec_stream import StreamingCodecDecoder
from cadence.models.qwen3_tts.config import SpeechTokenizerConfig, _Fields
from cadence.models.qwen3_tts.skeletons import shipped_skeleton

MIB = 2**20


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages the operators under it create (not views of their inputs), live and peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = self.peak = self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if key in self.live or key in inputs or size == 0:
                continue
            self.live[key] = size
            self.now += size
            self.total += size
            self.peak = max(self.peak, self.now)
            weakref.finalize(storage, self._freed, key)
        return out

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)


def measure(codec: StreamingCodecDecoder, streams: int, frames: int) -> dict:
    codec.allocate(streams)
    slots = torch.arange(streams)
    codes = torch.randint(0, codec.cfg.codebook_size, (streams, frames, codec.cfg.num_quantizers))
    with torch.no_grad():
        codec.decode(slots, codes)  # past the cold start: every conv has history
        with LiveBytes() as count:
            codec.decode(slots, codes)
    return {"streams": streams, "frames": frames, "peak_mib": count.peak / MIB, "allocated_mib": count.total / MIB}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--config",
        default=str(shipped_skeleton().files["speech_tokenizer/config.json"]),
        help="a speech_tokenizer/config.json (default: the released codec's, shipped with cadence)",
    )
    p.add_argument("--shapes", nargs="+", default=["1x1", "2x2", "8x1", "8x8"], help="STREAMSxFRAMES calls to count")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    cfg = SpeechTokenizerConfig.from_fields(_Fields(json.loads(Path(args.config).read_text()), args.config)).decoder
    torch.manual_seed(0)
    codec = StreamingCodecDecoder(CodecDecoder(cfg).eval())
    rows = []
    print(f"{'streams':>8} {'frames':>7} {'peak MiB':>9} {'per stream-frame':>17} {'allocated MiB':>14}")
    for shape in args.shapes:
        streams, frames = (int(v) for v in shape.split("x"))
        r = measure(codec, streams, frames)
        rows.append(r)
        per = r["peak_mib"] / (streams * frames)
        print(f"{streams:>8} {frames:>7} {r['peak_mib']:>9.1f} {per:>17.2f} {r['allocated_mib']:>14.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
