"""The table of an A/B run: engine_steps.py results of several trees, side by side.

    python benchmarks/ab_table.py DIR [--json ALL.json]

DIR holds one `engine_steps.py --json` file a run, named NAME_ROUND.json (`bash benchmarks/gpu.sh ab`
writes them so). Prints, for each decode batch (back to back, ms a step) and each prefill + first
frame (ms), every tree's rounds, its median over them, and each tree's change against the first tree
named (the tree under test in `gpu.sh ab`). With --json, writes every run into one file
({"NAME_ROUND": result}), since a GPU call brings back only a few files.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def load_runs(folder: Path) -> dict[str, dict[str, dict]]:
    """{tree: {round: engine_steps result}}, in the order of the file names (sorted)."""
    runs: dict[str, dict[str, dict]] = {}
    for path in sorted(folder.glob("*.json")):
        tree, _, round_ = path.stem.rpartition("_")
        if not tree:
            raise SystemExit(f"{path.name}: expected NAME_ROUND.json")
        runs.setdefault(tree, {})[round_] = json.loads(path.read_text())
    return runs


def measures(result: dict) -> dict[str, float]:
    """The numbers an A/B compares: decode back to back a batch, prefill + first frame a prompt length."""
    out = {f"decode, batch {d['batch']}": d["back_to_back_ms"] for d in result.get("decode", [])}
    for p in result.get("prefill", []):
        out[f"prefill + first frame, {p['prompt_tokens']} tokens"] = p["prefill_plus_first_frame_ms"]
    return out


def table(runs: dict[str, dict[str, dict]], order: list[str]) -> str:
    trees = [t for t in order if t in runs] + [t for t in runs if t not in order]
    per_tree = {t: [measures(runs[t][r]) for r in sorted(runs[t])] for t in trees}
    rows = list(dict.fromkeys(k for t in trees for m in per_tree[t] for k in m))
    head = "| ms | " + " | ".join(f"{t} (rounds) | {t}" for t in trees) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(trees)]
    for row in rows:
        medians = {}
        cells = []
        for t in trees:
            values = [m[row] for m in per_tree[t] if row in m]
            medians[t] = statistics.median(values) if values else None
            cells.append(", ".join(f"{v:.3f}" for v in values) or "–")
            base = medians[trees[0]]
            if medians[t] is None:
                cells.append("–")
            elif t == trees[0] or not base:
                cells.append(f"{medians[t]:.3f}")
            else:
                cells.append(f"{medians[t]:.3f} ({100 * (medians[t] / base - 1):+.1f} %)")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="the NAME_ROUND.json files")
    p.add_argument("--order", default="this", help="comma-separated tree names, the reference first (default this)")
    p.add_argument("--json", type=Path, help="write every run into this one file")
    args = p.parse_args(argv)
    runs = load_runs(args.folder)
    if not runs:
        raise SystemExit(f"no NAME_ROUND.json files in {args.folder}")
    print(table(runs, args.order.split(",")))
    if args.json:
        merged = {f"{t}_{r}": result for t, rounds in runs.items() for r, result in rounds.items()}
        args.json.write_text(json.dumps(merged, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
