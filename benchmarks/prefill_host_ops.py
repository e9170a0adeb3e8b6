"""The ops a talker prefill issues before its CUDA graph replays, counted with torch.profiler.

With the GPU idle before a prefill, each of those launches (~5-10 us of host time) is on the
critical path of time-to-first-audio. Ops are counted per part, the function that issued them:
embeddings (Qwen3TTS.prefill_embeddings_batch on the eager walk; on the fused walk only a cloned
voice's codec_overrides: the rest runs inside the prefill graph), slot state (SlotState's assign
methods), graph inputs (FastDecoder.prefill, the replay aside). `aten` counts every top-level
aten op, views included; `work` only those that copy or compute; on CUDA `launches` the kernel
launches and copies the runtime saw. `--repeats N` also times each part's host time and the whole prefill's (until
`prefill` returns, the graph replay queued, not run), median of N. On the CPU the prefill graphs
are stand-ins that replay nothing.

    python benchmarks/prefill_host_ops.py --checkpoint /tmp/tiny06 --prompts 1 4
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cadence.engine.config import EngineConfig  # noqa: E402
from cadence.engine.engine import SynthesisRequest, build_core, prepare_request  # noqa: E402
from cadence.engine.partition import Admission  # noqa: E402
from cadence.models.qwen3_tts import Qwen3TTS  # noqa: E402
from cadence.models.qwen3_tts.fast_step import FastDecoder  # noqa: E402
from cadence.models.qwen3_tts.partitions import SlotState  # noqa: E402
from cadence.models.qwen3_tts.walk_buffers import PrefillGraph  # noqa: E402

PARTS = (
    (Qwen3TTS, "prefill_embeddings_batch", "embeddings"),  # the eager walk's; the fused one's are in its graph
    (Qwen3TTS, "codec_overrides", "embeddings"),
    (SlotState, "assign_batch", "slot state"),
    (SlotState, "assign", "slot state"),  # before assign_batch
    (FastDecoder, "prefill", "graph inputs"),
)
# Ops that only make views or allocate: no kernel on a GPU.
META = {
    "aten::view", "aten::as_strided", "aten::select", "aten::slice", "aten::unsqueeze", "aten::squeeze",
    "aten::expand", "aten::t", "aten::transpose", "aten::permute", "aten::reshape", "aten::_reshape_alias",
    "aten::alias", "aten::detach", "aten::detach_", "aten::lift_fresh", "aten::empty", "aten::empty_strided",
    "aten::unbind", "aten::split", "aten::narrow", "aten::_unsafe_view", "aten::to", "aten::result_type",
    "aten::resolve_conj", "aten::resolve_neg",
}  # fmt: skip
# Runtime calls that queue device work (the graph's own launch is not counted).
LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync",
            "cudaMemsetAsync"}  # fmt: skip


@dataclass
class Counts:
    aten: int = 0  # top-level aten ops
    work: int = 0  # of which copy or compute
    launches: int = 0  # CUDA runtime launches and copies


class NoReplay:
    """A prefill graph stand-in on the CPU: its inputs are written as on a GPU, it replays nothing."""

    def replay(self) -> None:
        pass


HOST_SECONDS: dict[str, float] = defaultdict(float)  # per part, since the last clear


def label_parts() -> None:
    """Each part's function runs under a profiler range named after the part, and its host time
    adds to HOST_SECONDS."""

    def labelled(f, part: str):
        @functools.wraps(f)
        def run(*args, **kwargs):
            start = time.perf_counter()
            with record_function(f"part: {part}"):
                out = f(*args, **kwargs)
            HOST_SECONDS[part] += time.perf_counter() - start
            return out

        return run

    for owner, name, part in PARTS:
        if hasattr(owner, name):
            setattr(owner, name, labelled(getattr(owner, name), part))


def part_of(event, ranges) -> str:
    """The part whose range holds `event` (by time: runtime events may have no parent)."""
    for r in ranges:
        if r.time_range.start <= event.time_range.start and event.time_range.end <= r.time_range.end:
            return r.name.removeprefix("part: ")
    return "other"


def aten_parent(event):
    e = event.cpu_parent
    while e is not None and not e.name.startswith("aten::"):
        e = e.cpu_parent
    return e


def does_work(event) -> bool:
    return event.name not in META or any(does_work(c) for c in event.cpu_children if c.name.startswith("aten::"))


def count(prefill, cuda: bool) -> dict[str, Counts]:
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        prefill()
        if cuda:
            torch.cuda.synchronize()
    events = prof.events()
    ranges = [e for e in events if e.name.startswith("part: ")]
    table: dict[str, Counts] = defaultdict(Counts)
    for e in events:
        if e.name.startswith("aten::") and aten_parent(e) is None:
            table[part_of(e, ranges)].aten += 1
            table[part_of(e, ranges)].work += does_work(e)
        elif e.name in LAUNCHES:
            table[part_of(e, ranges)].launches += 1
    return table


def host_times(prefill, sync, repeats: int) -> dict[str, float]:
    """Median host microseconds per part and for the whole prefill, the device idle at each start."""
    samples: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeats):
        sync()
        HOST_SECONDS.clear()
        start = time.perf_counter()
        prefill()
        samples["whole prefill"].append(time.perf_counter() - start)
        for part, seconds in HOST_SECONDS.items():
            samples[part].append(seconds)
    return {part: statistics.median(v) * 1e6 for part, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="e.g. a tiny random one: cadence.cli checkpoint random")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--prompts", type=int, nargs="+", default=[1, 4], help="admissions in one prefill")
    ap.add_argument("--layout", default="whole", choices=["whole", "streaming"], help="streaming: trailing text")
    ap.add_argument("--repeats", type=int, default=0, help="also time the host work, median of this many")
    args = ap.parse_args()
    cuda = torch.device(args.device).type == "cuda"
    label_parts()
    model = Qwen3TTS.from_pretrained(args.checkpoint, args.device, args.dtype)
    backend = "triton" if cuda else "torch"
    core = build_core(model, EngineConfig(max_streams=8, kv_cache_memory=0.02, attention_backend=backend))
    talker, fast = core.talker, core.talker.fast
    if not cuda:
        width = model.config.talker.hidden_size
        for rows in fast.prefill_buckets:
            extra = torch.zeros(rows, width, dtype=model.dtype)
            fast.prefill_graphs[rows] = PrefillGraph(NoReplay(), fast._prefill_inputs([], [], rows, []), extra)
    print(f"{'prompts':>7}  {'part':<12} {'aten':>5} {'work':>5} {'launches':>8}")
    for n in args.prompts:
        asks = [SynthesisRequest(f"Request {i}, a sentence.", layout=args.layout, seed=i) for i in range(n)]
        admissions = []
        for slot, ask in enumerate(asks):
            req = prepare_request(model, ask, 4096)
            admissions.append(Admission(slot, req, talker.kv.allocate(talker.kv.pages_for(len(req.prompt) + 8))))
        talker.prefill(admissions)  # warm-up: lazily made buffers
        table = count(lambda: talker.prefill(admissions), cuda)  # noqa: B023
        for part in ("embeddings", "slot state", "graph inputs", "other"):
            c = table[part]
            print(f"{n:>7}  {part:<12} {c.aten:>5} {c.work:>5} {c.launches if cuda else '-':>8}")
        if args.repeats:
            sync = torch.cuda.synchronize if cuda else (lambda: None)
            us = host_times(lambda: talker.prefill(admissions), sync, args.repeats)  # noqa: B023
            print(f"{n:>7}  host us: " + ", ".join(f"{part} {t:.0f}" for part, t in us.items()))
        for a in admissions:
            talker.kv.release(a.pages)


if __name__ == "__main__":
    main()
