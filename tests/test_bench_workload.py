"""Workloads: the built-in set, Seed-TTS lists, text files, and the --fixed-frames length model."""

from __future__ import annotations

import numpy as np
import pytest

from cadence.bench.load import poisson_arrivals
from cadence.bench.workload import (
    CHARS_PER_SECOND,
    EDGE_SILENCE_FRAMES,
    FRAME_RATE_HZ,
    WorkloadError,
    builtin_samples,
    draw_frames,
    expected_frames,
    load_seed_tts,
    load_text_file,
    load_workload,
    parse_fixed_frames,
    plan_request,
)


def test_builtin_set_has_ten_languages_interleaved():
    utterances = builtin_samples()
    assert len(utterances) == 40
    langs = [u.language for u in utterances]
    assert {lang: langs.count(lang) for lang in set(langs)} == dict.fromkeys(
        ["en", "zh", "ja", "ko", "de", "fr", "es", "it", "pt", "ru"], 4
    )
    assert len(set(langs[:10])) == 10  # any short run is still multilingual
    assert len({u.id for u in utterances}) == 40
    assert len({u.text for u in utterances}) == 40


def test_builtin_language_filter_and_unknown_code():
    assert {u.language for u in builtin_samples(["en", "zh"])} == {"en", "zh"}
    with pytest.raises(WorkloadError, match="xx"):
        builtin_samples(["en", "xx"])


def write_meta(directory, rows):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "meta.lst").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return directory


def test_seed_tts_rows_and_language_from_directory(tmp_path):
    en = write_meta(
        tmp_path / "seedtts_testset" / "en",
        [
            "common_voice_en_1|A reference sentence.|prompt-wavs/common_voice_en_1.wav|The target sentence to speak.",
            "",
            "common_voice_en_2|Another reference.|prompt-wavs/common_voice_en_2.wav|A second target.",
        ],
    )
    utterances = load_seed_tts(en)
    assert [u.id for u in utterances] == ["common_voice_en_1", "common_voice_en_2"]
    assert utterances[0].text == "The target sentence to speak."
    assert utterances[0].prompt_wav == "prompt-wavs/common_voice_en_1.wav"
    assert {u.language for u in utterances} == {"en"}
    assert load_seed_tts(en / "meta.lst", language="zh")[0].language == "zh"  # explicit wins


def test_seed_tts_unknown_directory_leaves_language_open(tmp_path):
    d = write_meta(tmp_path / "custom", ["u1|参考文本。|wavs/u1.wav|今天天气很好。"])
    assert load_seed_tts(d)[0].language is None


def test_seed_tts_bad_rows_and_missing_path_say_what_was_expected(tmp_path):
    bad = write_meta(tmp_path / "bad", ["u1|prompt|wav|ok", "u2|only three|fields"])
    with pytest.raises(WorkloadError, match=r"meta.lst:2: expected utt_id\|prompt_text\|prompt_wav\|text"):
        load_seed_tts(bad)
    with pytest.raises(WorkloadError, match="expected a meta.lst file"):
        load_seed_tts(tmp_path / "nowhere")


