"""KernelConfig (EngineConfig.kernels): which tile table a profile gives on which GPU, how the
options and the deployment file set it, that it crosses to the engine process, and that the engine
installs its table before it builds anything."""

from __future__ import annotations

import dataclasses
import logging
import pickle
from pathlib import Path

import pytest

from cadence.cli import build_parser
from cadence.cli_options import engine_config_from_args
from cadence.deploy.config import DeployFile, apply_deploy_file
from cadence.deploy.yaml_schema import SchemaError, parse
from cadence.engine.config import EngineConfig
from cadence.engine.process_config import EngineProcessConfig, ModelSource
from cadence.kernels.config import KernelConfig, choose_profile, family_of
from cadence.kernels.tile_table import FALLBACK, TileTableError, current_table, load_profile, profile_path, using_table


@pytest.mark.parametrize(
    ("gpu", "family"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200"),
        ("NVIDIA A100-SXM4-80GB", None),
    ],
)
def test_auto_picks_the_table_of_the_gpus_family(gpu, family):
    assert family_of(gpu) == family
    choice = choose_profile("auto", gpu)
    assert choice.table == (family or FALLBACK)
    assert choice.unmeasured == (family is None)
    assert gpu in choice.why and choice.table in choice.why
    if family is None:
        assert "the fallback" in choice.why and "benchmarks/gpu.sh tiles" in choice.why
    table, _ = KernelConfig().table_for(gpu)
    assert table == load_profile(family or FALLBACK)


def test_a_named_profile_holds_on_any_gpu_and_without_one():
    assert choose_profile("h100", "NVIDIA H200").table == "h100"
    assert choose_profile("auto", None).table == FALLBACK and not choose_profile("auto", None).unmeasured


def test_a_path_profile_loads_that_file(tmp_path: Path):
    path = tmp_path / "mine.toml"
    path.write_text(
        profile_path("h200").read_text().replace("trigger_first_above_rows = 32", "trigger_first_above_rows = 8")
    )
    table, choice = KernelConfig(profile=str(path)).table_for("NVIDIA H100 80GB HBM3")
    assert choice.table == str(path) and table.pdl.trigger_first_above_rows == 8
    KernelConfig(profile=str(path)).check_file()
    with pytest.raises(TileTableError, match="missing.toml: cannot read the tile table"):
        KernelConfig(profile=str(tmp_path / "missing.toml")).check_file()


def test_an_unknown_profile_is_refused_with_what_is_allowed():
    with pytest.raises(ValueError, match="unknown kernel profile 'a100'; allowed: auto, h100, h200, or the path of a"):
        KernelConfig(profile="a100")
    with pytest.raises(ValueError, match="pdl_max_rows must be >= 0"):
        KernelConfig(pdl_max_rows=-1)


def test_the_deploy_file_and_the_flags_set_the_kernel_config(tmp_path: Path):
    path = tmp_path / "deploy.yaml"
    path.write_text("engine:\n  kernels: {profile: h200, pdl_max_rows: 16}\n")
    args = build_parser().parse_args(["serve", "--config", str(path), "--slab-max-rows", "1"])
    apply_deploy_file(args)
    assert engine_config_from_args(args).kernels == KernelConfig(profile="h200", pdl_max_rows=16, slab_max_rows=1)
    args = build_parser().parse_args(["serve", "--config", str(path), "--kernel-profile", "/etc/tiles.toml"])
    apply_deploy_file(args)
    assert engine_config_from_args(args).kernels == KernelConfig(profile="/etc/tiles.toml", pdl_max_rows=16)
    assert DeployFile().flat()["kernels"] == KernelConfig()
    with pytest.raises(SchemaError, match="deploy.yaml:2: engine.kernels: unknown kernel profile 'a100'"):
        parse("engine:\n  kernels: {profile: a100}\n", DeployFile, "deploy.yaml")
    with pytest.raises(SchemaError, match="deploy.yaml:2: engine.pdl_max_rows: this key is now engine.kernels.pdl_"):
        parse("engine:\n  pdl_max_rows: 8\n", DeployFile, "deploy.yaml")


def test_serve_help_explains_the_kernel_profile(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--kernel-profile auto|h100|h200|PATH" in text and "cadence/kernels/profiles/*.toml" in text


def test_a_non_default_kernel_config_crosses_to_the_engine_process():
    """The engine process gets EngineProcessConfig by pickling (a spawn)."""
    from cadence.models.qwen3_tts.family import load_runtime

    engine = EngineConfig(kernels=KernelConfig(profile="/srv/tiles.toml", pdl_max_rows=0, slab_max_rows=1))
    process = EngineProcessConfig("m", ModelSource("qwen3_tts", "m"), load_runtime, engine)
    assert pickle.loads(pickle.dumps(process)).engine == engine
    assert dataclasses.replace(engine).kernels.profile == "/srv/tiles.toml"


def test_the_engine_installs_its_table_before_it_builds(tiny_model, tmp_path: Path, caplog):
    from cadence.engine.engine import build_core
    from cadence.kernels.launch.pdl import trigger_first_for

    path = tmp_path / "mine.toml"
    path.write_text(
        profile_path("h200").read_text().replace("trigger_first_above_rows = 32", "trigger_first_above_rows = 0")
    )
    config = EngineConfig(
        max_streams=2, kv_cache_memory=0.01, enforce_eager=True, kernels=KernelConfig(profile=str(path))
    )
    with using_table(current_table()), caplog.at_level(logging.INFO, logger="cadence.engine.engine"):
        build_core(tiny_model, config)
        assert current_table() == load_profile(str(path)) and trigger_first_for(1)
    assert f"kernels: tile table {path} (kernel profile {path})" in caplog.text
    assert not trigger_first_for(1)  # the table from before the block


def test_serve_refuses_a_bad_table_file_before_starting_an_engine(tiny_checkpoint: Path, tmp_path: Path):
    from serving import Server

    path = tmp_path / "tiles.toml"
    path.write_text(profile_path("h200").read_text().replace("[pdl]", "[pdl]\nwarps = 4"))
    s = Server(tiny_checkpoint, tmp_path, "--kernel-profile", str(path))
    assert s.proc.wait(120) == 2
    assert f"error: {path}: pdl: unknown key 'warps'; allowed: trigger_first_above_rows" in s.log()
