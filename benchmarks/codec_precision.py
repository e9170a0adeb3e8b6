"""Where the float32 codec's TF32 error comes from, and what exact arithmetic costs, stage by stage.

The offline decode of the same codes against the exact fp32 decode, with each stage of the decoder
(quantizer projections, pre_conv, transformer, the two upsamplers, decoder.0-4, the output conv) run
in one of three precisions:
  exact   fp32 on the SIMT path (TF32 off): the reference
  tf32    TF32 tensor cores (PyTorch's default for convolutions; cadence's codec also runs its linears so)
  3xtf32  each conv/linear as three TF32 products, x_hi*w_hi + x_lo*w_hi + x_hi*w_lo, where v_hi is v
          with its mantissa cut to TF32's 10 bits and v_lo = v - v_hi: near-fp32 accuracy on tensor cores
Printed: the error of all-TF32 and all-3xTF32; for each stage, the error with only that stage in TF32
(the rest exact) and with only that stage exact or 3xTF32 (the rest TF32); and each stage's GPU time
(CUDA events around it, eager) at one 64-stream x 8-frame batch in each precision, so the cost of
making a stage exact can be read off directly. Usage:
    python benchmarks/codec_precision.py --model CHECKPOINT_DIR [--streams 4] [--frames 96] [--json F]
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cadence.models.qwen3_tts import Qwen3TTS
from cadence.models.qwen3_tts.codec import CodecDecoder

PRECISIONS = ("exact", "tf32", "3xtf32")
# PyTorch's two TF32 switches (cuDNN convolutions, matmuls) per precision; "official" is PyTorch's
# default, under which the official package decodes on a GPU: convolutions in TF32, linears exact.
SWITCHES = {"exact": (False, False), "tf32": (True, True), "3xtf32": (True, True), "official": (True, False)}


def stages(d: CodecDecoder) -> dict[str, list[nn.Module]]:
    """The decoder's stages in the order a decode runs them (the quantizer's by its two projections)."""
    out = {
        "quantizer": [d.quantizer.rvq_first.output_proj, d.quantizer.rvq_rest.output_proj],
        "pre_conv": [d.pre_conv],
        "transformer": [d.pre_transformer],
    }
    out |= {f"upsample.{i}": list(stage) for i, stage in enumerate(d.upsample)}  # a ModuleList is not called
    out |= {f"decoder.{i}": [d.decoder[i]] for i in range(len(d.decoder) - 2)}
    out["decoder.out"] = [d.decoder[-1]]
    return out


def tf32_round(v: torch.Tensor) -> torch.Tensor:
    """v with the low 13 of its 23 mantissa bits cleared: exactly representable in TF32."""
    return (v.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def three_tf32(call: Callable, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """call(x, w, bias) as three TF32 products; the two small ones summed first."""
    xh, wh = tf32_round(x), tf32_round(w)
    return call(xh, wh, bias) + (call(x - xh, wh, None) + call(xh, w - wh, None))


def functional(m: nn.Module) -> Callable:
    if isinstance(m, nn.Conv1d):
        return m._conv_forward
    if isinstance(m, nn.ConvTranspose1d):
        return lambda x, w, b: F.conv_transpose1d(x, w, b, m.stride, m.padding, m.output_padding, m.groups, m.dilation)
    return F.linear


class StagePrecision:
    """Sets each stage's precision on entry (forward hooks), and times stages with CUDA events."""

    def __init__(self, decoder: CodecDecoder):
        self.stages = stages(decoder)
        self.mode = dict.fromkeys(self.stages, "exact")
        self.current = "exact"  # the running stage's precision
        self.events: dict[str, list] | None = None
        # Every conv and linear checks the running stage's precision (patched once: a module's own
        # pre-hook runs after its forward was looked up, too late to swap it).
        for m in decoder.modules():
            if isinstance(m, nn.Conv1d | nn.ConvTranspose1d | nn.Linear):
                m.forward = self._forward_of(m)
        for name, modules in self.stages.items():
            for m in modules:
                m.register_forward_pre_hook(lambda mod, args, name=name: self._enter(name))
                m.register_forward_hook(lambda mod, args, out, name=name: self._leave(name))

    def _forward_of(self, m: nn.Module) -> Callable:
        plain, call = type(m).forward.__get__(m), functional(m)
        return lambda x: three_tf32(call, x, m.weight, m.bias) if self.current == "3xtf32" else plain(x)

    def _enter(self, name: str) -> None:
        self.current = self.mode[name]
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = SWITCHES[self.current]
        if self.events is not None:
            self.events.setdefault(name, []).append(torch.cuda.Event(enable_timing=True))
            self.events[name][-1].record()

    def _leave(self, name: str) -> None:
        self.current = "exact"
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        if self.events is not None:
            self.events[name].append(torch.cuda.Event(enable_timing=True))
            self.events[name][-1].record()

    @contextlib.contextmanager
    def modes(self, default: str, **override: str) -> Iterator[None]:
        saved = dict(self.mode)
        self.mode = {name: override.get(name, default) for name in self.stages}
        try:
            yield
        finally:
            self.mode = saved

    def stage_ms(self, decoder: CodecDecoder, codes: torch.Tensor, repeats: int = 5) -> dict[str, float]:
        """Median GPU ms of each stage over `repeats` decodes (after one warm-up)."""
        decoder(codes)
        times: dict[str, list[float]] = {}
        for _ in range(repeats):
            self.events = {}
            decoder(codes)
            torch.cuda.synchronize()
            for name, ev in self.events.items():
                times.setdefault(name, []).append(sum(ev[i].elapsed_time(ev[i + 1]) for i in range(0, len(ev), 2)))
        self.events = None
        return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (e.g. a random full-size one)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--streams", type=int, default=4, help="streams decoded for the error columns")
    p.add_argument("--frames", type=int, default=96, help="frames per stream for the error columns")
    p.add_argument("--json", help="write every number here")
    args = p.parse_args()
    decoder = Qwen3TTS.from_pretrained(args.model, args.device, "bf16").codec.decoder
    sp = StagePrecision(decoder)
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 2048, (args.streams, 16, args.frames), generator=g).to(args.device)
    timing_codes = torch.randint(0, 2048, (64, 16, 8), generator=g).to(args.device)

    @torch.no_grad()
    def decode(default: str, one_by_one: bool = False, **override: str) -> torch.Tensor:
        with sp.modes(default, **override):
            if one_by_one:  # other shapes, so other kernels and summation orders
                return torch.cat([decoder(codes[i : i + 1])[:, 0] for i in range(codes.shape[0])])
            return decoder(codes)[:, 0]

    exact = decode("exact")
    timed = exact.is_cuda  # CUDA events; on a CPU only the error columns (which are then ~0: no TF32)

    def err(default: str, **override: str) -> float:
        return float((decode(default, **override) - exact).abs().max())

    out: dict = {"streams": args.streams, "frames": args.frames, "output_abs_mean": float(exact.abs().mean())}
    out["all"] = {mode: err(mode) for mode in PRECISIONS}
    # The floor any implementation meets: the same arithmetic, the streams decoded in one batch
    # against one at a time.
    out["official_vs_exact"] = err("official")
    out["batch_vs_single"] = {
        mode: float((decode(mode) - decode(mode, one_by_one=True)).abs().max())
        for mode in ("exact", "official", "tf32")
    }
    out["stages"] = {}
    for name in sp.stages:
        row = {
            "only_tf32": err("exact", **{name: "tf32"}),
            "only_exact": err("tf32", **{name: "exact"}),
            "only_3xtf32": err("tf32", **{name: "3xtf32"}),
        }
        for mode in PRECISIONS:
            with sp.modes(mode), torch.no_grad():
                row[f"ms_{mode}"] = sp.stage_ms(decoder, timing_codes)[name] if timed else float("nan")
        out["stages"][name] = row
    with torch.no_grad():
        for mode in PRECISIONS:
            with sp.modes(mode):
                out[f"total_ms_{mode}"] = sum(sp.stage_ms(decoder, timing_codes).values()) if timed else float("nan")

    print(f"{args.streams} streams x {args.frames} frames; output mean |x| {out['output_abs_mean']:.3f}; "
          "max abs err against exact fp32:")  # fmt: skip
    print("  all stages: " + ", ".join(f"{m} {e:.2e}" for m, e in out["all"].items()))
    print(f"  official arithmetic (PyTorch defaults: TF32 convs, exact linears): {out['official_vs_exact']:.2e}")
    print("  the same arithmetic, batched against one stream at a time: "
          + ", ".join(f"{m} {e:.2e}" for m, e in out["batch_vs_single"].items()))  # fmt: skip
    print(f"  {'stage':<12} {'only TF32':>10} {'only exact':>11} {'only 3xTF32':>12}   "
          f"{'ms exact':>9} {'ms TF32':>8} {'ms 3xTF32':>9}  (64 x 8 frames, eager)")  # fmt: skip
    for name, r in out["stages"].items():
        print(f"  {name:<12} {r['only_tf32']:>10.2e} {r['only_exact']:>11.2e} {r['only_3xtf32']:>12.2e}   "
              f"{r['ms_exact']:>9.2f} {r['ms_tf32']:>8.2f} {r['ms_3xtf32']:>9.2f}")  # fmt: skip
    print("  total ms: " + ", ".join(f"{m} {out[f'total_ms_{m}']:.1f}" for m in PRECISIONS))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
