"""The deployment file: what it sets, how flags override it, and how a bad file is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serving import REPO, Server, pcm_samples

from cadence.cli import build_parser
from cadence.deploy.config import DeployFile, apply_deploy_file, load_deploy_file
from cadence.deploy.placement import PlacementError, resolve_placements
from cadence.deploy.yaml_schema import SchemaError, parse
from cadence.engine.config import ChunkPolicy


def refusal(text: str) -> str:
    with pytest.raises(SchemaError) as e:
        parse(text, DeployFile, "deploy.yaml")
    return str(e.value)


def test_every_example_file_is_valid():
    files = sorted((REPO / "configs").glob("*.yaml"))
    assert files
    for path in files:
        load_deploy_file(path)


def test_an_empty_file_is_every_default():
    assert parse("", DeployFile) == DeployFile()
    assert parse("# nothing\n", DeployFile) == DeployFile()


def test_sections_fill_the_engine_settings():
    text = """
model: /models/tts
engine:
  max_streams: 8
  kv_cache_memory: 2          # an integer where a number is expected
  graph_buckets: [1, 4, 8]
  chunk_policy: {first_chunk_frames: 2, max_chunk_frames: 4}
voice_map: {alloy: ryan}
"""
    flat = parse(text, DeployFile).flat()
    assert flat["model"] == "/models/tts" and flat["max_streams"] == 8 and flat["kv_cache_memory"] == 2.0
    assert flat["graph_buckets"] == [1, 4, 8]
    assert flat["chunk_policy"] == ChunkPolicy(first_chunk_frames=2, growth=2.0, max_chunk_frames=4)
    assert flat["voice_map"] == "alloy=ryan"  # --voice-map's syntax
    assert flat["max_queue"] == DeployFile().engine.max_queue


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: x\nengine:\n  max_stream: 8\n", "deploy.yaml:3: engine: unknown key 'max_stream'; allowed: max_str"),
        (
            "engine:\n  max_streams: many\n",
            "deploy.yaml:2: engine.max_streams: expected an integer or null, got 'many'",
        ),
        ("dtype: fp16\n", "deploy.yaml:1: dtype: 'fp16' is not allowed; allowed: auto, bf16, fp32"),
        (
            "engine:\n  attention_backend: flash\n",
            "deploy.yaml:2: engine.attention_backend: 'flash' is not allowed; allowed: auto, sdpa, triton, torch",
        ),
        ("engine:\n  max_queue: -1\n", "deploy.yaml:2: engine.max_queue: must be >= 0, got -1"),
        (
            "engine:\n  pdl_max_rows: 8\n",
            "deploy.yaml:2: engine.pdl_max_rows: this key is now engine.kernels.pdl_max_rows",
        ),
        (
            "engine:\n  codec_dtype: fp16\n",
            "deploy.yaml:2: engine.codec_dtype: 'fp16' is not allowed; allowed: float32, bfloat16, float16",
        ),
        ("placement:\n  device: gpu0\n", "deploy.yaml:2: placement.device: 'gpu0' is not a device; allowed: auto, cpu"),
        ("dummy_weights: 1\n", "deploy.yaml:1: dummy_weights: expected true or false, got '1'"),
        ("engine:\n  graph_buckets: [8, 4]\n", "deploy.yaml:2: engine.graph_buckets: graph buckets must be increasing"),
        (
            "engine:\n  chunk_policy:\n    first_chunk_frames: 9\n",
            "deploy.yaml:3: engine.chunk_policy: chunk policy needs 1 <= first_chunk_frames <= max_chunk_frames",
        ),
        (
            "engine:\n  runaway: {loop_window: -1}\n",
            "deploy.yaml:2: engine.runaway: runaway guard loop_window must be >= 0 (0: that check off), got -1",
        ),
        ("engine:\n  runaway: {enabled: 0}\n", "deploy.yaml:2: engine.runaway.enabled: expected true or false"),
        (
            "engine:\n  codec_decode: windowed\n",
            "deploy.yaml:2: engine.codec_decode: 'windowed' is not allowed; allowed: exact, chunked",
        ),
        ("server:\n  port: [80]\n", "deploy.yaml:2: server.port: expected an integer, got a list"),
        ("model: a\nmodel: b\n", "deploy.yaml:2: (top level): duplicate key 'model' (first at line 1)"),
        ("engine: 4\n", "deploy.yaml:1: engine: expected a mapping (keys: max_streams, max_queue,"),
        ("model: [a\n", "deploy.yaml:2: invalid YAML"),
        ("placement:\n  replicas: 0\n", "deploy.yaml:2: placement.replicas: must be >= 1, got 0"),
        ("placement:\n  replicas: [cuda:0, gpu1]\n", "deploy.yaml:2: placement.replicas: 'gpu1' is not a device"),
        ("placement:\n  replicas: two\n", "deploy.yaml:2: placement.replicas: expected an integer or a list, got"),
    ],
)
def test_a_bad_file_is_refused_with_its_line_and_the_allowed_values(text, message):
    assert refusal(text).startswith(message)


def test_flags_given_on_the_command_line_override_the_file(tmp_path: Path):
    path = tmp_path / "deploy.yaml"
    path.write_text("model: /m\nengine:\n  max_streams: 3\n  max_queue: 7\n  enforce_eager: true\nserver:\n  port: 9\n")
    args = build_parser().parse_args(["serve", "--config", str(path), "--max-queue", "5", "--no-enforce-eager"])
    apply_deploy_file(args)
    assert (args.model, args.max_streams, args.port) == ("/m", 3, 9)  # from the file
    assert (args.max_queue, args.enforce_eager) == (5, False)  # from the command line
    assert args.host == "127.0.0.1" and args.dtype == "auto"  # neither: the defaults
    args = build_parser().parse_args(["serve", "/other", "--max-streams", "64", "--config", str(path)])
    apply_deploy_file(args)
    assert (args.model, args.max_streams) == ("/other", 64)  # a flag equal to the default still wins


def test_codec_precision_reaches_the_engine_config(tiny_checkpoint: Path, tmp_path: Path, monkeypatch):
    from typing import get_args, get_type_hints

    import cadence.server.cli
    import cadence.server.state
    from cadence.deploy.config import EngineSection
    from cadence.engine.config import CODEC_DTYPES
    from cadence.server.cli import build_state

    assert get_args(get_type_hints(EngineSection)["codec_dtype"]) == CODEC_DTYPES  # one list of names
    # the replicas' configs as build_state hands them over, without opening the engines' sockets
    monkeypatch.setattr(cadence.server.state, "ServerState", lambda settings, frontend, voices, replicas: replicas)
    monkeypatch.setattr(cadence.server.cli, "attach_cloning", lambda state, args, checkpoint: None)
    path = tmp_path / "deploy.yaml"
    path.write_text("engine:\n  codec_dtype: bfloat16\n  codec_tf32: false\n")
    args = build_parser().parse_args(["serve", str(tiny_checkpoint), "--config", str(path), "--device", "cpu"])
    apply_deploy_file(args)
    assert [(r.engine.codec_dtype, r.engine.codec_tf32) for r in build_state(args)] == [("bfloat16", False)]
    args = build_parser().parse_args(
        ["serve", str(tiny_checkpoint), "--config", str(path), "--codec-dtype", "float16", "--codec-tf32"]
    )
    apply_deploy_file(args)
    assert (args.codec_dtype, args.codec_tf32) == ("float16", True)  # the flags win
    assert DeployFile().flat()["codec_dtype"] == "float32"
    assert DeployFile().flat()["codec_tf32"] is None  # PyTorch's own default decides


def test_runaway_guard_and_codec_decode_reach_the_engine_config(tiny_checkpoint: Path, tmp_path: Path, monkeypatch):
    from typing import get_args, get_type_hints

    import cadence.server.cli
    import cadence.server.state
    from cadence.deploy.config import EngineSection
    from cadence.engine.config import CODEC_DECODES, RunawayGuard
    from cadence.server.cli import build_state

    assert get_args(get_type_hints(EngineSection)["codec_decode"]) == CODEC_DECODES
    monkeypatch.setattr(cadence.server.state, "ServerState", lambda settings, frontend, voices, replicas: replicas)
    monkeypatch.setattr(cadence.server.cli, "attach_cloning", lambda state, args, checkpoint: None)
    path = tmp_path / "deploy.yaml"
    path.write_text("engine:\n  codec_decode: chunked\n  runaway: {min_frames: 10, silence_seconds: 0}\n")

    def engine(*flags: str):
        args = build_parser().parse_args(["serve", str(tiny_checkpoint), "--config", str(path), *flags])
        apply_deploy_file(args)
        (replica,) = build_state(args)
        return replica.engine

    configured = engine()
    assert configured.codec_decode == "chunked"
    assert configured.runaway == RunawayGuard(min_frames=10, silence_seconds=0.0)
    off = engine("--no-runaway-guard", "--codec-decode", "exact")  # the flags win, the file's settings stay
    assert off.runaway == RunawayGuard(enabled=False, min_frames=10, silence_seconds=0.0)
    assert off.codec_decode == "exact"
    assert DeployFile().flat()["runaway"] == RunawayGuard() and RunawayGuard().enabled


def test_every_engine_option_reaches_the_engine_config(tmp_path: Path):
    """engine_config_from_args takes each EngineConfig field from the option of its name; the deployment
    file's sections and the flags that adjust them (--chunk-deadline, --no-runaway-guard) included."""
    from cadence.cli_options import engine_config_from_args
    from cadence.engine.config import EngineConfig, RunawayGuard
    from cadence.kernels.config import KernelConfig

    path = tmp_path / "deploy.yaml"
    path.write_text("engine:\n  page_size: 32\n  chunk_policy: {max_chunk_frames: 4}\n  runaway: {min_frames: 9}\n")
    flags = ["--max-streams", "3", "--max-queue", "0", "--kv-cache-memory", "0.5", "--kv-cache-fraction", "0.25"]
    flags += ["--prefill-token-budget", "64", "--max-input-tokens", "100", "--max-seq-tokens", "900"]
    flags += ["--no-step-on-idle"]
    flags += ["--attention-backend", "torch", "--enforce-eager", "--graph-buckets", "1,2", "--chunk-deadline", "0.5"]
    flags += ["--pipeline-codec", "--codec-dtype", "float16", "--no-codec-tf32", "--codec-decode", "chunked"]
    flags += ["--no-runaway-guard", "--pdl-max-rows", "8", "--slab-max-rows", "1", "--kernel-profile", "h100"]
    args = build_parser().parse_args(["serve", "--config", str(path), *flags])
    apply_deploy_file(args)
    assert engine_config_from_args(args) == EngineConfig(
        max_streams=3, max_queue=0, kv_cache_memory=0.5, kv_cache_fraction=0.25, page_size=32,
        prefill_token_budget=64, step_on_idle=False, max_input_tokens=100, max_seq_tokens=900,
        attention_backend="torch",
        enforce_eager=True, graph_buckets=(1, 2), chunk_policy=ChunkPolicy(max_chunk_frames=4, deadline=0.5),
        pipeline_codec=True, codec_dtype="float16", codec_tf32=False, codec_decode="chunked",
        runaway=RunawayGuard(enabled=False, min_frames=9),
        kernels=KernelConfig(profile="h100", pdl_max_rows=8, slab_max_rows=1),
    )  # fmt: skip
    args = build_parser().parse_args(["serve", "--graph-buckets", ""])
    apply_deploy_file(args)
    assert engine_config_from_args(args) == EngineConfig()  # no file, no flags: the engine's defaults
    synth = build_parser([]).parse_args(["synth", "Hi.", "--kv-cache-memory", "2", "--no-runaway-guard"])
    assert engine_config_from_args(synth, max_streams=1, max_queue=1) == EngineConfig(
        max_streams=1, max_queue=1, kv_cache_memory=2.0, runaway=RunawayGuard(enabled=False)
    )


