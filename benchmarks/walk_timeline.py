"""Where a decode walk's time goes as served: each kernel's start and end inside the CUDA graph
replays, read from the profiler's raw trace. CUPTI records the kernels a graph launches, with their
times and grids, though torch.profiler's op table (engine_steps.py --profile) shows none of them,
which is why that profile launches the walk eagerly instead.

Under programmatic dependent launch a kernel starts (its programs resident) before the one before
it ends, then waits; so its own duration counts that wait, and what a kernel adds to the walk is
the time from the end of every kernel before it (or its own start, after an idle gap) to its own
end ("adds"), so that the adds and the idle time sum to the span. Per kernel (name and
grid): launches a walk, median duration, median and total "adds" a walk; for the walk: its span,
its kernels' summed durations (more than the span where they overlap) and the idle time between
them. perf-notes #65 asks this of the two launch orders at batch 1:

    python benchmarks/walk_timeline.py --model CKPT --batches 1,64 [--walks 5] [--json out.json]
    CADENCE_PDL_TRIGGER_FIRST=1 python benchmarks/walk_timeline.py --model CKPT --batches 1,64

GPU only (the trace has no kernels on a CPU). CUPTI's tracing may add a little to each kernel:
compare the orders with each other here, and take walk times from engine_steps.py.

--stamps (perf-notes #93): instead of CUPTI, the clock stamps the weight-streaming GEMMs and the
decode attention write from inside, the Triton kernels' and the CUDA ones' (the slab GEMM and the
decode attention: `slab NxK`, `cuda attention RxC`; `triton_launch.trace_kernels`, on for the graphs'
capture):
one walk, each such kernel in time order, grouped by name (shape and grid). Per group, medians over
its calls, us: lead (how long before the previous stamped kernel's last program ended its first
started), start (that end -> its median program's start: negative where most of its programs sat on
the SMs beside the kernels before it, which the lead cannot tell when a few started early on SMs
the previous kernel left free; perf-notes #134, #136), release (that end -> its first program past
its PDL wait: the unstamped kernels between, norms, silu, the sampler, run there), loop (a
program's main loop, the median program), tail (loop done -> end) and span (the previous stamped
kernel's end -> its own last end); and each group's spans summed over the walk, which with the time
before the first stamped kernel make up the walk. --stamp-norms stamps the RMSNorms too (`norm` and
`norm parts`, the ones that add a split GEMM's partials), so a norm's span stands between the GEMMs'
and a GEMM's release counts from the norm before it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_steps import admit, ints, release  # noqa: E402

from cadence.engine.config import EngineConfig, RunawayGuard  # noqa: E402
from cadence.engine.engine import build_core  # noqa: E402
from cadence.models.qwen3_tts import Qwen3TTS  # noqa: E402


@dataclass(frozen=True)
class Kernel:
    """One kernel of the trace: its name and grid, start and end in µs."""

    name: str
    grid: tuple[int, ...]
    start: float
    end: float


@dataclass
class KernelRow:
    """One kernel (name and grid) over the walks traced."""

    name: str
    grid: tuple[int, ...]
    per_walk: float  # launches a walk
    median_us: float  # its own duration (under PDL: its wait included)
    median_adds_us: float  # from the end of every kernel before it to its end
    adds_per_walk_us: float


def kernels_of_trace(trace: dict) -> list[Kernel]:
    """The GPU kernels of a Chrome trace written by torch.profiler, in start order."""
    kernels = [
        Kernel(e["name"], tuple(e.get("args", {}).get("grid", ())), float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in trace.get("traceEvents", [])
        if e.get("cat") == "kernel" and e.get("ph") == "X"
    ]
    return sorted(kernels, key=lambda k: k.start)


def summarize(kernels: list[Kernel], walks: int) -> tuple[dict, list[KernelRow]]:
    """The walk's totals (per walk) and one row per kernel, the most added time first."""
    adds: dict[tuple[str, tuple[int, ...]], list[float]] = {}
    durations: dict[tuple[str, tuple[int, ...]], list[float]] = {}
    idle = 0.0
    latest_end = kernels[0].start if kernels else 0.0
    for k in kernels:
        key = (k.name, k.grid)
        adds.setdefault(key, []).append(max(0.0, k.end - max(latest_end, k.start)))
        durations.setdefault(key, []).append(k.end - k.start)
        idle += max(0.0, k.start - latest_end)
        latest_end = max(latest_end, k.end)
    span = (latest_end - kernels[0].start) if kernels else 0.0
    totals = {
        "kernels_per_walk": len(kernels) / walks,
        "span_us_per_walk": span / walks,  # includes the host's gaps between replays
        "kernel_us_per_walk": sum(k.end - k.start for k in kernels) / walks,
        "idle_us_per_walk": idle / walks,
    }
    rows = [
        KernelRow(
            name,
            grid,
            len(adds[(name, grid)]) / walks,
            statistics.median(durations[(name, grid)]),
            statistics.median(adds[(name, grid)]),
            sum(adds[(name, grid)]) / walks,
        )  # fmt: skip
        for name, grid in adds
    ]
    return totals, sorted(rows, key=lambda r: -r.adds_per_walk_us)


