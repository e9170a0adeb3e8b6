"""cadence on Ray Serve (cadence/deploy/ray_serve.py): a local single-node Ray cluster on the CPU.

One deployment (tiny random checkpoint, one replica) serves the whole module through Ray's HTTP
proxy: the openai SDK, SSE through httpx, a WebSocket session, an OpenAI-style 400, and the
autoscaling config the controller runs. The cluster is shut down at the end, whatever failed.
Skipped where Ray is not installed (pip install 'cadence[ray]'; scripts/test.sh installs it).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from openai import OpenAI  # noqa: E402
from serving import FRAME, SAMPLE_RATE, decode_audio, free_port, pcm_samples  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from cadence.deploy import ray_serve  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-tts"
FRAMES = 5
FIXED = {"max_new_tokens": FRAMES, "ignore_eos": True}
AUTOSCALING = {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 3}
# The tests send one request at a time: never more than `target_ongoing_requests`, so Ray keeps
# one replica and nothing here depends on when it would scale.
OPTIONS = {"device": "cpu", "served_model_name": MODEL, "max_streams": 2, "max_queue": 4, "cpu_threads": 1}


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    # ray.init leaves a SIGTERM handler, an excepthook and environment variables in this process,
    # which runs the rest of the suite after this module: they are put back at the end.
    saved = (dict(os.environ), signal.getsignal(signal.SIGTERM), sys.excepthook)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no reporting attempt from a machine without network
    try:
        # 2 CPUs: the replica reserves one; the controller and the proxy reserve none.
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 << 20)
        yield ray
    finally:
        try:
            if ray.is_initialized():  # else serve.shutdown() would start a cluster to find Serve in
                serve.shutdown()
        finally:
            ray.shutdown()
            os.environ.clear()
            os.environ.update(saved[0])
            signal.signal(signal.SIGTERM, saved[1])
            sys.excepthook = saved[2]


@pytest.fixture(scope="module")
def deployed(ray_cluster, tiny_checkpoint) -> str:
    """The base URL of Ray's HTTP proxy, once the replica is warm (serve.run waits for it)."""
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(ray_serve.build_app({"model": str(tiny_checkpoint), **OPTIONS, **AUTOSCALING}), name="cadence")
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def client(deployed) -> OpenAI:
    return OpenAI(base_url=deployed + "/v1", api_key="not-needed", max_retries=0, timeout=120)


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/audio/speech", json=body, timeout=120, trust_env=False)


# -- through Ray's HTTP proxy ----------------------------------------------------------------------


def test_status_routes(deployed):
    with httpx.Client(base_url=deployed, timeout=60, trust_env=False) as c:
        assert c.get("/ready").json() == {"status": "ready", "model": MODEL}
        assert c.get("/version").json()["device"] == "cpu"
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == [MODEL]


def test_openai_sdk_pcm_and_wav(client):
    pcm = client.audio.speech.create(
        model=MODEL, voice="ryan", input="Hello from Ray.", response_format="pcm", extra_body=FIXED
    )
    assert pcm_samples(pcm.content).size == FRAMES * FRAME
    wav = client.audio.speech.create(
        model="tts-1", voice="alloy", input="Hello from Ray.", response_format="wav", extra_body=FIXED
    )
    rate, samples = decode_audio(wav.content)
    assert rate == SAMPLE_RATE and samples.size == FRAMES * FRAME


def test_openai_sdk_streams(client):
    with client.audio.speech.with_streaming_response.create(
        model=MODEL, voice="ryan", input="Streaming through the proxy.", response_format="pcm", extra_body=FIXED
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        # Ray's proxy adds its own X-Request-ID beside cadence's (docs/deploy.md).
        assert any(v.strip().startswith("speech-") for v in response.headers["x-request-id"].split(","))
        data = b"".join(response.iter_bytes())
    assert pcm_samples(data).size == FRAMES * FRAME


def test_sse_events(deployed):
    body = {"model": MODEL, "input": "Events, please.", "voice": "ryan", "response_format": "pcm", **FIXED}
    body["stream_format"] = "sse"
    events = []
    with httpx.stream("POST", deployed + "/v1/audio/speech", json=body, timeout=120, trust_env=False) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    *deltas, done = events
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas)
    assert pcm_samples(b"".join(base64.b64decode(e["audio"]) for e in deltas)).size == FRAMES * FRAME
    assert done["type"] == "speech.audio.done" and done["finish_reason"] == "length"
    assert done["usage"]["output_tokens"] == FRAMES


