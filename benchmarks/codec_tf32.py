"""What TF32 costs the float32 codec: its decode against the exact fp32 decode, on a GPU.

The offline decode of the same codes under three settings: TF32 in the convolutions only (PyTorch's
default, which the official package runs under), TF32 in convolutions and linears (cadence's
streaming codec, codec_stream.tf32_as_convs), and, as the reference, exact fp32. (The streaming
decoder's own error in the engine is reported by engine_steps.py.) Usage:
    python benchmarks/codec_tf32.py --model CHECKPOINT_DIR [--streams 4] [--frames 96]
"""

from __future__ import annotations

import argparse

import torch

from cadence.models.qwen3_tts import Qwen3TTS


def decode_all(decoder, codes: torch.Tensor, convs: bool, linears: bool) -> torch.Tensor:
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = convs, linears
    with torch.no_grad():
        return torch.stack([decoder(c.T[None])[0, 0] for c in codes])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (e.g. a random full-size one)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--frames", type=int, default=96)
    args = p.parse_args()
    decoder = Qwen3TTS.from_pretrained(args.model, args.device, "bf16").codec.decoder
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 2048, (args.streams, args.frames, 16), generator=g).to(args.device)
    exact = decode_all(decoder, codes, convs=False, linears=False)
    print(f"{args.streams} streams x {args.frames} frames, max abs err against exact fp32:")
    for label, convs, linears in (
        ("TF32 convolutions (PyTorch default)", True, False),
        ("TF32 convolutions and linears (cadence)", True, True),
    ):
        err = float((decode_all(decoder, codes, convs, linears) - exact).abs().max())
        print(f"  {label:<42} {err:.2e}")


if __name__ == "__main__":
    main()