def test_device_on_the_command_line_places_every_replica_of_the_file(tmp_path: Path):
    path = tmp_path / "deploy.yaml"
    path.write_text("placement:\n  replicas: [cuda:0, cuda:1, cuda:1]\n")
    args = build_parser().parse_args(["serve", "--config", str(path), "--device", "cpu"])
    apply_deploy_file(args)
    assert [p.device for p in resolve_placements(args.replicas, args.device, cuda_count=0)] == ["cpu"] * 3
    args = build_parser().parse_args(["serve", "--config", str(path)])
    apply_deploy_file(args)
    assert [p.device for p in resolve_placements(args.replicas, args.device, cuda_count=2)] == [
        "cuda:0",
        "cuda:1",
        "cuda:1",
    ]


def test_placements_spread_replicas_over_the_gpus():
    def devices(replicas, device, gpus):
        return [p.device for p in resolve_placements(replicas, device, cuda_count=gpus)]

    assert devices(1, "auto", 0) == ["cpu"]
    assert devices(2, "cuda", 2) == ["cuda:0", "cuda:1"]
    assert devices(3, "auto", 2) == ["cuda:0", "cuda:1", "cuda:0"]
    assert devices(2, "cuda:1", 2) == ["cuda:1", "cuda:1"]
    assert devices(["cuda:1", "cpu"], "auto", 2) == ["cuda:1", "cpu"]
    with pytest.raises(PlacementError, match="replica 1 is placed on cuda:2, but only 2 CUDA devices are visible"):
        devices(["cuda:0", "cuda:2"], "auto", 2)
    with pytest.raises(PlacementError, match="replica 0 is placed on cuda, but no CUDA device is visible"):
        devices(1, "cuda", 0)


