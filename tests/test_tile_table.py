"""The tile tables: the families' files load, ship in the package, and a file that does not fit
TileTable is refused naming the file and the key."""

from __future__ import annotations

import dataclasses
import fnmatch
import tomllib
from pathlib import Path

import pytest
from conftest import REPO

from cadence.kernels.tile_table import (
    FALLBACK,
    FAMILIES,
    PROFILES,
    GemmRule,
    GemmTiles,
    TileTableError,
    current_table,
    install_table,
    load_profile,
    load_table,
    profile_path,
    using_table,
)


def test_every_family_has_a_table_and_the_fallback_is_one():
    assert FALLBACK in FAMILIES
    tables = {family: load_profile(family) for family in FAMILIES}
    assert sorted(p.stem for p in PROFILES.glob("*.toml")) == sorted(FAMILIES)
    # H100 SXM and H200 have the same 132 SMs, and the values are measured on one and checked on the other;
    # the H100's table adds two rules of the 1.7B's decode shapes (its down split over K, its o on cuBLAS).
    h100, h200 = tables["h100"], tables["h200"]
    assert dataclasses.replace(h100, streaming_gemm=h200.streaming_gemm) == h200
    own = [rule for rule in h100.streaming_gemm.rules if rule not in h200.streaming_gemm.rules]
    assert [(r.rows, r.n_min, r.n_max, r.k_min, r.k_max) for r in own] == [
        ((1, 16), 2048, 2048, 6144, None),
        ((1, 16), 2048, 2048, 2048, 2048),
    ]
    assert [rule for rule in h100.streaming_gemm.rules if rule not in own] == list(h200.streaming_gemm.rules)


def test_the_tables_ship_in_the_package():
    """pyproject.toml's package data names every table file (a wheel or editable install has them)."""
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = REPO / "cadence" / "kernels"
    for path in PROFILES.glob("*"):
        name = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(name, g) for g in patterns["cadence.kernels"]), f"{name} is not package data"


def test_a_table_is_read_as_typed_values():
    table = load_profile("h200")
    rules = table.streaming_gemm.rules
    assert rules[0].rows == (1, 16) and (rules[0].n_max, rules[0].k_min, rules[0].n_min) == (1024, 2048, None)
    assert rules[0].tiles == GemmTiles(block_n=32, block_k=256, warps=4, stages=3, split_k=4, block_m=16)
    assert [r.tiles for r in rules if r.rows == (17, 32)][-1] is None  # "cublas"
    assert table.streaming_gemm.tiles(6144, 1024, 129) is None  # no rule: cuBLAS
    assert table.slab_gemm.ctas == 128 and table.paged_attention.pipelined_from_rows == 8


def edited(tmp_path: Path, old: str, new: str) -> Path:
    """The h200 table with its first `old` replaced by `new`, as a file."""
    text = profile_path("h200").read_text()
    assert old in text
    path = tmp_path / "edited.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("[slab_gemm]\nctas = 128", "[slab_gemm]\nctas = 128\nthreads = 256", "slab_gemm: unknown key 'threads'"),
        ("[pdl]", "[pdl]\nwarps = 4", "pdl: unknown key 'warps'; allowed: trigger_first_above_rows"),
        ("[sampler]", "[samplers]\n[sampler]", "(top level): unknown key 'samplers'; allowed: streaming_gemm,"),
        ("ctas = 128", 'ctas = "128"', "slab_gemm.ctas: expected an integer, got '128'"),
        ("ctas = 128", "ctas = true", "slab_gemm.ctas: expected an integer, got True"),
        ("rows = [1, 16]", "rows = [1]", "streaming_gemm.rules[0].rows: expected an array of 2, got [1]"),
        ("block_n = 32,", "block_n = 3.5,", "streaming_gemm.rules[0].tiles.block_n: expected an integer, got 3.5"),
        ("block_n = 32,", "block_n = 48,", "streaming_gemm.rules[0].tiles: block_n must be a power of two, got 48"),
        ("block_n = 32,", "block_x = 32,", "streaming_gemm.rules[0].tiles: unknown key 'block_x'"),
        (
            'tiles = "cublas"',
            'tiles = "cuBLAS"',
            "streaming_gemm.rules[5].tiles: expected a table of tiles or 'cublas'",
        ),
        ("split_k = 4, block_m = 16", "split_k = 4, block_m = 8", "streaming_gemm.rules[0]: tiles.block_m 8 holds"),
        ("min_rows = 33", "min_rows = 65", "slab_swiglu_gemm: needs 1 <= min_rows <= max_rows, got 65, 64"),
        ("trigger_first_above_rows = 32", "", "pdl.trigger_first_above_rows: missing"),
        ("cuda_threads = 256", "cuda_threads = -256", "sampler.cuda_threads: must be >= 0, got -256"),
        ("[pdl]", "[pdl", "invalid TOML"),
    ],
)
def test_a_table_that_does_not_fit_is_refused_naming_the_file_and_key(tmp_path: Path, old, new, message):
    path = edited(tmp_path, old, new)
    with pytest.raises(TileTableError) as e:
        load_table(path)
    assert str(e.value).startswith(f"{path}: "), str(e.value)
    assert message in str(e.value), str(e.value)


