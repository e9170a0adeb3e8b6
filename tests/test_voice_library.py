"""Saved voices on disk: written whole, found by id or name, reloaded by a new server, deleted;
voices of another model width are skipped, not deleted."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cadence.models.qwen3_tts.voice_prompt import VoiceClonePrompt
from cadence.server.voice_library import VoiceExistsError, VoiceLibrary


def prompt(width: int = 64, text: str | None = "Hello.") -> VoiceClonePrompt:
    return VoiceClonePrompt(torch.randn(width), torch.randint(0, 2048, (5, 16)), text)


def library(directory, width: int, **kwargs) -> VoiceLibrary:
    """The saved voices of a Qwen3-TTS model `width` wide."""
    return VoiceLibrary(directory, width, VoiceClonePrompt.load, **kwargs)


def test_add_reload_get_delete(tmp_path):
    lib = library(tmp_path, 64)
    p = prompt()
    voice = lib.add("Alice", p, "true")
    assert (tmp_path / voice.id / "voice.json").is_file() and (tmp_path / voice.id / "prompt.safetensors").is_file()
    assert not list(tmp_path.glob(".tmp-*"))
    again = library(tmp_path, 64)  # a restarted server
    loaded = again.get("alice")
    assert loaded is not None and loaded.id == voice.id and loaded.consent == "true"
    assert np.array_equal(loaded.prompt.ref_codes, p.ref_codes) and np.array_equal(loaded.prompt.x_vector, p.x_vector)
    assert loaded.prompt.ref_text == "Hello."
    assert again.get(voice.id) is loaded
    assert again.delete("ALICE").id == voice.id
    assert not (tmp_path / voice.id).exists() and library(tmp_path, 64).list() == []


def test_names_are_unique_and_checked(tmp_path):
    lib = library(tmp_path, 64)
    lib.add("Bob", prompt(text=None), "true")
    with pytest.raises(VoiceExistsError):
        lib.add("bob", prompt(), "true")
    for bad in ["", "a/b", "x" * 65, "voice_abc", " lead"]:
        with pytest.raises(ValueError, match="invalid voice name"):
            lib.add(bad, prompt(), "true")
    assert lib.get("bob").card()["modes"] == ["x_vector_only"]


def test_other_widths_are_skipped_not_deleted(tmp_path, caplog):
    library(tmp_path, 128).add("Wide", prompt(128), "true")
    lib = library(tmp_path, 64)
    assert lib.list() == [] and "128-wide model" in caplog.text
    assert library(tmp_path, 128).get("Wide") is not None


def test_full_library(tmp_path):
    lib = library(tmp_path, 64, max_voices=1)
    lib.add("One", prompt(), "true")
    with pytest.raises(ValueError, match="maximum of 1"):
        lib.add("Two", prompt(), "true")


def test_servers_sharing_a_directory_see_each_others_voices(tmp_path, caplog):
    """Two servers (Ray Serve replicas on a shared volume) over one directory."""
    a, b = library(tmp_path, 64), library(tmp_path, 64)
    saved = a.add("Carol", prompt(), "true")
    found = b.get("carol")
    assert found is not None and found.id == saved.id and [v.id for v in b.list()] == [saved.id]
    with pytest.raises(VoiceExistsError):
        b.add("CAROL", prompt(), "true")
    library(tmp_path, 128).add("Wide", prompt(128), "true")  # another model size, same folder
    assert [v.name for v in b.list()] == ["Carol"]
    assert caplog.text.count("128-wide model") == 1  # skipped, and said once, not at every lookup
    b.list()
    assert caplog.text.count("128-wide model") == 1
    assert b.delete("Carol").id == saved.id
    assert a.get("Carol") is None and a.list() == []
