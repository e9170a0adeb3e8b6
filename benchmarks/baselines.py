"""Batch-1 speed of the official qwen-tts, faster-qwen3-tts and cadence on the same checkpoint.

    python benchmarks/baselines.py --impl official --model DIR --frames 60   # PYTHONPATH with qwen-tts 0.1.1
    python benchmarks/baselines.py --impl faster   --model DIR --frames 60   # with faster-qwen3-tts 0.5.4
    python benchmarks/baselines.py --impl cadence  --model DIR --frames 60

Each prints one JSON line: wall seconds for one utterance of about `--frames` frames (voice ryan,
English, the checkpoint's sampling defaults), frames produced, ms per frame, and real-time factor
(wall / audio; < 1 is faster than real time). The first run of each is a warm-up and is not counted.
The official packages import audio libraries that their 12 Hz CustomVoice path never calls (sox,
librosa, soundfile); where those are missing they are replaced by inert modules.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import statistics
import sys
import time
import types
from pathlib import Path

TEXT = (
    "Cadence streams speech as it is generated, so a listener hears the first words while the rest of "
    "the sentence is still being spoken by the model."
)


def stub_missing(*names: str) -> None:
    for name in names:
        try:
            __import__(name)
        except Exception:
            stub = types.ModuleType(name)
            stub.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
            sys.modules[name] = stub
    if isinstance(sys.modules.get("librosa"), types.ModuleType) and not hasattr(sys.modules["librosa"], "load"):
        filters = types.ModuleType("librosa.filters")
        filters.mel = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("librosa stub"))
        sys.modules["librosa.filters"] = filters
        sys.modules["librosa"].filters = filters


def run_official(model: str, frames: int):
    import torch
    import transformers  # noqa: F401

    stub_missing("sox", "soundfile", "librosa")
    from qwen_tts import Qwen3TTSModel

    m = Qwen3TTSModel.from_pretrained(model, dtype=torch.bfloat16, device_map="cuda", attn_implementation="sdpa")

    def once(n):
        wavs, sr = m.generate_custom_voice(TEXT, speaker="ryan", language="english", max_new_tokens=n + 1)
        torch.cuda.synchronize()
        return len(wavs[0]) // 1920

    return once


def run_faster(model: str, frames: int):
    import torch
    import transformers  # noqa: F401

    stub_missing("sox", "soundfile", "librosa")
    from transformers import MimiConfig

    # Under transformers 5.x MimiConfig keeps rope_theta inside rope_parameters, while qwen-tts-hf
    # reads config.rope_theta: give it the attribute.
    init = MimiConfig.__init__

    def patched(self, *a, **k):
        init(self, *a, **k)
        if not hasattr(self, "rope_theta"):
            self.rope_theta = (getattr(self, "rope_parameters", None) or {}).get("rope_theta", 10000.0)

    MimiConfig.__init__ = patched
    from faster_qwen3_tts import FasterQwen3TTS

    m = FasterQwen3TTS.from_pretrained(model, device="cuda", dtype=torch.bfloat16)

    def once(n):
        wavs, sr = m.generate_custom_voice(TEXT, speaker="ryan", language="english", max_new_tokens=n)
        torch.cuda.synchronize()
        return len(wavs[0]) // 1920

    return once


def run_cadence(model: str, frames: int):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cadence.engine.config import EngineConfig
    from cadence.models.qwen3_tts.frontend import SynthesisRequest
    from cadence.pretrained import Engine

    engine = Engine.from_pretrained(model, "cuda", config=EngineConfig(max_streams=8))

    def once(n):
        u = engine.synthesize_blocking(SynthesisRequest(TEXT, voice="ryan", language="english", max_new_tokens=n))
        return u.frames

    return once


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", required=True, choices=["official", "faster", "cadence"])
    p.add_argument("--model", required=True)
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    start = time.perf_counter()
    once = {"official": run_official, "faster": run_faster, "cadence": run_cadence}[args.impl](args.model, args.frames)
    load_s = time.perf_counter() - start
    once(8)  # warm-up (kernel compilation, graph capture, allocator)
    walls, counts = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        counts.append(once(args.frames))
        walls.append(time.perf_counter() - t)
    wall, n = statistics.median(walls), statistics.median(counts)
    print(json.dumps({
        "impl": args.impl, "load_seconds": round(load_s, 1), "frames": n, "wall_seconds": round(wall, 3),
        "ms_per_frame": round(wall / max(n, 1) * 1e3, 2), "rtf_wall_over_audio": round(wall / max(n * 0.08, 1e-9), 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
