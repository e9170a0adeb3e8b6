"""The whole-token decode attention (kernels/triton_token_attention.py, perf-notes #119, an
experiment switch) against its PyTorch definition (torch_ops.qk_norm_rope_attention), where the
Triton kernel tests run (kernel_checks.py): its splits, block sizes and pipelining, contexts of one
token, partial and whole last pages and splits left empty; and which calls the switch routes."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import INTERPRET, NEEDS_TRITON, decode_rows, tol

pytestmark = NEEDS_TRITON

# fp32 under the interpreter; on a GPU the kernel's dots round fp32 to TF32, so bf16 (what it serves)
DTYPES = [torch.float32] if INTERPRET else [torch.bfloat16]
# (query heads, kv heads, head dim, page size, contexts): blocks of at least 16 key rows (a dot's K)
SHAPES = [(4, 2, 32, 8, [1, 8, 9, 17, 40]), (16, 8, 128, 16, [1, 16, 17, 70, 130, 200])]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=["small", "talker"])
@pytest.mark.parametrize("splits,block,stages", [(1, 8, 0), (4, 8, 2), (8, 16, 2)])
def test_matches_definition(dtype, shape, splits, block, stages):
    from cadence.kernels import torch_ops
    from cadence.kernels.triton_token_attention import TokenTiles, token_attention

    qkv, args, caches, rest = decode_rows(shape, dtype, seed=6)
    tiles = TokenTiles(splits=splits, block_tokens=min(block, shape[3]), warps=4, stages=stages)
    mine = [c.clone() for c in caches]
    got = token_attention(qkv, *args, *mine, *rest, tiles)
    want = torch_ops.qk_norm_rope_attention(qkv, *args, *caches, *rest)
    assert not got.isnan().any()
    assert (got.float() - want.float()).abs().max() <= 4 * tol(dtype)
    for x, y in zip(mine, caches, strict=True):
        assert not x.isnan().any()  # every new token's key and value written
        assert (x.float() - y.float()).abs().max() <= 4 * tol(dtype)


def test_switch_and_routing():
    """SPLITS:BT:WARPS:STAGES, checked; only 33-64 rows of bf16/fp16 over long contexts are taken."""
    from cadence.kernels.triton_token_attention import TokenTiles, parse_tiles, token_tiles

    assert parse_tiles("") is None and parse_tiles("8:8:4:2") == TokenTiles(8, 8, 4, 2)
    for bad in ("8:8:4", "x", "0:8:4:2", "8:8:3:2"):
        with pytest.raises(ValueError, match="WHOLE_TOKENS"):
            parse_tiles(bad)
    tiles, bf16 = TokenTiles(), torch.bfloat16
    assert token_tiles(64, 16, 8, 16, bf16, 500, tiles) == tiles
    assert token_tiles(64, 16, 8, 16, bf16, None, tiles) == tiles
    assert token_tiles(64, 16, 8, 16, bf16, 17, tiles) is None  # the code predictor's short contexts
    assert token_tiles(65, 16, 8, 16, bf16, 500, tiles) is None and token_tiles(32, 16, 8, 16, bf16, 500, tiles) is None
    assert token_tiles(64, 16, 8, 16, torch.float32, 500, tiles) is None
    assert token_tiles(64, 16, 8, 12, bf16, 500, tiles) is None  # a block would cross a page
    assert token_tiles(64, 16, 6, 16, bf16, 500, tiles) is None  # 48 rows a block
    assert token_tiles(64, 16, 1, 16, bf16, 500, tiles) is None  # 8 rows a block: under a dot's 16
    assert token_tiles(64, 16, 8, 16, bf16, 500, None) is None  # the switch off
