"""Errors a request can cause, carrying what an API needs to answer them (field, allowed values)."""

from __future__ import annotations

from collections.abc import Sequence


class InvalidRequestError(ValueError):
    """A request field has a value cadence cannot use. `param` names the field; `allowed`, if known,
    lists the values it may take. Raised before anything reaches the device."""

    def __init__(
        self, message: str, param: str | None = None, allowed: Sequence[str] | None = None, code: str = "invalid_value"
    ):
        if allowed:
            message = f"{message}; allowed: {', '.join(str(a) for a in allowed)}"
        super().__init__(message)
        self.message = message
        self.param = param
        self.allowed = list(allowed) if allowed else None
        self.code = code  # the OpenAI-style error code the server answers with