def test_serve_refuses_a_placement_this_machine_cannot_honour(tiny_checkpoint: Path, tmp_path: Path):
    s = Server(tiny_checkpoint, tmp_path, "--replicas", "2", "--device", "cuda:3")
    assert s.proc.wait(120) == 2
    assert "error: replica 0 is placed on cuda:3, but" in s.log()


def test_serve_refuses_a_bad_file_before_loading_anything(tmp_path: Path):
    path = tmp_path / "deploy.yaml"
    path.write_text("engine:\n  max_streams: 4\n  chunk_policy: {growth: 0.5}\n")
    s = Server(None, tmp_path, "--config", str(path))
    assert s.proc.wait(120) == 2
    assert f"error: {path}:3: engine.chunk_policy: chunk policy growth must be >= 1" in s.log()


def test_serve_runs_from_a_file(tiny_checkpoint: Path, tmp_path: Path):
    path = tmp_path / "deploy.yaml"
    path.write_text(
        f"model: {tiny_checkpoint}\nserved_model_name: narrator\nplacement: {{device: cpu}}\n"
        "engine:\n  max_streams: 3\n  max_queue: 9\n  chunk_policy: {first_chunk_frames: 2, max_chunk_frames: 2}\n"
        "  runaway: {min_frames: 3, frames_per_token: 0.5}\n  kernels: {profile: h100}\n"
    )
    s = Server(None, tmp_path, "--config", str(path), "--max-queue", "5").wait_ready()
    try:
        assert "capacity: 3 streams generating + 5 queued" in s.log()
        assert "kernels: tile table h100 (kernel profile h100)" in s.log()  # the engine process installed it
        body = {"model": "narrator", "input": "Hi.", "voice": "ryan", "response_format": "pcm", "max_new_tokens": 6}
        with s.client() as c:
            r = c.post("/v1/audio/speech", json={**body, "ignore_eos": True})
            assert r.status_code == 200 and pcm_samples(r.content).size == 6 * 1920
            # the file's guard: "Hi." is 2 tokens, a budget of 3 + 0.5 * 2 = 4 frames (greedy: no early EOS here)
            whole = c.post("/v1/audio/speech", json={**body, "temperature": 0, "stream": False})
            assert whole.status_code == 200, whole.text
            assert (whole.headers["x-finish-reason"], whole.headers["x-runaway-cause"]) == ("runaway", "frame_budget")
            assert whole.headers["x-usage-output-tokens"] == "4" and pcm_samples(whole.content).size == 4 * 1920
            sse = c.post("/v1/audio/speech", json={**body, "temperature": 0, "stream_format": "sse"})
            done = [json.loads(line[6:]) for line in sse.text.splitlines() if line.startswith("data: ")][-1]
            assert done["type"] == "speech.audio.done" and done["runaway_cause"] == "frame_budget"
            assert done["finish_reason"] == "runaway"
        assert '"runaway_cause": "frame_budget"' in s.log()  # the access log says it too
    finally:
        assert s.stop() == 0
