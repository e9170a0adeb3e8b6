"""What every HTTP route shares: body and form reading within limits, the API-key check, the route's
metrics label, and the middleware that ends what a route could not end itself.

The route modules (speech_request, voice_routes, websocket) and the app (api.py) import these; this
module imports no route module and no server state.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec
from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import errors as E
from .access import Outcome, record
from .metrics import Metrics

log = logging.getLogger("cadence.server")

DRAIN_LIMIT_BYTES = 16 << 20  # an oversized body is read (and dropped) up to this, so the client sees the 413
MAX_FORM_FIELDS = 64


class AbortStream(Exception):
    """Raised from a response body to cut the connection (see LastResortMiddleware)."""


class LastResortMiddleware:
    """Ends what a route could not end itself, for that request alone. An AbortStream cuts the
    connection of a response that did not complete (the client sees a truncated stream instead of a
    short body that looks whole); any other exception becomes a 500 that is logged once, counted in
    the metrics and written to the access log, rather than reaching uvicorn."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except AbortStream:
            pass  # the server closes the connection of a response that did not complete
        except Exception as e:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            err = E.server_error(f"internal error: {type(e).__name__}")
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            record(self.metrics, Outcome(route), err.status, f"{type(e).__name__}: {e}")
            if not started:
                await err.response()(scope, receive, send)


def route_label(request: Request) -> str:
    """The matched route's template as a metrics label: raw paths (/v1/models/<anything>) would let
    clients create unbounded label sets."""
    route = request.scope.get("route")
    return getattr(route, "path", None) or "unmatched"


def request_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The Authorization header, or a `?api_key=` query parameter (browsers cannot set headers on a
    WebSocket or on a page they navigate to) as one."""
    if auth := headers.get("authorization"):
        return auth
    key = query.get("api_key")
    return f"Bearer {key}" if key else None


def check_api_key(key: str | None, authorization: str | None) -> None:
    """401 unless `authorization` is `Bearer <key>` (anything goes when the server has no key)."""
    if not key:
        return
    if not authorization:
        raise E.unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise E.unauthorized("incorrect API key")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or 413 past `limit` bytes; not UTF-8 is a 400 here, before JSON parsing."""
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > DRAIN_LIMIT_BYTES:
        raise E.too_large(f"the body is {length} bytes; the limit is {limit}")
    data = bytearray()
    size = 0
    try:
        async for part in request.stream():
            size += len(part)
            if size <= limit:
                data += part
            elif size > DRAIN_LIMIT_BYTES:
                break
    except ClientDisconnect:
        raise E.client_gone() from None
    if size > limit:
        raise E.too_large(f"the body is {size}{'+' if size > DRAIN_LIMIT_BYTES else ''} bytes; the limit is {limit}")
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        message = f"the body is not valid UTF-8 ({e.reason} at byte {e.start})"
        raise E.bad_request(message, None, "invalid_encoding") from None
    return bytes(data)


@dataclass(frozen=True)
class FormLimits:
    """What a multipart form may hold: `max_fields_bytes` of fields besides the file, a file of at
    most `max_file_bytes`, none at all when `no_file` says why (a server without voice cloning)."""

    max_fields_bytes: int
    max_file_bytes: int
    no_file: str | None = None  # the reason a file part is refused, completed by the field's name

    @property
    def max_body_bytes(self) -> int:
        return self.max_fields_bytes + self.max_file_bytes


async def read_form(
    request: Request, limits: FormLimits, type_: type[msgspec.Struct], file_field: str, *aliases: str
) -> tuple[msgspec.Struct, bytes | None]:
    """Multipart form data -> (the struct of its fields, the bytes of `file_field` or an alias).
    Field values are strings; msgspec converts them ("true" -> True, "0.5" -> 0.5)."""
    limit = limits.max_body_bytes
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > limit:
        raise E.too_large(f"the body is {length} bytes; the limit is {limit}", file_field)
    try:
        form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS)
    except ClientDisconnect:
        raise E.client_gone() from None
    except Exception as e:  # starlette raises its own errors (malformed parts, too many fields)
        raise E.bad_request(f"invalid multipart form data: {e}", None, "invalid_form") from None
    fields: dict[str, str] = {}
    upload: bytes | None = None
    try:
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                if key not in (file_field, *aliases):
                    raise E.bad_request(f"unexpected file field '{key}'; the audio goes in '{file_field}'", key)
                if limits.no_file is not None:
                    raise E.bad_request(f"{key} {limits.no_file}", key)
                upload = await value.read(limits.max_file_bytes + 1)
                if len(upload) > limits.max_file_bytes:
                    raise E.too_large(f"{key} is larger than the limit of {limits.max_file_bytes} bytes", key)
            elif key in (file_field, *aliases):
                raise E.bad_request(f"{key} must be a file part (multipart upload)", key)
            else:
                fields[key] = value
    finally:
        await form.close()
    return _form_struct(fields, type_), upload


def _form_struct(fields: dict[str, str], type_: type[msgspec.Struct]) -> msgspec.Struct:
    try:
        return msgspec.convert(fields, type_, strict=False)
    except msgspec.ValidationError as e:
        missing = re.search(r"missing required field `([^`]+)`", str(e))
        if missing:
            name = missing.group(1)
            raise E.bad_request(f"missing required field '{name}'", name, "missing_field") from None
        raise E.bad_request(f"invalid form field: {e}", None, "invalid_type") from None
