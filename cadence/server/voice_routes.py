"""Voices: GET /v1/audio/voices[/{id}] on every server; POST and DELETE (saved voices) on Base servers.

POST /v1/audio/voices takes multipart form data, as OpenAI's voices.create sends it: the audio file
(`audio_sample`, or `audio`), `name`, `consent`, and cadence's `ref_text` (the audio's transcript,
for the in-context clone mode). The voice's prompt is computed once here and stored with it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from . import errors as E
from .http import read_form
from .voice_library import VoiceExistsError, check_name

if TYPE_CHECKING:
    from .state import ServerState

VOICES = "/v1/audio/voices"
CONSENT_FLAGS = ("true", "yes", "1", "on")
CONSENT_ID = re.compile(r"cons_[A-Za-z0-9_-]{1,64}")  # an OpenAI consent recording's id (fullmatch)
LIST_LIMIT = (1, 1000, 100)  # GET /v1/audio/voices?limit=: least, most, default


class VoiceForm(msgspec.Struct, kw_only=True):
    name: str
    consent: str | None = None
    ref_text: str | None = None
    type: str = "audio_sample"


def capabilities(state: ServerState) -> dict[str, Any]:
    """What this server's checkpoint can do (GET /v1/models): the task and the fields it takes."""
    caps = state.frontend.capabilities()
    return {
        "tts_model_type": caps.kind,
        "model_size": caps.size,
        "voices": list(caps.voices),
        "instructions": caps.instructions,
        "voice_cloning": caps.clones_voices,
        "saved_voices": caps.clones_voices,
        "languages": list(caps.languages),
        "sample_rate": state.frontend.sample_rate,
    }


def add_voice_routes(app: FastAPI, state: ServerState, auth: list) -> None:
    @app.get(VOICES, dependencies=auth)
    async def list_voices(limit: str | None = None, after: str | None = None) -> JSONResponse:
        """A page of voices, in creation order (saved voices) or by name (presets): `limit` of
        them after the one whose id is `after`; `has_more` says whether more follow."""
        voices = state.voices.describe()
        start = 0
        if after is not None:
            ids = [v["id"] for v in voices]
            if after not in ids:
                raise E.bad_request(f"after: no voice '{after}' to continue after", "after")
            start = ids.index(after) + 1
        n = _list_limit(limit)
        page = voices[start : start + n]
        return JSONResponse(
            {
                "voices": page,
                "languages": list(state.frontend.capabilities().languages),
                "has_more": start + n < len(voices),
                "last_id": page[-1]["id"] if page else None,
            }
        )

    @app.get(VOICES + "/{voice_id}", dependencies=auth)
    async def get_voice(voice_id: str) -> JSONResponse:
        library = state.voices.library
        if library is not None and (saved := library.get(voice_id)) is not None:
            return JSONResponse(saved.card())
        for card in state.voices.describe():
            if voice_id in (card["id"], card["name"]):
                return JSONResponse(card)
        raise E.not_found(f"no voice '{voice_id}'", "voice_id", "voice_not_found")

    @app.post(VOICES, dependencies=auth)
    async def create_voice(request: Request) -> JSONResponse:
        cloning = _require_cloning(state)
        # a form without a file part arrives url-encoded: read it, then name the missing file
        form_types = ("multipart/form-data", "application/x-www-form-urlencoded")
        if not request.headers.get("content-type", "").startswith(form_types):
            raise E.bad_request("send the voice as multipart/form-data (audio_sample, name, consent, ref_text)")
        async with cloning.upload_slot():
            form, audio = await read_form(request, state.form_limits(), VoiceForm, "audio_sample", "audio")
            _check_voice_form(form, audio)
            if cloning.library.get(form.name) is not None:
                raise E.APIError(409, f"a saved voice named '{form.name}' exists", param="name", code="voice_exists")
            prompt = await cloning.analyze(audio, form.ref_text, "audio_sample")
        try:
            voice = cloning.library.add(form.name, prompt, form.consent.strip())
        except VoiceExistsError as e:
            raise E.APIError(409, str(e), param="name", code="voice_exists") from None
        except ValueError as e:
            raise E.bad_request(str(e), "name") from None
        return JSONResponse(voice.card())

    @app.delete(VOICES + "/{voice_id}", dependencies=auth)
    async def delete_voice(voice_id: str) -> JSONResponse:
        cloning = _require_cloning(state)
        voice = cloning.library.delete(voice_id)
        if voice is None:
            raise E.not_found(f"no saved voice '{voice_id}'", "voice_id", "voice_not_found")
        return JSONResponse({"id": voice.id, "object": "audio.voice.deleted", "deleted": True})


def _check_voice_form(form: VoiceForm, audio: bytes | None) -> None:
    if form.type != "audio_sample":
        raise E.bad_request(f"unknown type '{form.type}'; allowed: audio_sample", "type")
    if audio is None:
        raise E.bad_request("missing the audio file 'audio_sample'", "audio_sample", "missing_field")
    consent = (form.consent or "").strip()
    if consent.lower() not in CONSENT_FLAGS and not CONSENT_ID.fullmatch(consent):
        raise E.bad_request(
            "consent is required: send consent=true to confirm the speaker agreed to having their voice "
            "cloned (or an OpenAI consent recording id, cons_ and up to 64 letters, digits, '_' or '-')",
            "consent",
            "consent_required",
        )
    try:
        check_name(form.name)
    except ValueError as e:
        raise E.bad_request(str(e), "name") from None


def _list_limit(text: str | None) -> int:
    lo, hi, default = LIST_LIMIT
    if text is None:
        return default
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise E.bad_request(f"limit must be an integer from {lo} to {hi}, got '{text[:32]}'", "limit")
    return int(text)


def _require_cloning(state: ServerState):
    if state.cloning is None:
        kind = state.frontend.capabilities().kind
        raise E.bad_request(f"saved voices need a base checkpoint (voice cloning); this server runs {kind}", "voice")
    return state.cloning