def test_text_file_skips_blank_lines(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("first line\n\n  second line  \n", encoding="utf-8")
    utterances = load_text_file(path, language="en")
    assert [(u.id, u.text, u.language) for u in utterances] == [
        ("line-1", "first line", "en"),
        ("line-3", "second line", "en"),
    ]
    with pytest.raises(WorkloadError, match="one utterance per line"):
        load_text_file(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(WorkloadError, match="no non-empty lines"):
        load_text_file(tmp_path / "empty.txt")


def test_load_workload_checks_its_options(tmp_path):
    with pytest.raises(WorkloadError, match="--dataset-path"):
        load_workload("seed-tts")
    with pytest.raises(WorkloadError, match="unknown dataset kind"):
        load_workload("librispeech")
    with pytest.raises(WorkloadError, match="--limit"):
        load_workload("builtin", limit=0)
    assert len(load_workload("builtin", limit=3)) == 3


# --- lengths --------------------------------------------------------------------------------------


def test_expected_frames_follows_each_scripts_rate():
    english = "a" * 28  # 2 s at 14 chars/s
    assert expected_frames(english) == pytest.approx(
        EDGE_SILENCE_FRAMES + 28 / CHARS_PER_SECOND["alphabetic"] * FRAME_RATE_HZ
    )
    chinese = "今天天气很好我们去公园"  # 11 Han characters
    assert expected_frames(chinese) == pytest.approx(EDGE_SILENCE_FRAMES + 11 / CHARS_PER_SECOND["han"] * FRAME_RATE_HZ)
    assert expected_frames("ひらがな") == pytest.approx(
        EDGE_SILENCE_FRAMES + 4 / CHARS_PER_SECOND["kana"] * FRAME_RATE_HZ
    )
    assert expected_frames("안녕하세요") == pytest.approx(
        EDGE_SILENCE_FRAMES + 5 / CHARS_PER_SECOND["hangul"] * FRAME_RATE_HZ
    )
    # A Chinese character takes longer to say than a Latin letter; longer text, more frames.
    assert expected_frames("好") > expected_frames("a")
    assert expected_frames("a longer sentence than this") > expected_frames("short")


def test_english_rate_is_about_one_frame_per_character():
    sentence = "The kettle clicked off just as the rain started tapping on the kitchen window."
    seconds = (expected_frames(sentence) - EDGE_SILENCE_FRAMES) / FRAME_RATE_HZ
    assert 13 <= len(sentence) / seconds <= 15


def test_drawn_frames_are_seeded_and_centred_on_the_expected_length():
    text = "Please leave the parcel with the neighbour at number twelve."
    a = [draw_frames(text, np.random.default_rng([7, i])) for i in range(2000)]
    b = [draw_frames(text, np.random.default_rng([7, i])) for i in range(2000)]
    assert a == b
    assert np.median(a) == pytest.approx(expected_frames(text), rel=0.03)
    assert len(set(a)) > 5  # jittered, not constant
    assert min(draw_frames("", np.random.default_rng(i)) for i in range(100)) >= 1


def test_plan_request_cycles_and_fixes_lengths():
    utterances = builtin_samples()[:3]
    assert plan_request(utterances, 4, 0, None).utterance == utterances[1]
    assert plan_request(utterances, 4, 0, None).max_new_tokens is None
    assert plan_request(utterances, 4, 0, 6).max_new_tokens == 6
    auto = [plan_request(utterances, i, 3, "auto").max_new_tokens for i in range(9)]
    assert auto == [plan_request(utterances, i, 3, "auto").max_new_tokens for i in range(9)]
    assert auto != [plan_request(utterances, i, 4, "auto").max_new_tokens for i in range(9)]  # the seed matters


def test_parse_fixed_frames():
    assert parse_fixed_frames("auto") == "auto"
    assert parse_fixed_frames("6") == 6
    for bad in ("0", "-3", "six", "1.5"):
        with pytest.raises(WorkloadError, match="--fixed-frames"):
            parse_fixed_frames(bad)


# --- open-loop arrivals ---------------------------------------------------------------------------


def test_poisson_arrivals_are_seeded_and_respect_the_window():
    a = poisson_arrivals(10.0, seed=1, warmup_s=2.0, duration_s=30.0, num_requests=None)
    assert a == poisson_arrivals(10.0, seed=1, warmup_s=2.0, duration_s=30.0, num_requests=None)
    assert a != poisson_arrivals(10.0, seed=2, warmup_s=2.0, duration_s=30.0, num_requests=None)
    assert all(x < y for x, y in zip(a, a[1:], strict=False))
    assert 0 < a[0] and a[-1] < 32.0
    assert len(a) == pytest.approx(320, rel=0.15)  # rate × window for this seed


def test_poisson_arrivals_can_stop_at_a_count():
    a = poisson_arrivals(5.0, seed=0, warmup_s=1.0, duration_s=None, num_requests=25)
    assert sum(t >= 1.0 for t in a) == 25
    b = poisson_arrivals(5.0, seed=0, warmup_s=1.0, duration_s=2.0, num_requests=1000)  # the window ends first
    assert b[-1] < 3.0 and len(b) < 1000
