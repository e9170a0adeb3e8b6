"""The kernels' launch choices against a golden snapshot (tests/golden/kernel_tiles.json): for every
GEMM, attention and sampler shape of the 0.6B and 1.7B models and every batch of 1 to 256 rows, which
tiles the weight-streaming GEMM takes (or cuBLAS), the SwiGLU GEMM's, the paged attention's tiles and
splits, the CUDA decode attention's, slab GEMMs' and slab SwiGLU GEMM's plans (their compile-time
constants, grid and shared memory), the sampler's threads and the launch order's row thresholds.

The launches are those of the tile table the kernels read (kernels/tile_table.py): the default one
and each GPU family's (kernels/profiles/). A change of tile tables or dispatch rules that moves any
of these fails here; speed is measured on a GPU, so the snapshot is what keeps a refactor from
changing it unseen. A deliberate change of launch choices (a new measured table) rewrites the
snapshot with `python tests/test_kernel_tiles.py --write` and says why in its commit.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from cadence.kernels.tile_table import FAMILIES, current_table, load_profile, using_table

GOLDEN = Path(__file__).parent / "golden" / "kernel_tiles.json"
ROWS = range(1, 257)
# (hidden, intermediate, query heads, kv heads, head dim, vocabulary) of each decoder stack
STACKS = {
    "0.6B talker": (1024, 3072, 16, 8, 128, 3072),
    "1.7B talker": (2048, 6144, 16, 8, 128, 3072),
    "code predictor": (1024, 3072, 16, 8, 128, 2048),  # the same in both models
}
PROJECTIONS = {"1.7B small_to_mtp": (1024, 2048)}  # the 1.7B's talker-to-code-predictor projection
PAGE_SIZE = 16
SMS = 132  # an H100 SXM's and an H200's


def stack_shapes(hidden: int, inter: int, heads: int, kv_heads: int, dim: int, vocab: int) -> dict:
    """[n, k] of a stack's weights as the fused walk holds them (qkv and gate/up concatenated)."""
    return {"qkv": ((heads + 2 * kv_heads) * dim, hidden), "o": (hidden, heads * dim), "gate_up": (2 * inter, hidden),
            "down": (hidden, inter), "head": (vocab, hidden)}  # fmt: skip


def gemm_shapes(kind: str | None = None) -> dict[str, tuple[int, int]]:
    """The distinct [n, k] of the models' GEMMs (of one kind: "gate_up", ...), named "NxK"."""
    shapes = [shape for dims in STACKS.values() for name, shape in stack_shapes(*dims).items() if kind in (None, name)]
    shapes += [] if kind else list(PROJECTIONS.values())
    return {f"{n}x{k}": (n, k) for n, k in sorted(set(shapes))}


def runs(values: list) -> list:
    """Values over ROWS as [first row, last row, value] runs."""
    out: list = []
    for row, value in zip(ROWS, values, strict=True):
        if out and out[-1][2] == value:
            out[-1][1] = row
        else:
            out.append([row, row, value])
    return out


def plain(value):
    """A launch choice as JSON: dataclasses as dicts, tuples as lists, None as null."""
    return json.loads(json.dumps(dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value))


def _plan(plan) -> dict | None:
    """What a CUDA plan compiles and launches: its constants, threads and shared memory, and its grid
    where that does not depend on the call's rows (the decode attention's: rows x kv heads / HC)."""
    if plan is None:
        return None
    out = {"defines": dict(plan.defines), "threads": getattr(plan, "threads", None), "smem": plan.smem}
    return plain(out | ({} if callable(plan.grid) else {"grid": plan.grid}))


def streaming_gemm_choices() -> dict:
    from cadence.kernels.linear.triton_streaming_gemm import gemm_tiles, swiglu_gemm_tiles

    out = {}
    for name, (n, k) in gemm_shapes().items():
        out[name] = {
            "tiles": runs([plain(gemm_tiles(n, k, rows)) for rows in ROWS]),
            "tiles without a row count": plain(gemm_tiles(n, k)),
            "swiglu": runs([plain(swiglu_gemm_tiles(n, k, rows)) for rows in ROWS]),
        }
    return out


def attention_choices() -> dict:
    from cadence.kernels.attention.triton_paged_attention import attention_splits, attention_tiles
    from cadence.kernels.launch.pdl import trigger_first_for
    from cadence.kernels.norm.triton_rms_norm import PARTS_NORM_WARPS

    return {
        "splits": {f"{kv} kv heads": runs([attention_splits(rows, kv) for rows in ROWS]) for kv in (2, 8)},
        "tiles": {
            f"max context {context}": runs([plain(attention_tiles(rows, context)) for rows in ROWS])
            for context in (None, 16, 32, 33, 12800)
        },
        "fused max rows": current_table().paged_attention.fused_max_rows,
        "trigger first": runs([trigger_first_for(rows) for rows in ROWS]),
        "norm warps over split-K partials": PARTS_NORM_WARPS,
    }


def cuda_attention_choices() -> dict:
    from cadence.kernels.attention import cuda_decode_attention as ca

    bf16 = torch.bfloat16
    plans = {}
    for new_tokens in (1, 2):
        for min_rows in (None, 1):
            kw = {"new_tokens": new_tokens} | ({} if min_rows is None else {"min_rows": min_rows})
            key = f"new tokens {new_tokens}" + ("" if min_rows is None else f", min rows {min_rows}")
            plans[key] = runs([_plan(ca.attention_plan(r, 16, 8, 128, PAGE_SIZE, bf16, **kw)) for r in ROWS])
    table = current_table().decode_attention
    decode = {"min rows": table.min_rows, "max rows": table.max_rows, "short context": table.short_context,
              "max pages": ca.MAX_PAGES}  # fmt: skip
    return {"plans": plans, "decode calls": decode}