def raw_kernels(kernels: list[Kernel]) -> dict:
    """The raw kernel list, compact (a walk has ~900 kernels with C++ names hundreds of characters
    long): "kernel_names", and "kernels" as [name index, grid, start, end] rows, in µs from the
    first kernel's start."""
    names: dict[str, int] = {}
    t0 = kernels[0].start if kernels else 0.0
    rows = [
        [names.setdefault(k.name, len(names)), list(k.grid), round(k.start - t0, 2), round(k.end - t0, 2)]
        for k in kernels
    ]
    return {"kernel_names": list(names), "kernels": rows}


def warm_walks(core, model: Qwen3TTS, batch: int, context: int, frames: int) -> tuple[list, list[int]]:
    """`batch` streams admitted at `context` tokens with room for `frames` frames, after three walks
    (graphs and caches warm); their admissions and slots."""
    admissions = admit(core, model, batch, context, frames)
    slots = [a.slot for a in admissions]
    for _ in range(3):
        core.talker.decode(slots).wait()
        core.talker.advance()
    torch.cuda.synchronize(model.device)
    return admissions, slots


def trace_walks(core, model: Qwen3TTS, batch: int, context: int, walks: int, half: str = "walk") -> list[Kernel]:
    """`walks` decode walks of `batch` streams at `context` tokens, replayed as the engine runs them
    (frames, then the talker's half), under the profiler; their kernels. half "frame" or "advance":
    only that graph of the walk, replayed `walks` times on its own (perf-notes #81)."""
    admissions, slots = warm_walks(core, model, batch, context, walks + 8)
    talker = core.talker
    graph = talker.fast.graphs[talker.fast.bucket(batch)] if half != "walk" else None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(walks):
            if graph is None:
                talker.decode(slots)
                talker.advance()
            else:  # the slots decode() last set stay in the graph's input
                (graph.frame if half == "frame" else graph.advance).replay()
        torch.cuda.synchronize(model.device)
    release(core, admissions)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return kernels_of_trace(json.loads(path.read_text()))


def stamped_walk(core, model: Qwen3TTS, trace, batch: int, context: int) -> list[dict]:
    """One decode walk of `batch` streams as the engine runs it, its stamped kernels (those of the
    graphs captured inside `trace`, a `triton_launch.KernelTrace`) in the order they started: name,
    programs and stamps in us."""
    admissions, slots = warm_walks(core, model, batch, context, 16)
    talker = core.talker
    trace.stamps.zero_()  # what is not zero after the walk is the walk's
    talker.decode(slots)
    talker.advance()
    torch.cuda.synchronize(model.device)
    release(core, admissions)
    stamps = trace.by_call()
    calls = []
    for i, (name, programs) in enumerate(trace.calls):
        rows = stamps[i, :programs]
        if bool((rows[:, 0] > 0).all()):
            calls.append({"name": name, "programs": programs, "stamps": rows.double() / 1e3})
    return sorted(calls, key=lambda c: float(c["stamps"][:, 0].min()))


def call_columns(stamps: torch.Tensor, prev_end: float | None) -> dict[str, float]:
    """One stamped call's columns from its programs' stamps ([programs, fields], us): loop and tail
    (medians over its programs) and, after the previous stamped call's end `prev_end`, its lead,
    release and span (the module docstring's --stamps paragraph)."""
    start, waited, loop, end = stamps[:, 0], stamps[:, 2], stamps[:, 3], stamps[:, 4]
    row = {"loop": float((loop - waited).median()), "tail": float((end - loop).median())}
    if prev_end is not None:
        row.update(lead=prev_end - float(start.min()), start=float(start.median()) - prev_end,
                   release=float(waited.min()) - prev_end, span=float(end.max()) - prev_end)  # fmt: skip
    return row


