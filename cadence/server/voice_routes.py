"""Voices: GET /v1/audio/voices[/{id}] on every server; POST and DELETE (saved voices) on Base servers.

POST /v1/audio/voices takes multipart form data, as OpenAI's voices.create sends it: the audio file
(`audio_sample`, or `audio`), `name`, `consent`, and cadence's `ref_text` (the audio's transcript,
for the in-context clone mode). The voice's prompt is computed once here and stored with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from . import errors as E
from .speech_request import read_form
from .voice_library import VoiceExistsError

if TYPE_CHECKING:
    from .state import ServerState

VOICES = "/v1/audio/voices"
CONSENT_FLAGS = ("true", "yes", "1", "on")


class VoiceForm(msgspec.Struct, kw_only=True):
    name: str
    consent: str | None = None
    ref_text: str | None = None
    type: str = "audio_sample"


def capabilities(state: ServerState) -> dict[str, Any]:
    """What this server's checkpoint can do (GET /v1/models): the task and the fields it takes."""
    cfg = state.frontend.config
    kind = cfg.tts_model_type
    return {
        "tts_model_type": kind,
        "model_size": cfg.tts_model_size,
        "voices": cfg.speakers if kind == "custom_voice" else [],
        "instructions": "style" if cfg.supports_instruct and kind == "custom_voice" else
        ("voice description" if kind == "voice_design" else None),
        "voice_cloning": kind == "base",
        "saved_voices": kind == "base",
        "languages": cfg.languages,
        "sample_rate": cfg.sample_rate,
    }  # fmt: skip


def add_voice_routes(app: FastAPI, state: ServerState, auth: list) -> None:
    @app.get(VOICES, dependencies=auth)
    async def list_voices() -> JSONResponse:
        return JSONResponse({"voices": state.voices.describe(), "languages": state.frontend.config.languages})

    @app.get(VOICES + "/{voice_id}", dependencies=auth)
    async def get_voice(voice_id: str) -> JSONResponse:
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
        form, audio = await read_form(request, state, VoiceForm, "audio_sample", "audio")
        if form.type != "audio_sample":
            raise E.bad_request(f"unknown type '{form.type}'; allowed: audio_sample", "type")
        if audio is None:
            raise E.bad_request("missing the audio file 'audio_sample'", "audio_sample", "missing_field")
        consent = (form.consent or "").strip()
        if consent.lower() not in CONSENT_FLAGS and not consent.startswith("cons_"):
            raise E.bad_request(
                "consent is required: send consent=true to confirm the speaker agreed to having their voice "
                "cloned (or an OpenAI consent recording id, cons_...)",
                "consent",
                "consent_required",
            )
        try:
            from .voice_library import check_name

            check_name(form.name)
        except ValueError as e:
            raise E.bad_request(str(e), "name") from None
        if cloning.library.get(form.name) is not None:
            raise E.APIError(409, f"a saved voice named '{form.name}' exists", param="name", code="voice_exists")
        prompt = await cloning.analyze(audio, form.ref_text, "audio_sample")
        try:
            voice = cloning.library.add(form.name, prompt, consent)
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


def _require_cloning(state: ServerState):
    if state.cloning is None:
        kind = state.frontend.config.tts_model_type
        raise E.bad_request(f"saved voices need a base checkpoint (voice cloning); this server runs {kind}", "voice")
    return state.cloning
