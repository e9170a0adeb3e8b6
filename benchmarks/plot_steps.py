"""PNG plots for docs/benchmarks.md from engine_steps.py JSON results.

python benchmarks/plot_steps.py docs/data/h200/engine_steps_triton.json docs/img [CODEC_JSON]

CODEC_JSON: take the codec plot from another engine_steps run (a codec-only one, say).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, out_dir: str, codec_src: str | None = None) -> None:
    data = json.loads(Path(src).read_text())
    codec = json.loads(Path(codec_src).read_text())["codec"] if codec_src else data["codec"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    dec = data["decode"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([d["batch"] for d in dec], [d["step_ms"] for d in dec], "o-", label="cadence fused + CUDA graph")
    targets = {1: 2.0, 64: 4.0, 256: 12.0}
    ax.plot(list(targets), list(targets.values()), "x--", color="gray", label="issue 4 targets")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode batch (streams)")
    ax.set_ylabel("ms per decode step (one 80 ms frame each)")
    ax.set_title(f"talker_decode, 0.6B bf16, {dec[0]['context']}-token contexts, H200")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "decode_step_vs_batch.png", dpi=120)

    fig, ax = plt.subplots(figsize=(6, 4))
    for frames in sorted({c["frames"] for c in codec}):
        rows = [c for c in codec if c["frames"] == frames]
        ax.plot([c["streams"] for c in rows], [c["audio_s_per_s"] for c in rows], "o-", label=f"{frames}-frame chunks")
    ax.axhline(2000, color="gray", ls="--", label="issue 5 target (64 x 8)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("streams per codec call")
    ax.set_ylabel("audio seconds decoded per wall second")
    ax.set_title("codec_chunk (streaming decoder, float32 with TF32, CUDA graphs), H200")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "codec_throughput_vs_batch.png", dpi=120)


if __name__ == "__main__":
    main(*sys.argv[1:4])
