"""`cadence synth` on a text longer than --long-form-chars: pieces cut as the server cuts them, spoken
one after another into one WAV file, --long-form-pause seconds of silence between them."""

from __future__ import annotations

import numpy as np
from cli_run import cadence, read_wav

from cadence.audio import to_int16
from cadence.models.qwen3_tts import SamplingParams
from cadence.models.qwen3_tts.reference import generate
from cadence.server.segmenter import split_long_text

TEXT = "The first sentence is here. A second one follows it. And a third one ends it."
GREEDY = ("--greedy", "--max-new-tokens", "6")


def reference_piece(model, text: str) -> np.ndarray:
    """What the reference loop says for one piece alone, greedy, with the command's defaults."""
    params = SamplingParams.from_defaults(model.config.generation, max_new_tokens=6).greedy()
    codes = generate(model, [model.prompt(text, "ryan", "auto")], params).generations[0].codes
    return to_int16(model.codec.decode(codes))


def test_a_long_text_is_spoken_as_pieces_into_one_wav(tiny_checkpoint, tiny_model, tmp_path):
    out = tmp_path / "long.wav"
    args = ("synth", TEXT, "--model", str(tiny_checkpoint), "-o", str(out), *GREEDY)
    r = cadence(*args, "--long-form-chars", "30", "--long-form-pause", "0.1")
    assert r.returncode == 0, r.stderr
    pieces = split_long_text(TEXT, 30)
    assert len(pieces) == 3
    assert "in 3 pieces" in r.stderr and "piece 3/3" in r.stderr  # the report and the progress bar
    pause = np.zeros(2400, np.int16)  # 0.1 s at 24 kHz
    parts = [reference_piece(tiny_model, piece) for piece in pieces]
    expected = np.concatenate([parts[0], pause, parts[1], pause, parts[2]])
    pcm = read_wav(out)[0]
    assert pcm.shape == expected.shape
    assert np.abs(pcm.astype(np.int32) - expected.astype(np.int32)).max() <= 1  # another process: one LSB


def test_long_form_chars_zero_speaks_the_text_whole(tiny_checkpoint, tiny_model, tmp_path):
    out = tmp_path / "whole.wav"
    r = cadence("-q", "synth", TEXT, "--model", str(tiny_checkpoint), "-o", str(out), *GREEDY, "--long-form-chars", "0")
    assert r.returncode == 0, r.stderr
    assert "pieces" not in r.stderr
    expected = reference_piece(tiny_model, TEXT)
    pcm = read_wav(out)[0]
    assert pcm.shape == expected.shape
    assert np.abs(pcm.astype(np.int32) - expected.astype(np.int32)).max() <= 1