def test_websocket_session(deployed):
    config = {"type": "session.config", "voice": "ryan", **FIXED}
    with connect(deployed.replace("http://", "ws://") + "/v1/audio/speech/stream", open_timeout=60) as ws:
        ws.send(json.dumps(config))
        assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
        ws.send(json.dumps({"type": "input.text", "text": "One sentence."}))
        ws.send(json.dumps({"type": "session.close"}))
        audio, last = b"", {}
        while last.get("type") != "session.done":
            msg = ws.recv(timeout=120)
            if isinstance(msg, bytes):
                audio += msg
            else:
                last = json.loads(msg)
    assert len(audio) == 2 * FRAMES * FRAME


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"voice": "nobody"}, "voice"), ({"input": ""}, "input"), ({"response_format": "ogg"}, "response_format")],
)
def test_invalid_request_is_an_openai_400(deployed, fields, param):
    r = post(deployed, {"model": MODEL, "input": "Hi.", "voice": "ryan", **FIXED, **fields})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_autoscaling_config_is_what_the_deployment_declares(deployed):
    from ray.serve.context import _get_global_client  # Serve's own view; serve.status() has no config

    status = serve.status().applications["cadence"]
    assert status.status == "RUNNING"
    assert status.deployments[ray_serve.DEPLOYMENT_NAME].replica_states == {"RUNNING": 1}
    details = _get_global_client().get_serve_details()
    config = details["applications"]["cadence"]["deployments"][ray_serve.DEPLOYMENT_NAME]["deployment_config"]
    assert {k: config["autoscaling_config"][k] for k in AUTOSCALING} == AUTOSCALING
    assert config["max_ongoing_requests"] == OPTIONS["max_streams"] + OPTIONS["max_queue"]  # one engine's room
    assert config["ray_actor_options"]["num_gpus"] == 0 and config["ray_actor_options"]["num_cpus"] == 1
    assert config["graceful_shutdown_timeout_s"] == 30  # cadence's --drain-timeout


# -- options and the command line (no cluster) -----------------------------------------------------


def test_builder_args_take_serve_options_and_defaults():
    args = ray_serve.parse_builder_args(
        {"model": "m", "max_streams": 8, "enforce_eager": True, "graph_buckets": [1, 2], "voice_map": {"a": "ryan"}}
    )
    assert (args.model, args.max_streams, args.enforce_eager, args.graph_buckets) == ("m", 8, True, [1, 2])
    assert args.voice_map == "a=ryan" and args.min_replicas == 1 and args.max_replicas == 4
    config = ray_serve.build_app({"model": "m", "max_streams": 8})._bound_deployment._deployment_config
    assert config.autoscaling_config.target_ongoing_requests == 8  # default: scale once engines queue
    assert config.max_ongoing_requests == 8 + 256


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"max_replica": 2}, "--max-replica"),
        ({"max_streams": "many"}, "invalid int value"),
        ({"replicas": 2}, "set max_replicas"),
        ({"port": 9000}, "http_options"),
    ],
)
def test_builder_refuses_bad_args(args, message):
    with pytest.raises(ValueError, match=message):
        ray_serve.build_app({"model": "m", **args})


def test_command_line_help_and_missing_ray():
    def run(*code: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        return subprocess.run([sys.executable, *code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)

    done = run("-m", "cadence.deploy.ray_serve", "--help")
    assert done.returncode == 0 and "--target-ongoing-requests" in done.stdout and "--max-streams" in done.stdout
    # Without Ray (an import that fails), the entry point says what to install.
    no_ray = "import sys; sys.modules['ray'] = None; from cadence.deploy.ray_serve import main; sys.exit(main(['m']))"
    done = run("-c", no_ray)
    assert done.returncode == 2 and "pip install 'cadence[ray]'" in done.stderr, done.stderr
