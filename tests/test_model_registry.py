"""A second model family is one package and one `register` line: the toy family (toy_tts.py) runs
through the unchanged engine, in this process and in a real engine process, a real `cadence serve`
serves it through its frontend alone, and the registry finds the families by name and by checkpoint."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import toy_tts
from toy_tts import TOY, ToyRequest, expected_frames, expected_pcm

from cadence.engine.client import EngineClient
from cadence.engine.config import EngineConfig
from cadence.engine.engine import Engine
from cadence.engine.process_config import EngineProcessConfig
from cadence.engine.request import FinishReason
from cadence.errors import InvalidRequestError
from cadence.models import registry


@pytest.fixture(scope="module")
def toy_family():
    registry.register(TOY)  # adding a model family: this line (in cadence/models/__init__.py for a real one)
    yield registry.family("toy")
    del registry.FAMILIES["toy"]


def config(**overrides) -> EngineConfig:
    return EngineConfig(**{"max_streams": 4, "kv_cache_memory": 0.001, "return_codes": True, **overrides})


def test_the_registry_knows_the_families(toy_family, tmp_path):
    assert list(registry.FAMILIES) == ["qwen3_tts", "toy"]  # the built-in family first: the default
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "toy"}))
    assert registry.family_for(str(tmp_path)) is toy_family
    assert registry.model_source(str(tmp_path)).family == "toy"
    assert registry.family_for("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice").name == "qwen3_tts"
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "something else"}))
    assert registry.family_for(str(tmp_path)).name == "qwen3_tts"  # whose loader says what is wrong
    with pytest.raises(ValueError, match="registered already"):
        registry.register(TOY)
    with pytest.raises(ValueError, match="unknown model family 'nope'"):
        registry.family("nope")
    assert registry.load_frontend(toy_family.locate("toy", None)).sample_rate == toy_tts.SAMPLE_RATE


def test_the_engine_synthesises_the_toy_model(toy_family):
    """Six requests of different lengths, some joining late, one cut by max_new_tokens, one by
    ignore_eos: every chunk's audio and codes are the toy's closed form, and each ends as it should."""
    engine = Engine(toy_family.load_runtime(toy_family.locate("toy", None)), config())
    try:
        requests = [
            ToyRequest("Hello", 3),
            ToyRequest("Ab", 9),
            ToyRequest("toy", 30, max_new_tokens=12),
            ToyRequest("Zz", 1),
            ToyRequest("long text here", 17),
            ToyRequest("Q", 5, max_new_tokens=7, ignore_eos=True),
        ]
        prepared = [engine.model.prepare(r, engine.config.max_input_tokens) for r in requests]
        utterances = [engine.synthesize_blocking(p, timeout=120) for p in prepared]
        for req, utt in zip(prepared, utterances, strict=True):
            frames = expected_frames(req)
            stopped = req.prompt.frames <= req.params.max_new_tokens and not req.ignore_eos
            assert utt.finish_reason == (FinishReason.STOP if stopped else FinishReason.LENGTH), req
            assert utt.frames == frames and utt.sample_rate == toy_tts.SAMPLE_RATE
            assert np.array_equal(utt.pcm, expected_pcm(req, frames))
            assert utt.codes.tolist() == [[k, req.prompt.tokens[0]] for k in range(frames)]
        with pytest.raises(InvalidRequestError):
            engine.submit(ToyRequest("", 3), lambda chunk: None)
    finally:
        engine.close()


def test_cancelling_a_toy_stream_frees_its_slot(toy_family):
    engine = Engine(toy_family.load_runtime(toy_family.locate("toy", None)), config(max_streams=2))
    try:

        async def scenario():
            long = engine.synthesize(ToyRequest("Endless", 10_000, max_new_tokens=10_000))
            first = await long.__anext__()
            assert first.pcm.size > 0 and not first.is_final
            await long.aclose()  # cancels it
            for _ in range(500):
                if not engine.core.streams and engine.core.talker.kv.used_pages == 0:
                    break
                await asyncio.sleep(0.01)
            assert engine.stats().finished.get("cancelled") == 1
            assert sorted(engine.core.free_slots) == [0, 1] and engine.core.talker.kv.used_pages == 0
            after = await engine.synthesize_all(ToyRequest("After", 4))
            assert after.finish_reason == FinishReason.STOP and after.frames == 4

        asyncio.run(scenario())
    finally:
        engine.close()


def test_an_engine_process_streams_the_toy_model(toy_family):
    """The real engine process (EngineClient's spawn), given the family's loader: it decodes the toy's
    requests from the wire with the toy's types and streams their audio back."""
    source = toy_family.locate("toy", None)
    process = EngineProcessConfig("toy", source, toy_family.load_runtime, config(return_codes=False))
    request = toy_family.load_frontend(source).prepare(ToyRequest("Streamed", 11), 4096)

    async def scenario():
        client = EngineClient(process)
        await client.start()
        try:
            info = await asyncio.wait_for(client.wait_ready(), 300)
            assert (info.model_size, info.sample_rate, info.max_streams) == ("toy", toy_tts.SAMPLE_RATE, 4)
            return [chunk async for chunk in client.synthesize(request)]
        finally:
            await client.shutdown()

    chunks = asyncio.run(scenario())
    assert chunks[-1].is_final and chunks[-1].finish_reason == FinishReason.STOP
    assert [c.frame_start for c in chunks] == sorted(c.frame_start for c in chunks)
    assert np.array_equal(np.concatenate([c.pcm for c in chunks]), expected_pcm(request, 11))


def test_the_toy_family_uses_nothing_of_qwen3_tts():
    """The toy builds on the engine's contract and the registry alone (and the engine on no model:
    test_layers.py)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(toy_tts.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "cadence.models.registry" in imported
    assert not [m for m in imported if m.startswith("cadence.models.qwen3_tts")]


def test_cadence_serve_serves_the_toy_model(tmp_path):
    """The unchanged server, given the toy family (toy_serve.py registers it): its voices and
    capabilities, its refusals, and its audio in the toy's closed form over HTTP and the WebSocket."""
    from serving import REPO, Server, pcm_samples
    from websockets.sync.client import connect

    model = tmp_path / "toy-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "toy"}))
    entry = REPO / "tests" / "toy_serve.py"
    server = Server(model, tmp_path, "--kv-cache-memory", "0.001", "--max-streams", "2", entry=entry).wait_ready()
    try:
        with server.client() as c:
            voices = c.get("/v1/audio/voices").json()
            assert [v["id"] for v in voices["voices"]] == [toy_tts.VOICE] and voices["languages"] == ["auto"]
            card = c.get("/v1/models").json()["data"][0]
            assert (card["tts_model_type"], card["voices"], card["voice_cloning"]) == ("toy", ["sine"], False)
            assert card["sample_rate"] == toy_tts.SAMPLE_RATE
            body = {"input": "Hello toy.", "voice": "sine", "response_format": "pcm", "stream": False}
            r = c.post("/v1/audio/speech", json=body)
            unknown = c.post("/v1/audio/speech", json={**body, "voice": "alloy"})
            cloned = c.post("/v1/audio/speech", json={**body, "ref_audio": "UklGRg=="})
        assert r.status_code == 200 and r.headers["X-Usage-Input-Tokens"] == "10", r.text
        assert np.array_equal(pcm_samples(r.content), spoken("Hello toy."))
        assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "voice"
        assert cloned.status_code == 400 and cloned.json()["error"]["param"] == "ref_audio"
        with connect(server.ws_url(), open_timeout=60) as ws:
            ws.send(json.dumps({"type": "session.config", "voice": "sine"}))
            assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
            ws.send(json.dumps({"type": "input.text", "text": "Zebra."}))
            ws.send(json.dumps({"type": "session.close"}))
            audio, events = b"", []
            while not events or events[-1]["type"] != "session.done":
                msg = ws.recv(timeout=120)
                if isinstance(msg, bytes):
                    audio += msg
                else:
                    events.append(json.loads(msg))
        assert np.array_equal(pcm_samples(audio), spoken("Zebra.")), events
    finally:
        code = server.stop()
    assert code == 0, server.log_path.read_text()[-3000:]


def spoken(text: str) -> np.ndarray:
    """The audio the toy speaks `text` with: a frame per character, at its first character's pitch."""
    return expected_pcm(toy_tts.prepare(ToyRequest(text, len(text)), 4096), len(text))
