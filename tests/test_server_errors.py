"""Bad input, authentication, a full queue and disconnects, against one real server process.

The server requires an API key and holds one generating stream plus one queued request, so that a
third request finds it full. Every refusal must come back in OpenAI's error shape with the right
status, and the server must keep serving afterwards.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from serving import FRAME, Server, wait_for
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

KEY = "sekret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_CHARS = 200
MAX_BODY = 8192
GOOD = {"input": "Hello.", "voice": "ryan", "response_format": "pcm", "max_new_tokens": 3, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    args = ["--api-key", KEY, "--max-streams", "1", "--max-queue", "1", "--no-ui"]
    args += ["--max-input-chars", str(MAX_CHARS), "--max-body-bytes", str(MAX_BODY)]
    s = Server(tiny_checkpoint, tmp_path_factory.mktemp("serve-errors"), *args)
    try:
        yield s.wait_ready()
    finally:
        assert s.stop() == 0, s.log()[-3000:]


def body(**fields) -> bytes:
    return json.dumps({**GOOD, **fields}).encode()


# name: (method, path, headers, body, status, param, code)
CASES = {
    "no key": ("POST", "/v1/audio/speech", {}, body(), 401, None, "invalid_api_key"),
    "wrong key": ("POST", "/v1/audio/speech", {"Authorization": "Bearer nope"}, body(), 401, None, "invalid_api_key"),
    "not bearer": ("POST", "/v1/audio/speech", {"Authorization": f"Basic {KEY}"}, body(), 401, None, "invalid_api_key"),
    "models without key": ("GET", "/v1/models", {}, None, 401, None, "invalid_api_key"),
    "voices without key": ("GET", "/v1/audio/voices", {}, None, 401, None, "invalid_api_key"),
    "malformed json": ("POST", "/v1/audio/speech", AUTH, b'{"input": "hi",', 400, None, "invalid_json"),
    "not an object": ("POST", "/v1/audio/speech", AUTH, b"[1, 2]", 400, None, "invalid_type"),
    "input not a string": ("POST", "/v1/audio/speech", AUTH, body(input=42), 400, "input", "invalid_type"),
    "speed not a number": ("POST", "/v1/audio/speech", AUTH, body(speed="fast"), 400, "speed", "invalid_type"),
    "ignore_eos not a bool": ("POST", "/v1/audio/speech", AUTH, body(ignore_eos="yes"), 400, "ignore_eos", None),
    "missing input": ("POST", "/v1/audio/speech", AUTH, b'{"voice": "ryan"}', 400, "input", "missing_field"),
    "missing voice": ("POST", "/v1/audio/speech", AUTH, b'{"input": "hi"}', 400, "voice", "missing_field"),
    "empty input": ("POST", "/v1/audio/speech", AUTH, body(input=""), 400, "input", None),
    "blank input": ("POST", "/v1/audio/speech", AUTH, body(input=" \n\t "), 400, "input", None),
    "input too long": ("POST", "/v1/audio/speech", AUTH, body(input="a" * (MAX_CHARS + 1)), 413, "input", None),
    "unknown voice": ("POST", "/v1/audio/speech", AUTH, body(voice="darth"), 400, "voice", "invalid_value"),
    "unknown format": ("POST", "/v1/audio/speech", AUTH, body(response_format="ogg"), 400, "response_format", None),
    "unknown stream format": ("POST", "/v1/audio/speech", AUTH, body(stream_format="ws"), 400, "stream_format", None),
    "unknown model": ("POST", "/v1/audio/speech", AUTH, body(model="gpt-9"), 404, "model", "model_not_found"),
    "speed too low": ("POST", "/v1/audio/speech", AUTH, body(speed=0.2), 400, "speed", None),
    "speed too high": ("POST", "/v1/audio/speech", AUTH, body(speed=4.5), 400, "speed", None),
    "unknown language": ("POST", "/v1/audio/speech", AUTH, body(language="elvish"), 400, "language", None),
    "negative temperature": ("POST", "/v1/audio/speech", AUTH, body(temperature=-1), 400, "temperature", None),
    "greedy and sampled code predictor": (
        "POST",
        "/v1/audio/speech",
        AUTH,
        body(subtalker_temperature=0, subtalker_dosample=True),
        400,
        "subtalker_temperature",
        None,
    ),
    "subtalker_top_p above one": (
        "POST",
        "/v1/audio/speech",
        AUTH,
        body(subtalker_top_p=2),
        400,
        "subtalker_top_p",
        None,
    ),
    "top_p above one": ("POST", "/v1/audio/speech", AUTH, body(top_p=1.5), 400, "top_p", None),
    "negative seed": ("POST", "/v1/audio/speech", AUTH, body(seed=-1), 400, "seed", None),
    "zero frames": ("POST", "/v1/audio/speech", AUTH, body(max_new_tokens=0), 400, "max_new_tokens", None),
    "ignore_eos unbounded": ("POST", "/v1/audio/speech", AUTH, body(max_new_tokens=None), 400, "max_new_tokens", None),
    "invalid utf-8": ("POST", "/v1/audio/speech", AUTH, b'{"input": "\xff\xfe", "voice": "ryan"}', 400, None, None),
    "oversized body": ("POST", "/v1/audio/speech", AUTH, body(input="a" * (2 * MAX_BODY)), 413, None, None),
    "unknown route": ("GET", "/v1/audio/nowhere", AUTH, None, 404, None, "not_found"),
    "wrong method": ("GET", "/v1/audio/speech", AUTH, None, 405, None, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_an_openai_error(server, name):
    method, path, headers, content, status, param, code = CASES[name]
    with server.client() as c:
        r = c.request(method, path, headers={"Content-Type": "application/json", **headers}, content=content)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    if status == 400 and param not in (None, "voice", "response_format", "stream_format", "language"):
        assert param in error["message"]  # names the field
    if param in ("voice", "response_format", "stream_format", "language") and error["code"] == "invalid_value":
        assert "allowed:" in error["message"]  # and lists the allowed values
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"


def test_still_serving_after_bad_inputs(server):
    with server.client() as c:
        r = c.post("/v1/audio/speech", headers=AUTH, json=GOOD)
        assert r.status_code == 200 and len(r.content) == 2 * 3 * FRAME
        assert c.get("/v1/models", headers=AUTH).status_code == 200
        assert c.get("/health").status_code == 200  # status routes need no key


def test_full_queue_is_429_with_retry_after_and_disconnects_free_the_engine(server):
    """One stream generating, one queued: the third request is refused. Then both clients hang up
    (one mid-stream, one still queued) and the engine goes back to zero streams."""
    long = {**GOOD, "max_new_tokens": 4000}  # far longer than the test: only a disconnect ends it

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=120, trust_env=False) as c:
            first_bytes = asyncio.get_running_loop().create_future()

            async def streaming() -> None:
                async with c.stream("POST", "/v1/audio/speech", headers=AUTH, json=long) as r:
                    assert r.status_code == 200
                    async for _ in r.aiter_bytes():
                        if not first_bytes.done():
                            first_bytes.set_result(True)

            async def queued() -> None:
                await c.post("/v1/audio/speech", headers=AUTH, json=long)

            running = asyncio.create_task(streaming())
            await first_bytes
            waiting = asyncio.create_task(queued())
            await _until(lambda: server.metrics()["cadence_inflight_requests"] == 2, "two requests in flight")
            await _until(lambda: server.metrics()["cadence_queue_depth"] == 1, "the second one queued in the engine")

            full = await c.post("/v1/audio/speech", headers=AUTH, json=GOOD)
            assert full.status_code == 429, full.text
            assert int(full.headers["retry-after"]) >= 1
            assert full.json()["error"]["code"] == "queue_full"

            running.cancel()  # hang up mid-stream
            waiting.cancel()  # and while queued
            await asyncio.gather(running, waiting, return_exceptions=True)

    before = server.metrics()  # idle: what an empty engine holds
    assert before["cadence_active_streams"] == 0
    asyncio.run(scenario())

    def engine_idle() -> bool:
        m = server.metrics()
        return (
            m["cadence_active_streams"] == 0 and m["cadence_queue_depth"] == 0 and m["cadence_inflight_requests"] == 0
        )

    wait_for(engine_idle, 120, "the engine to drop both requests", server)
    after = server.metrics()
    key = 'cadence_requests_total{route="/v1/audio/speech",status="499"}'
    assert after[key] - before.get(key, 0) == 2  # both hang-ups seen as such
    assert after["cadence_kv_pages_used"] == before["cadence_kv_pages_used"]  # their KV pages are free again
    with server.client() as c:  # and the capacity is back
        assert c.post("/v1/audio/speech", headers=AUTH, json=GOOD).status_code == 200


def test_websocket_needs_the_key(server):
    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    config = json.dumps({"type": "session.config", "voice": "ryan"})
    for bad in ({}, {"Authorization": "Bearer nope"}):
        with pytest.raises(InvalidStatus) as refused:
            connect(url, open_timeout=60, additional_headers=bad)
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
    with connect(url, open_timeout=60, additional_headers=AUTH) as ws:
        ws.send(config)
        assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
    with connect(url + f"?api_key={KEY}", open_timeout=60) as ws:  # browsers cannot set headers
        ws.send(config)
        assert json.loads(ws.recv(timeout=60))["type"] == "session.created"


async def _until(predicate, what: str, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await asyncio.to_thread(predicate):
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def test_docs_need_the_key(server):
    with server.client() as c:
        for path in ("/docs", "/openapi.json"):
            assert c.get(path).status_code == 401
            assert c.get(path, headers=AUTH).status_code == 200
        page = c.get("/docs", params={"api_key": KEY})  # a browser opens the page with the key in its URL
        assert page.status_code == 200 and f"/openapi.json?api_key={KEY}" in page.text
        assert "/v1/audio/speech" in c.get("/openapi.json", params={"api_key": KEY}).json()["paths"]


def test_no_ui_serves_no_playground(server):
    with server.client() as c:
        for path in ("/", "/ui/app.js"):
            assert c.get(path, headers=AUTH).status_code == 404
