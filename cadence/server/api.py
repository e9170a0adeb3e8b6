"""The FastAPI app: routes, authentication, body limits, OpenAI-shaped errors, metrics.

Routes: POST /v1/audio/speech, WS /v1/audio/speech/stream, GET /v1/models, GET /v1/models/{id},
GET /v1/audio/voices[/{id}], POST and DELETE /v1/audio/voices (Base), GET /health, GET /ready,
GET /metrics, GET /version, GET /docs and /openapi.json. With an API key set, every /v1 route and the
docs need `Authorization: Bearer <key>` (or `?api_key=`, for the docs page and the WebSocket).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import resources
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request, WebSocket
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from . import errors as E
from .access import Outcome, record
from .http import LastResortMiddleware, check_api_key, request_key, route_label
from .speech import respond
from .speech_request import read_speech
from .state import ServerState
from .voice_routes import add_voice_routes, capabilities
from .websocket import ROUTE as SPEECH_STREAM_ROUTE
from .websocket import speech_stream

SPEECH_ROUTE = "/v1/audio/speech"


def create_app(state: ServerState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.start()
        yield
        await state.stop()

    # /docs and /openapi.json are routes of their own below: behind the API key when one is set.
    app = FastAPI(
        title="cadence", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.cadence = state
    app.add_middleware(LastResortMiddleware, metrics=state.metrics)
    add_error_handlers(app, state)
    auth = [Depends(key_check(state, query=False))]
    add_docs_routes(app, state)
    add_status_routes(app, state)
    add_model_routes(app, state, auth)
    add_voice_routes(app, state, auth)
    if state.settings.ui:
        add_playground(app)
    add_speech_routes(app, state, auth)
    return app


def key_check(state: ServerState, query: bool) -> Callable[[Request], Awaitable[None]]:
    """A route dependency: 401 without the server's API key, from the Authorization header or, with
    `query`, a `?api_key=` parameter (for what a browser opens: the docs page)."""

    # A coroutine, so FastAPI runs it on the event loop: a plain function dependency would run in its
    # thread pool, a hop to another thread and back on every request.
    async def require_key(request: Request) -> None:
        given = request_key(request.headers, request.query_params) if query else request.headers.get("authorization")
        check_api_key(state.settings.api_key, given)

    return require_key


def add_error_handlers(app: FastAPI, state: ServerState) -> None:
    """Every error in OpenAI's shape, counted in the metrics under its route's template."""

    @app.exception_handler(E.APIError)
    async def api_error(request: Request, e: E.APIError) -> JSONResponse:
        if request.url.path != SPEECH_ROUTE:  # the speech route counts its own
            state.metrics.requests.labels(route_label(request), str(e.status)).inc()
        return e.response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        if e.status_code == 404:
            err = E.not_found(f"no route {request.method} {request.url.path}")
        elif e.status_code == 405:
            err = E.APIError(405, f"{request.method} is not allowed on {request.url.path}", code="method_not_allowed")
        else:
            err = E.APIError(e.status_code, str(e.detail), code="http_error")
        state.metrics.requests.labels(route_label(request), str(err.status)).inc()
        return err.response()


def add_docs_routes(app: FastAPI, state: ServerState) -> None:
    """GET /docs (Swagger UI) and /openapi.json, behind the API key (header or `?api_key=`)."""
    auth = [Depends(key_check(state, query=True))]

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    async def openapi_schema() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=auth)
    async def docs(request: Request) -> Response:
        key = request.query_params.get("api_key")
        schema = "/openapi.json" + (f"?api_key={quote(key, safe='')}" if key else "")
        return get_swagger_ui_html(openapi_url=schema, title="cadence: API")


def add_status_routes(app: FastAPI, state: ServerState) -> None:
    """GET /health, /ready, /metrics, /replicas, /version: no API key needed."""

    @app.get("/health")
    async def health() -> JSONResponse:
        """Alive: the API process answers and its engine process runs."""
        if state.engine.dead:
            return E.unavailable("the engine process has exited", "engine_dead").response()
        return JSONResponse({"status": "ok"})

    @app.get("/ready")
    async def ready() -> JSONResponse:
        """200 once weights are loaded and a warm-up synthesis ran; 503 while loading or draining."""
        if not state.ready:
            reason = "engine_dead" if state.engine.dead else "draining" if state.draining else "not_ready"
            return E.unavailable(f"not ready ({reason})", reason).response()
        return JSONResponse({"status": "ready", "model": state.settings.model_name})

    @app.get("/metrics")
    async def metrics() -> Response:
        state.metrics.inflight.set(state.engine.outstanding)
        return Response(state.metrics.render(), media_type=state.metrics.content_type)

    @app.get("/replicas")
    async def replicas() -> JSONResponse:
        """Each engine replica: state, device, pid, load, restarts (docs/deploy.md)."""
        return JSONResponse({"replicas": state.engine.describe()})

    @app.get("/version")
    async def version() -> JSONResponse:
        info = state.engine.info
        return JSONResponse(
            {
                "version": __version__,
                "python": platform.python_version(),
                "model": state.settings.model_name,
                "model_size": state.frontend.capabilities().size,
                "device": info.device if info else None,
                "dtype": info.dtype if info else None,
                "random_weights": info.random_weights if info else None,
                "max_streams": info.max_streams if info else None,  # as the engine sized itself
            }
        )


def add_model_routes(app: FastAPI, state: ServerState, auth: list) -> None:
    """GET /v1/models and /v1/models/{id}: the served model, with what its checkpoint can do."""

    def model_card() -> dict:
        return {
            "id": state.settings.model_name,
            "object": "model",
            "created": int(state.started),
            "owned_by": "cadence",
            **capabilities(state),
        }

    @app.get("/v1/models", dependencies=auth)
    async def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [model_card()]})

    @app.get("/v1/models/{model_id:path}", dependencies=auth)
    async def model(model_id: str) -> JSONResponse:
        if model_id not in state.limits.model_names:
            raise E.not_found(f"the model '{model_id}' does not exist", "model", "model_not_found")
        return JSONResponse(model_card())


def add_speech_routes(app: FastAPI, state: ServerState, auth: list) -> None:
    """POST /v1/audio/speech and WS /v1/audio/speech/stream (which checks its key itself: header or
    `?api_key=`)."""

    @app.post(SPEECH_ROUTE, dependencies=auth)
    async def speech(request: Request) -> Response:
        arrival = time.monotonic()
        try:
            state.check_serving()
            job = await read_speech(request, state)
            state.check_serving()  # again: the body may have taken a while to arrive
        except E.APIError as e:
            record(state.metrics, Outcome(SPEECH_ROUTE, arrival=arrival), e.status, e.message)
            return e.response()
        return await respond(state, job, request, arrival, SPEECH_ROUTE)

    @app.websocket(SPEECH_STREAM_ROUTE)
    async def speech_ws(websocket: WebSocket) -> None:
        await speech_stream(state, websocket)


# The playground's files (cadence/server/ui), by name: nothing else under /ui is served.
PLAYGROUND_FILES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
PLAYGROUND_HEADERS = {
    # Its own files and this server's API only: no inline code, no other origin, no framing.
    "Content-Security-Policy": "default-src 'self'; media-src 'self' blob:; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def add_playground(app: FastAPI) -> None:
    """GET / and /ui/{file}: a page to try the server in a browser (docs/api.md, Playground). The page
    holds no data of its own: it calls the API like any client, with the key the user types in."""
    ui = resources.files("cadence.server") / "ui"

    def serve(name: str) -> Response:
        return Response((ui / name).read_bytes(), media_type=PLAYGROUND_FILES[name], headers=PLAYGROUND_HEADERS)

    @app.get("/", include_in_schema=False)
    async def playground() -> Response:
        return serve("index.html")

    @app.get("/ui/{name}", include_in_schema=False)
    async def playground_file(name: str) -> Response:
        if name not in PLAYGROUND_FILES:
            raise E.not_found(f"no route GET /ui/{name}")
        return serve(name)
