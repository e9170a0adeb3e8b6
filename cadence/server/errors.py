"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with an HTTP status."""

from __future__ import annotations

import math
from typing import Any

from fastapi.responses import JSONResponse

from ..engine.request import AudioChunk, FinishReason
from ..errors import InvalidRequestError


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self, extra_headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers={**self.headers, **(extra_headers or {})})


def invalid(e: InvalidRequestError) -> APIError:
    """A field with a value cadence cannot use: 400 naming the field (its message lists what is allowed)."""
    return APIError(400, e.message, param=e.param, code=e.code)


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def too_large(message: str, param: str | None = None) -> APIError:
    return APIError(413, message, param=param, code="request_too_large")


def unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def not_found(message: str, param: str | None = None, code: str = "not_found") -> APIError:
    return APIError(404, message, param=param, code=code)


def queue_full(message: str, retry_after: float) -> APIError:
    seconds = max(1, math.ceil(retry_after))
    return APIError(429, message, "rate_limit_error", code="queue_full", headers={"Retry-After": str(seconds)})


def unavailable(message: str, code: str) -> APIError:
    return APIError(503, message, "server_error", code=code, headers={"Retry-After": "1"})


def server_error(message: str, code: str = "internal_error") -> APIError:
    return APIError(500, message, "server_error", code=code)


def client_gone() -> APIError:
    """The client went away before its request was read: nobody sees this answer; it is counted."""
    return APIError(499, "client disconnected", code="client_disconnected")


def timeout(message: str) -> APIError:
    return APIError(504, message, "server_error", code="timeout")


def chunk_error(chunk: AudioChunk, drain_expired: bool = False) -> APIError | None:
    """Why a final chunk ended its request abnormally, as the error the client gets, or None."""
    if chunk.finish_reason is FinishReason.ERROR:
        return server_error(f"request {chunk.request_id} failed: {chunk.error or 'synthesis failed'}")
    if chunk.finish_reason is FinishReason.CANCELLED:
        if drain_expired:
            return unavailable(
                f"request {chunk.request_id} was cut off: the server is shutting down and its drain timeout ran out",
                "draining",
            )
        return server_error(f"request {chunk.request_id} was cancelled by the engine")
    return None