def test_a_missing_file_is_refused_naming_it(tmp_path: Path):
    with pytest.raises(TileTableError, match="missing.toml: cannot read the tile table"):
        load_table(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="no tile table for the GPU family 'a100'; families: h100, h200"):
        load_profile("a100")


def test_using_table_sets_the_current_table_for_a_block(tmp_path: Path):
    other = load_table(edited(tmp_path, "ctas = 128", "ctas = 64"))
    before = current_table()
    with using_table(other):
        assert current_table().slab_gemm.ctas == 64
    assert current_table() is before
    previous = install_table(other)
    try:
        assert previous is before and current_table() is other
    finally:
        install_table(previous)


def replaced(table, section: str, **values):
    """`table` with fields of one section replaced."""
    return dataclasses.replace(table, **{section: dataclasses.replace(getattr(table, section), **values)})


def test_another_table_changes_the_cuda_kernels_plans():
    """The CUDA kernels' plans and routes read the installed table, not constants of their own."""
    import torch

    from cadence.kernels.attention import cuda_decode_attention as ca
    from cadence.kernels.launch.pdl import trigger_first_for
    from cadence.kernels.linear import cuda_slab_gemm
    from cadence.kernels.sampling import cuda_sampler

    default = load_profile(FALLBACK)
    with using_table(default):
        assert cuda_slab_gemm.slab_plan(4096, 1024, 1).rows_per_cta == 32  # 128 CTAs
        assert ca.attention_plan(64, 16, 8, 128, 16, torch.bfloat16).heads_per_cta == 4
        assert ca.attention_plan(32, 16, 8, 128, 16, torch.bfloat16) is None  # below min_rows
        assert (trigger_first_for(32), trigger_first_for(33), cuda_sampler.threads_for(3072)) == (False, True, 512)
    with using_table(replaced(default, "slab_gemm", ctas=256)):
        assert cuda_slab_gemm.slab_plan(4096, 1024, 1).rows_per_cta == 16
    with using_table(replaced(default, "decode_attention", ctas=256, stages=2, min_rows=32)):
        plan = ca.attention_plan(64, 16, 8, 128, 16, torch.bfloat16)
        assert (plan.heads_per_cta, plan.stages) == (2, 2)
        assert ca.attention_plan(32, 16, 8, 128, 16, torch.bfloat16) is not None
    with using_table(replaced(default, "pdl", trigger_first_above_rows=0)):
        assert trigger_first_for(1)
    with using_table(replaced(default, "sampler", cuda_wide_above_vocab=4096)):
        assert cuda_sampler.threads_for(3072) == 256


def test_another_table_changes_the_triton_kernels_tiles():
    pytest.importorskip("triton")
    from cadence.kernels.attention.triton_paged_attention import attention_splits, attention_tiles
    from cadence.kernels.linear.triton_streaming_gemm import gemm_tiles, swiglu_gemm_tiles

    default = load_profile(FALLBACK)
    with using_table(default):
        assert attention_tiles(8).stages == 2 and attention_splits(1, 8) == 16
        assert gemm_tiles(4096, 1024, 16).block_n == 32 and gemm_tiles(4096, 1024, 200) is None
        assert swiglu_gemm_tiles(6144, 1024, 16) is not None
    with using_table(replaced(default, "paged_attention", pipelined_from_rows=16, max_splits=4)):
        assert attention_tiles(8).stages == 0 and attention_splits(1, 8) == 4
    wide = GemmTiles(block_n=64, block_k=128, warps=8, stages=2, split_k=1, block_m=256)
    rules = (GemmRule(rows=(129, 256), tiles=wide, n_min=4096), *default.streaming_gemm.rules)
    with using_table(replaced(default, "streaming_gemm", rules=rules, swiglu_max_rows=8)):
        assert gemm_tiles(4096, 1024, 200) == wide and gemm_tiles(2048, 1024, 200) is None
        assert swiglu_gemm_tiles(6144, 1024, 16) is None