def slab_choices() -> dict:
    from cadence.kernels.linear import cuda_slab_gemm as cuda_gemv

    talker_attention = cuda_gemv.AttentionShape(16, 8, 128, PAGE_SIZE)
    layers = {}
    for stack, dims in STACKS.items():
        s = stack_shapes(*dims)
        for attention in (None, talker_attention):
            plans = [cuda_gemv.LayerPlans.of(s["qkv"], s["o"], s["gate_up"], s["down"], r, attention) for r in ROWS]
            rows = [None if p is None else {f.name: _plan(getattr(p, f.name)) for f in dataclasses.fields(p)}
                    for p in plans]  # fmt: skip
            layers[f"{stack}, attention inside o: {attention is not None}"] = runs(rows)
    heads = {name: runs([_plan(cuda_gemv.slab_plan(n, k, r)) for r in ROWS]) for name, (n, k) in gemm_shapes().items()}
    return {"layers": layers, "gemms": heads, "max rows": cuda_gemv.MAX_ROWS}


def slab_swiglu_choices() -> dict:
    from cadence.kernels.linear import cuda_slab_swiglu_gemm as cuda_gemm64

    plans = {f"{name} swiglu": runs([_plan(cuda_gemm64.slab_swiglu_plan(n // 2, k, r, True, SMS)) for r in ROWS])
             for name, (n, k) in gemm_shapes("gate_up").items()}  # fmt: skip
    plans["4096x1024"] = runs([_plan(cuda_gemm64.slab_swiglu_plan(4096, 1024, r, ctas=SMS)) for r in ROWS])  # qkv
    table = current_table().slab_swiglu_gemm
    routed = {"min rows": table.min_rows, "max rows": table.max_rows}
    return {"plans": plans, "routed rows": routed}


def sampler_choices() -> dict:
    from cadence.kernels.sampling import cuda_sampler

    out = {
        "cuda threads": {str(v): cuda_sampler.threads_for(v) for v in (1, 300, 2048, 2049, 3072, 4096)},
        "cuda max vocabulary": cuda_sampler.MAX_VOCAB,
    }
    from cadence.kernels.sampling import triton_sampler

    out["triton top-k search"] = {str(2**b): list(triton_sampler.topk_search(2**b)) for b in range(4, 18)}
    out["triton warps"] = current_table().sampler.triton_warps
    return out


def kv_prefetch_choices() -> dict:
    from cadence.kernels.norm.kv_prefetch import CODE_PREDICTOR_MEGABYTES, KvPrefetchPlan

    cache = torch.empty(1, PAGE_SIZE, 8, 128, dtype=torch.bfloat16)  # a layer's keys: 16-token pages, 8 heads of 128
    plan = KvPrefetchPlan(CODE_PREDICTOR_MEGABYTES)
    return {"code predictor megabytes": plan.megabytes, "tokens a row": runs([plan.tokens(r, cache) for r in ROWS])}


SECTIONS = {
    "streaming gemm": streaming_gemm_choices,
    "attention": attention_choices,
    "cuda attention": cuda_attention_choices,
    "slab gemm": slab_choices,
    "slab swiglu gemm": slab_swiglu_choices,
    "sampler": sampler_choices,
    "kv prefetch": kv_prefetch_choices,
}
NEEDS_TRITON = {"streaming gemm", "attention", "sampler"}


def first_difference(got, want, where: str = "") -> str | None:
    """Where two JSON values first differ (a dotted path and both values), or None."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got)):
            if (diff := first_difference(got.get(key), want.get(key), f"{where}.{key}")) is not None:
                return diff
        return None
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if (diff := first_difference(a, b, f"{where}[{i}]")) is not None:
                return diff
        return None
    return None if got == want else f"{where}: got {got!r}, want {want!r}"


def dump(value, depth: int = 0) -> str:
    """JSON with a line a key down to the runs, each run on one line (a readable diff)."""
    pad = " " * depth
    if isinstance(value, dict) and depth < 7:
        items = [f"{pad} {json.dumps(k)}: {dump(v, depth + 1).lstrip()}" for k, v in value.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and isinstance(value[0], list):
        return pad + "[\n" + ",\n".join(f"{pad} {json.dumps(v)}" for v in value) + "\n" + pad + "]"
    return pad + json.dumps(value)


def snapshot(table) -> dict:
    """Every section's launches with `table` installed."""
    with using_table(table):
        return {name: plain(make()) for name, make in SECTIONS.items()}


@pytest.mark.parametrize("section", list(SECTIONS))
@pytest.mark.parametrize("profile", [None, *FAMILIES])
def test_launch_choices_match_the_snapshot(section, profile):
    """The launches of the table the kernels read until one is installed (None: the snapshot's
    "default"), and of each GPU family's table installed: its own snapshot where its launches
    differ from the default's, else the default's."""
    if section in NEEDS_TRITON:
        pytest.importorskip("triton")
    golden = json.loads(GOLDEN.read_text())
    want = golden[profile or "default"].get(section, golden["default"][section])
    table = current_table() if profile is None else load_profile(profile)
    with using_table(table):
        diff = first_difference(plain(SECTIONS[section]()), want, section)
    assert diff is None, diff


if __name__ == "__main__":  # python tests/test_kernel_tiles.py --write
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_kernel_tiles.py --write  (rewrites the snapshot from the code)")
    default = snapshot(current_table())
    golden = {"default": default}
    for family in FAMILIES:
        own = snapshot(load_profile(family))
        golden[family] = {name: launches for name, launches in own.items() if launches != default[name]}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(dump(golden) + "\n")
