"""Real weights: the released checkpoints as a user runs them (the `real` marker).

These run only where real weights are present: set CADENCE_REAL_CHECKPOINTS to checkpoint
directories or hub ids already in the local Hugging Face cache, comma-separated, e.g.

    CADENCE_REAL_CHECKPOINTS=Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice,/models/Qwen3-TTS-12Hz-1.7B-CustomVoice \\
        python -m pytest -m real tests/test_real_checkpoint.py

Nothing is downloaded. Elsewhere every test here skips, saying so; `bash scripts/test.sh` deselects
them. Each checkpoint is loaded once, in fp32 (on a GPU when there is one), and every preset voice
speaks a sentence in two languages with the checkpoint's own sampling defaults: the model must end
the utterance itself (EOS, the runaway guard off) within a sane length, and the audio must be
neither silent nor clipped. Where qwen-tts is installed, greedy codes must equal the official
package's.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from cadence.engine.config import EngineConfig, RunawayGuard
from cadence.engine.engine import Engine, Utterance
from cadence.engine.request import FinishReason
from cadence.engine.runaway import dbfs
from cadence.models.qwen3_tts.frontend import SynthesisRequest
from cadence.models.qwen3_tts.runtime import Qwen3TTS
from cadence.models.qwen3_tts.skeletons import shipped_skeleton

ENV = "CADENCE_REAL_CHECKPOINTS"
SENTENCES = {
    "english": "The quick brown fox jumps over the lazy dog.",
    "chinese": "今天天气很好，我们一起去公园散步吧。",
}
# The released CustomVoice speakers (all sizes have the same nine).
PRESETS = sorted(shipped_skeleton().read("config.json")["talker_config"]["spk_id"])
MAX_FRAMES = 400  # 32 s: far beyond any sentence above; hitting it is a failure to stop

pytestmark = pytest.mark.real


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "real_source" in metafunc.fixturenames:
        sources = [s.strip() for s in os.environ.get(ENV, "").split(",") if s.strip()]
        ids = [Path(s).name or s for s in sources] or ["no-real-checkpoint"]
        metafunc.parametrize("real_source", sources or [None], ids=ids, scope="module")


@pytest.fixture(scope="module")
def real_path(real_source: str | None) -> Path:
    if real_source is None:
        pytest.skip(f"no real weights here: set {ENV} to checkpoint directories or cached hub ids (README, Tests)")
    path = Path(real_source).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(real_source, local_files_only=True))
    except Exception as e:  # not in the cache: nothing is downloaded
        pytest.skip(f"{real_source} is neither a directory nor in the local hub cache ({type(e).__name__})")


@pytest.fixture(scope="module")
def real_model(real_path: Path) -> Qwen3TTS:
    return Qwen3TTS.from_pretrained(real_path, "cuda" if torch.cuda.is_available() else "cpu", "fp32")


@pytest.fixture(scope="module")
def real_engine(real_model: Qwen3TTS):
    config = EngineConfig(max_streams=2 * len(PRESETS), return_codes=True, runaway=RunawayGuard(enabled=False))
    engine = Engine(real_model, config)
    yield engine
    engine.close()


def needs_presets(model: Qwen3TTS) -> None:
    if model.config.tts_model_type != "custom_voice":
        pytest.skip(f"a {model.config.tts_model_type} checkpoint has no preset voices")


@pytest.fixture(scope="module")
def preset_utterances(real_model: Qwen3TTS, real_engine: Engine) -> dict[tuple[str, str], Utterance]:
    """Every preset voice in both languages, generated together, with the checkpoint's sampling."""
    needs_presets(real_model)

    async def all_of_them() -> list[Utterance]:
        requests = [
            SynthesisRequest(SENTENCES[lang], voice=voice, language=lang, max_new_tokens=MAX_FRAMES, seed=i)
            for i, (voice, lang) in enumerate((v, lang) for v in PRESETS for lang in SENTENCES)
        ]
        return await asyncio.gather(*(real_engine.synthesize_all(r) for r in requests))

    done = asyncio.run(all_of_them())
    return dict(zip([(v, lang) for v in PRESETS for lang in SENTENCES], done, strict=True))


def test_the_checkpoint_loads(real_model: Qwen3TTS):
    config = real_model.config
    assert config.tts_model_type in ("custom_voice", "base", "voice_design")
    assert real_model.sample_rate == 24000 and real_model.samples_per_frame == 1920
    assert all(torch.isfinite(p).all() for p in real_model.talker.parameters())


@pytest.mark.parametrize("language", list(SENTENCES))
@pytest.mark.parametrize("voice", PRESETS)
def test_each_preset_voice_speaks_and_stops(real_model: Qwen3TTS, preset_utterances, voice: str, language: str):
    utterance = preset_utterances[(voice, language)]
    assert utterance.finish_reason == FinishReason.STOP, f"{voice}/{language}: no EOS within {MAX_FRAMES} frames"
    tokens = len(real_model.tokenizer.encode(SENTENCES[language]))
    # speech runs ~3 frames (0.24 s) a text token; a sane length is well inside these bounds
    assert tokens <= utterance.frames <= 25 + 8 * tokens, (voice, language, utterance.frames, tokens)
    audio = utterance.pcm.astype(np.float32) / 32768
    assert dbfs(audio) > -40.0, f"{voice}/{language}: silent ({dbfs(audio):.1f} dBFS)"
    clipped = np.mean(np.abs(utterance.pcm.astype(np.int32)) >= 32767)
    assert clipped < 1e-3, f"{voice}/{language}: {clipped:.2%} of the samples clipped"


GREEDY_CASES = [("ryan", "english"), ("vivian", "chinese"), ("eric", "chinese")]


def test_greedy_codes_equal_the_official_package(real_path: Path, real_model: Qwen3TTS, real_engine: Engine):
    """Where qwen-tts is installed: greedy codes identical to its generate(), EOS step included."""
    from official import Official

    kind = real_model.config.tts_model_type
    if kind == "base":
        pytest.skip("a base checkpoint needs reference audio (tests/test_parity_variants.py covers cloning)")
    official = Official(real_path)
    if kind == "custom_voice":
        cases = [(SENTENCES[lang], voice, lang, None) for voice, lang in GREEDY_CASES]
    else:  # voice_design: the voice is described
        cases = [(SENTENCES["english"], None, "english", "A calm, deep male voice, speaking slowly.")]
    for text, voice, language, instruct in cases:
        ours = real_engine.synthesize_blocking(
            SynthesisRequest(
                text, voice=voice, language=language, instruct=instruct, greedy=True, max_new_tokens=MAX_FRAMES
            )
        )
        theirs = official.generate([text], [voice] if voice else None, [language], MAX_FRAMES, False, [instruct])
        assert ours.finish_reason == FinishReason.STOP
        assert torch.equal(torch.from_numpy(ours.codes), theirs.codes[0]), (voice, language)
