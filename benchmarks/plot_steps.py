"""PNG plots for docs/benchmarks.md from engine_steps.py JSON results.

python benchmarks/plot_steps.py engine_steps.json docs/img [CODEC_JSON [EXACT_JSON]]

CODEC_JSON: take the codec plot from another engine_steps run (a codec-only one, say). EXACT_JSON: an
engine_steps run of the codec in exact fp32 (--no-codec-tf32), drawn dashed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def codec_rows(data: dict) -> list[dict]:
    """streams, frames, audio_s_per_s of an engine_steps result."""
    return data["codec"]


def main(src: str, out_dir: str, codec_src: str | None = None, exact_src: str | None = None) -> None:
    data = json.loads(Path(src).read_text())
    codec = codec_rows(json.loads(Path(codec_src).read_text()) if codec_src else data)
    exact = codec_rows(json.loads(Path(exact_src).read_text())) if exact_src else []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    dec = data["decode"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([d["batch"] for d in dec], [d["step_ms"] for d in dec], "o-", label="cadence fused + CUDA graph")
    if all("back_to_back_ms" in d for d in dec):  # walks in the engine's order, each read back after the next launch
        ax.plot([d["batch"] for d in dec], [d["back_to_back_ms"] for d in dec], "^-", label="back to back")
    targets = {1: 2.0, 64: 4.0, 256: 12.0}
    if all("frame_ms" in d for d in dec):  # the frame's codes on the host before the talker layers run
        ax.plot([d["batch"] for d in dec], [d["frame_ms"] for d in dec], "s--", label="until the frame is on the host")
    ax.plot(list(targets), list(targets.values()), "x", ms=10, mew=2, color="gray", label="issue 4 targets")
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
        line = ax.plot(
            [c["streams"] for c in rows], [c["audio_s_per_s"] for c in rows], "o-", label=f"{frames}-frame chunks"
        )
        rows = [c for c in exact if c["frames"] == frames]
        if rows:
            ax.plot([c["streams"] for c in rows], [c["audio_s_per_s"] for c in rows], "x--", color=line[0].get_color(),
                    label=f"{frames}-frame, exact fp32")  # fmt: skip
    ax.axhline(2000, color="gray", ls="--", label="issue 5 target (64 x 8)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("streams per codec call")
    ax.set_ylabel("audio seconds decoded per wall second")
    ax.set_title("codec_chunk (float32 codec, TF32 unless marked exact; CUDA graphs), H200", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "codec_throughput_vs_batch.png", dpi=120)


if __name__ == "__main__":
    main(*sys.argv[1:5])
