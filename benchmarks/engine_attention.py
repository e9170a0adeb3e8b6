"""The talker's decode attention on the engine's own state, against the same kernel on copies of it
(perf-notes #82). walk_timeline.py finds the b64 talker attention at ~56 µs a layer in the walk
whatever its tiles, where `paged_attention.py --fused` times the same kernel at 38-50 µs on fresh
random caches. This builds an engine, admits `--batch` streams of `--context` prompt tokens, runs
a few walks, then times the fused decode attention (28 calls, one a layer, in one CUDA graph,
launched with the engine's PDL order) over:

  engine     the engine's KV pool and block table (int64), as the walk reads them
  table32    the same with the block table as int32
  int32      the same with the table, context lengths, positions and slots all int32 (as
             paged_attention.py passed them before perf-notes #84; the engine's are int64)
  copy       the pool's used pages copied into a tensor of their own (same values, small)
  random     that copy filled with random values (paged_attention.py's data)

each with the shipped tiles and the pipelined ones (64 tokens, 4 warps, 2 stages), launched three
ways: alone without PDL (as `paged_attention.py` times it alone), alone with the engine's PDL order
(one attention right behind the other), and each behind the GEMM that makes its qkv rows, as the
walk runs it (the GEMMs' own time taken off, as `paged_attention.py --chain`). Then inside the
engine's own decoder layers (its weights, as `FusedStack` runs them; the layers without it taken
off, as `paged_attention.py --layers`) with and without PDL, inside `paged_attention.py --layers`'s
random-weight layers over the same state, and the engine's `FusedStack` itself against the engine's
layers as a check that they are the same work. GPU only:

    python benchmarks/engine_attention.py --model CKPT [--batch 64] [--context 500] [--kv-gb 20]
        [--caches engine table32 copy random]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_steps import admit, release  # noqa: E402
from graph_timing import replay_ms  # noqa: E402
from paged_attention import decoder_layers, random_layer  # noqa: E402

from cadence.engine.config import EngineConfig, RunawayGuard  # noqa: E402
from cadence.engine.engine import build_core  # noqa: E402
from cadence.kernels import triton_ops  # noqa: E402
from cadence.models.qwen3_tts import Qwen3TTS  # noqa: E402

PIPELINED = triton_ops.AttentionTiles(block_tokens=64, warps=4, stages=2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (a random full-size one)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=500, help="prompt tokens in the KV cache")
    p.add_argument("--kv-gb", type=float, default=20.0)
    states = ["engine", "table32", "int32", "copy", "random"]
    p.add_argument("--caches", nargs="+", default=states, choices=states, help="the states to time the kernel on")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("engine_attention.py needs a GPU")

    model = Qwen3TTS.from_pretrained(args.model, "cuda", "bf16")
    config = EngineConfig(
        max_streams=args.batch, kv_cache_memory=args.kv_gb, attention_backend="triton", graph_buckets=(args.batch,),
        max_seq_tokens=max(2048, args.context + 64), runaway=RunawayGuard(frames_per_token=0, loop_window=0,
                                                                          silence_seconds=0),
    )  # fmt: skip
    core = build_core(model, config)
    admissions = admit(core, model, args.batch, args.context, 16)
    slots = [a.slot for a in admissions]
    talker = core.talker
    for _ in range(3):
        talker.decode(slots).wait()
        talker.advance()
    torch.cuda.synchronize()

    fast, kv = talker.fast, talker.kv
    st, stack = fast.state, fast.talker_stack
    idx = torch.tensor(slots, device="cuda")
    position, table = st.position[idx], st.block_table[idx]
    ctx = position + 1
    page = table.gather(1, (position // fast.ps)[:, None])[:, 0]
    slot_index = page * fast.ps + position % fast.ps
    used = int(table[:, : int(ctx.max()) // fast.ps + 1].max()) + 1  # pages 0..used-1 hold every row's context
    print(f"contexts {int(ctx.min())}-{int(ctx.max())} tokens, block table {table.dtype} {tuple(table.shape)}, "
          f"pages of row 0 {table[0, :4].tolist()}..., pool {tuple(kv.k.shape)}, pages used {used}")  # fmt: skip

    qkv = torch.randn(args.batch, (stack.heads + 2 * stack.kv_heads) * stack.head_dim, device="cuda",
                      dtype=kv.k.dtype)  # fmt: skip
    x = torch.randn(args.batch, stack.norm.shape[0], device="cuda", dtype=kv.k.dtype)
    no_attention = torch.randn(args.batch, stack.heads * stack.head_dim, device="cuda", dtype=kv.k.dtype)
    layers = kv.k.shape[0]
    caches = {"engine": [(kv.k[i], kv.v[i]) for i in range(layers)]}  # table32 reads these too
    if {"copy", "random"} & set(args.caches):  # ~4 GB each at b64: only when asked for
        caches["copy"] = [(kv.k[i, :used].clone(), kv.v[i, :used].clone()) for i in range(layers)]
    if "random" in args.caches:
        caches["random"] = [(torch.randn_like(k), torch.randn_like(v)) for k, v in caches["copy"]]
    # (block table, context lengths, positions, cache slots) each state reads
    engine_index = (table, ctx, position, slot_index)
    int32_index = tuple(t.int() for t in engine_index)
    indices = {"engine": engine_index, "table32": (table.int(), *engine_index[1:]), "int32": int32_index,
               "copy": engine_index, "random": engine_index}  # fmt: skip

    def attend(rows, i: int, k, v, index, tiles):
        L, (tbl, context, pos, slots) = stack.layers[i], index
        return triton_ops.qk_norm_rope_attention(
            rows, L.q_norm, L.k_norm, stack.eps, stack.cos, stack.sin, pos, k, v, slots, tbl, context,
            stack.scale, stack.heads, stack.kv_heads, tiles=tiles, max_context=stack.max_positions,
        )  # fmt: skip

    def attentions(name: str, tiles, chain: bool):
        """One attention a layer, each alone or behind the GEMM making its qkv rows."""
        pairs, index = caches.get(name, caches["engine"]), indices[name]

        def call():
            for i, (k, v) in enumerate(pairs):
                attend(triton_ops.linear(x, stack.layers[i].wqkv) if chain else qkv, i, k, v, index, tiles)

        return call

    def gemms():
        for L in stack.layers:
            triton_ops.linear(x, L.wqkv)

    shapes = (stack.norm.shape[0], stack.layers[0].wgu.shape[0] // 2, stack.heads, stack.kv_heads, stack.head_dim)
    random_layers = [random_layer(*shapes) for _ in range(layers)]  # paged_attention.py --layers's, the stack's shapes

    def engine_layers(tiles, with_attention: bool = True, weights=None):
        """The engine's own layers (weights, KV state) as FusedStack runs them, or `weights` of the same
        shapes over the same KV state; without the attention, the o GEMM reads a fixed tensor instead."""

        def attention(i: int, rows):
            return attend(rows, i, kv.k[i], kv.v[i], engine_index, tiles) if with_attention else no_attention

        return lambda: decoder_layers(x, weights or stack.layers, stack.norm, stack.eps, attention)

    def fused_stack():
        return stack(x, position, table, ctx, slot_index, kv.k, kv.v, decode=True)

    kv_bytes = layers * args.batch * float(ctx.float().mean()) * stack.kv_heads * stack.head_dim * 2 * 2

    def cell(label: str, ms: float) -> str:
        return f"{label} {ms:6.3f} ms ({ms * 1e3 / layers:5.1f} us a layer, {kv_bytes / ms / 1e9:4.2f} TB/s)"

    tile_choices = (("shipped", None), ("pipelined", PIPELINED))
    # (PDL, behind the qkv GEMMs): the last as the walk launches it, whose GEMMs' own time is taken off
    orders = {"alone, no PDL": (False, False), "alone, PDL": (True, False), "behind qkv, PDL": (True, True)}
    for order, (pdl, chain) in orders.items():
        with triton_ops.pdl_settings(pdl, triton_ops.trigger_first_for(args.batch)):
            base = replay_ms(gemms) if chain else 0.0
            for name in args.caches:
                cells = [cell(label, replay_ms(attentions(name, tiles, chain)) - base) for label, tiles in tile_choices]
                print(f"{order:>16}, {name:>8}: " + "; ".join(cells), flush=True)
    # inside decoder layers: the engine's weights with and without PDL, and paged_attention.py
    # --layers's random weights, all over the engine's KV state
    for where, pdl, weights in (("the engine's layers, PDL", True, None), ("the engine's layers, no PDL", False, None),
                                ("random layers, PDL", True, random_layers)):  # fmt: skip
        with triton_ops.pdl_settings(pdl, triton_ops.trigger_first_for(args.batch)):
            base = replay_ms(engine_layers(None, with_attention=False, weights=weights))
            totals = {label: replay_ms(engine_layers(tiles, weights=weights)) for label, tiles in tile_choices}
        cells = [cell(label, ms - base) for label, ms in totals.items()]
        print(f"inside {where} (the layers without it, {base:.3f} ms, taken off): " + "; ".join(cells), flush=True)
    with triton_ops.pdl_settings(True, triton_ops.trigger_first_for(args.batch)):
        same = torch.equal(engine_layers(None)(), fused_stack())
        print(f"the engine's FusedStack itself: {replay_ms(fused_stack):.3f} ms, the same output as the layers above: "
              f"{same}", flush=True)  # fmt: skip
    release(core, admissions)


if __name__ == "__main__":
    main()