def stamp_groups(calls: list[dict]) -> tuple[float, list[dict]]:
    """The walk's span from its first stamped kernel, and per kernel name the medians and summed spans."""
    groups: dict[str, dict[str, list[float]]] = {}
    prev_end = None
    for call in calls:
        row = call_columns(call["stamps"], prev_end)
        end = float(call["stamps"][:, 4].max())
        prev_end = end if prev_end is None else max(prev_end, end)
        for key, value in row.items():
            groups.setdefault(f"{call['name']} ({call['programs']})", {}).setdefault(key, []).append(value)
    span = prev_end - float(calls[0]["stamps"][:, 0].min()) if calls else 0.0
    rows = [
        {"kernel": name, "calls": len(v["loop"]), "span_total": sum(v.get("span", [])),
         **{key: statistics.median(vals) for key, vals in v.items()}}
        for name, v in groups.items()
    ]  # fmt: skip
    return span, sorted(rows, key=lambda r: -r["span_total"])


def main_stamps(args, model: Qwen3TTS, config: EngineConfig) -> None:
    """--stamps: the engine built with its graphs' GEMMs and attentions stamped, one walk a batch."""
    from cadence.kernels.triton_launch import trace_kernels  # Triton: only where there is a GPU

    with trace_kernels(16000, torch.device("cuda"), programs=1024, norms=args.stamp_norms) as trace:
        core = build_core(model, config)
    results = []
    for batch in args.batches:
        span, rows = stamp_groups(stamped_walk(core, model, trace, batch, args.context))
        print(f"\n== batch {batch}: stamped kernels from the first one's start to the last one's end {span:.1f} us")
        print(f"{'kernel (programs)':<34} {'calls':>5} {'lead':>6} {'start':>6} {'release':>8} {'loop':>6} "
              f"{'tail':>6} {'span':>6} {'span/walk':>9}")  # fmt: skip
        for r in rows:
            print(f"{r['kernel']:<34} {r['calls']:>5} {r.get('lead', 0):>6.2f} {r.get('start', 0):>6.2f} "
                  f"{r.get('release', 0):>8.2f} {r['loop']:>6.2f} {r['tail']:>6.2f} {r.get('span', 0):>6.2f} "
                  f"{r['span_total']:>9.1f}")  # fmt: skip
        results.append({"batch": batch, "span_us": span, "rows": rows})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (a random full-size one)")
    p.add_argument("--batches", type=ints, default=[1, 64])
    p.add_argument("--context", type=int, default=500, help="prompt tokens in the KV cache")
    p.add_argument("--walks", type=int, default=5, help="walks traced per batch")
    p.add_argument("--kv-gb", type=float, default=20.0)
    p.add_argument("--rows", type=int, default=25, help="kernels printed per batch")
    p.add_argument("--half", choices=["walk", "frame", "advance"], default="walk",
                   help="trace whole walks, or replays of one of the walk's two graphs alone")  # fmt: skip
    p.add_argument("--stamps", action="store_true",
                   help="the stamps of the GEMMs and attentions instead of the profiler (perf-notes #93)")  # fmt: skip
    p.add_argument("--stamp-norms", action="store_true",
                   help="with --stamps, the RMSNorms too (a GEMM's release then counts from its norm)")  # fmt: skip
    p.add_argument("--json", help="write the totals, every row and the raw kernel list (compact) here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("walk_timeline.py needs a GPU: the kernels it reads are those of CUDA graph replays")

    model = Qwen3TTS.from_pretrained(args.model, "cuda", "bf16")
    config = EngineConfig(
        max_streams=max(args.batches), kv_cache_memory=args.kv_gb, attention_backend="triton",
        graph_buckets=tuple(args.batches), max_seq_tokens=max(2048, args.context + args.walks + 64),
        runaway=RunawayGuard(frames_per_token=0, loop_window=0, silence_seconds=0),
    )  # fmt: skip
    if args.stamps:
        return main_stamps(args, model, config)
    core = build_core(model, config)
    results = []
    for batch in args.batches:
        kernels = trace_walks(core, model, batch, args.context, args.walks, args.half)
        if not kernels:
            sys.exit("the profiler recorded no kernels inside the graph replays on this setup")
        totals, rows = summarize(kernels, args.walks)
        what = "walks" if args.half == "walk" else f"{args.half} replays"
        print(f"\n== batch {batch}, {args.walks} {what}: " + ", ".join(f"{k} {v:.1f}" for k, v in totals.items()))
        print(f"{'kernel':<44} {'grid':>14} {'/walk':>6} {'median us':>10} {'adds us':>8} {'adds/walk':>10}")
        for r in rows[: args.rows]:
            grid = "x".join(map(str, r.grid))
            print(
                f"{r.name[:44]:<44} {grid:>14} {r.per_walk:>6.1f} {r.median_us:>10.2f} {r.median_adds_us:>8.2f} "
                f"{r.adds_per_walk_us:>10.1f}"
            )
        results.append(
            {"batch": batch, "half": args.half, "totals": totals, "rows": [asdict(r) for r in rows],
             **raw_kernels(kernels)}
        )  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
