"""PNG plots of engine_steps.py results: decode step against batch, codec throughput against streams.

    python benchmarks/plot_steps.py OUT_DIR [--decode decode.json] [--codec codec.json [--exact codec_exact.json]]

`bash benchmarks/gpu.sh decode codec` writes the three files. --exact: the codec in exact fp32
(--no-codec-tf32), drawn dashed beside the TF32 codec. Writes OUT_DIR/decode_step_vs_batch.png and
OUT_DIR/codec_throughput_vs_batch.png (each where its input is given).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def gpu_of(result: dict) -> str:
    return result.get("device_name", result.get("device", "?"))


def plot_decode(result: dict, path: Path) -> None:
    dec = result["decode"]
    batches = [d["batch"] for d in dec]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(batches, [d["back_to_back_ms"] for d in dec], "^-", label="back to back (the engine's order)")
    ax.plot(batches, [d["step_ms"] for d in dec], "o-", label="one step alone, read back")
    ax.plot(batches, [d["frame_ms"] for d in dec], "s--", label="until the frame is on the host")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode batch (streams)")
    ax.set_ylabel("ms per decode step (one 80 ms frame each)")
    ax.set_title(f"talker_decode, {dec[0]['context']}-token contexts, {gpu_of(result)}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_codec(result: dict, exact: dict | None, path: Path) -> None:
    codec, exact_rows = result["codec"], (exact or {}).get("codec", [])
    fig, ax = plt.subplots(figsize=(6, 4))
    for frames in sorted({c["frames"] for c in codec}):
        rows = [c for c in codec if c["frames"] == frames]
        line = ax.plot(
            [c["streams"] for c in rows], [c["audio_s_per_s"] for c in rows], "o-", label=f"{frames}-frame chunks"
        )
        rows = [c for c in exact_rows if c["frames"] == frames]
        if rows:
            ax.plot([c["streams"] for c in rows], [c["audio_s_per_s"] for c in rows], "x--", color=line[0].get_color(),
                    label=f"{frames}-frame, exact fp32")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xlabel("streams per codec call")
    ax.set_ylabel("audio seconds decoded per wall second")
    title = f"codec_chunk ({result.get('codec_dtype', 'float32')}, CUDA graphs), {gpu_of(result)}"
    ax.set_title(title + ("; dashed: exact fp32" if exact_rows else ""), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--decode", type=Path, help="an engine_steps.py result with a decode section")
    p.add_argument("--codec", type=Path, help="an engine_steps.py result with a codec section")
    p.add_argument("--exact", type=Path, help="the same codec shapes with --no-codec-tf32")
    args = p.parse_args(argv)
    if not (args.decode or args.codec):
        p.error("give --decode and/or --codec")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.decode:
        plot_decode(json.loads(args.decode.read_text()), args.out_dir / "decode_step_vs_batch.png")
    if args.codec:
        exact = json.loads(args.exact.read_text()) if args.exact else None
        plot_codec(json.loads(args.codec.read_text()), exact, args.out_dir / "codec_throughput_vs_batch.png")


if __name__ == "__main__":
    main()
