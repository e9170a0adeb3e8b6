"""Reading POST /v1/audio/speech: a JSON body, or multipart form data carrying an uploaded reference.

JSON is OpenAI's shape (schema.SpeechBody); a Base request may add `ref_audio` as base64. Multipart
sends the same fields as form fields and the reference as the file `ref_audio`, which spares the
base64 inflation. Either way a reference is decoded and encoded here (cloning.VoiceCloning) before
the body is validated, so validation stays synchronous and shared with the WebSocket route.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

import msgspec
from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.requests import ClientDisconnect

from . import errors as E
from .cloning import decode_base64_audio
from .schema import SpeechBody, SpeechJob, decode_json, validate_speech

if TYPE_CHECKING:
    from .state import ServerState

MAX_FORM_FIELDS = 64
INLINE_INPUT_CHARS = 8192  # longer inputs are validated in a worker thread


async def read_speech(request: Request, state: ServerState) -> SpeechJob:
    """The validated job of a speech request. Raises APIError. On a Base server a request that may
    carry reference audio (multipart, or a body larger than a plain one may be) is read and analysed
    in one of the concurrent-upload places."""
    if state.cloning is not None and may_carry_audio(request, state.settings.max_body_bytes):
        async with state.cloning.upload_slot():
            return await _read_speech(request, state)
    return await _read_speech(request, state)


def may_carry_audio(request: Request, max_plain_bytes: int) -> bool:
    length = request.headers.get("content-length", "")
    multipart = request.headers.get("content-type", "").startswith("multipart/form-data")
    return multipart or not length.isdigit() or int(length) > max_plain_bytes


async def _read_speech(request: Request, state: ServerState) -> SpeechJob:
    from .api import read_body  # the shared body reader (limits, drain, UTF-8)

    cloning = state.cloning
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        body, upload = await read_form(request, state, SpeechBody, "ref_audio")
    else:
        extra = cloning.max_base64_chars if cloning is not None else 0
        body, upload = decode_json(await read_body(request, state.settings.max_body_bytes + extra), SpeechBody), None
    clone = None
    if cloning is not None and (upload is not None or body.ref_audio is not None):
        data = (
            upload if upload is not None else decode_base64_audio(body.ref_audio, "ref_audio", cloning.max_base64_chars)
        )
        clone = await cloning.analyze(data, body.ref_text, "ref_audio")
    if len(body.input) > INLINE_INPUT_CHARS:  # a long input is split and tokenised off the event loop
        return await asyncio.to_thread(validate_speech, body, state.frontend, state.voices, state.limits, clone=clone)
    return validate_speech(body, state.frontend, state.voices, state.limits, clone=clone)


async def read_form(
    request: Request, state: ServerState, type_: type[msgspec.Struct], file_field: str, *aliases: str
) -> tuple[msgspec.Struct, bytes | None]:
    """Multipart form data -> (the struct of its fields, the bytes of `file_field` or an alias).
    Field values are strings; msgspec converts them ("true" -> True, "0.5" -> 0.5)."""
    cloning = state.cloning
    max_file = cloning.limits.max_bytes if cloning is not None else 0
    limit = state.settings.max_body_bytes + max_file
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
                if cloning is None:
                    kind = state.frontend.config.tts_model_type
                    raise E.bad_request(f"{key} needs a base checkpoint (voice cloning); this is {kind}", key)
                upload = await value.read(max_file + 1)
                if len(upload) > max_file:
                    raise E.too_large(f"{key} is larger than the limit of {max_file} bytes", key)
            elif key in (file_field, *aliases):
                raise E.bad_request(f"{key} must be a file part (multipart upload)", key)
            else:
                fields[key] = value
    finally:
        await form.close()
    try:
        return msgspec.convert(fields, type_, strict=False), upload
    except msgspec.ValidationError as e:
        missing = re.search(r"missing required field `([^`]+)`", str(e))
        if missing:
            name = missing.group(1)
            raise E.bad_request(f"missing required field '{name}'", name, "missing_field") from None
        raise E.bad_request(f"invalid form field: {e}", None, "invalid_type") from None
