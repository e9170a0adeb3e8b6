"""Reading POST /v1/audio/speech: a JSON body, or multipart form data carrying an uploaded reference.

JSON is OpenAI's shape (schema.SpeechBody); a Base request may add `ref_audio` as base64. Multipart
sends the same fields as form fields and the reference as the file `ref_audio`, which spares the
base64 inflation. Either way a reference is decoded and encoded here (cloning.VoiceCloning) before
the body is validated, so validation stays synchronous and shared with the WebSocket route.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fastapi import Request

from .cloning import decode_base64_audio
from .http import read_body, read_form
from .schema import SpeechBody, SpeechJob, decode_json, validate_speech

if TYPE_CHECKING:
    from .state import ServerState

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
    cloning = state.cloning
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        body, upload = await read_form(request, state.form_limits(), SpeechBody, "ref_audio")
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
