"""The official implementation (qwen-tts 0.1.1) as a test oracle.

`import qwen_tts` always imports the 25 Hz tokenizer, whose module level does `import sox`,
`import onnxruntime` and `import torchaudio.compliance.kaldi`; only its x-vector extractor uses
them, and the 12 Hz path never does. Inert stand-ins are put in `sys.modules` after transformers is
imported, so transformers' own availability checks still see the real (absent) packages.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch


def _stub_unused_audio_modules() -> None:
    import transformers  # noqa: F401  (first, so its import-time checks see the real environment)

    for name in ("sox", "onnxruntime", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
        if name not in sys.modules:
            try:
                __import__(name)
            except Exception:
                stub = types.ModuleType(name)
                stub.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
                sys.modules[name] = stub
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]


def import_qwen_tts():
    pytest.importorskip("transformers", reason="official oracle needs the test extra (transformers==4.57.3)")
    _stub_unused_audio_modules()
    try:
        import qwen_tts
    except ImportError as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"official qwen-tts package not importable: {e}")
    return qwen_tts


@dataclass
class OfficialRun:
    codes: list[torch.Tensor]
    code0_scores: list[torch.Tensor] = field(default_factory=list)  # per step [B, vocab], processed
    cp_scores: list[list[torch.Tensor]] = field(default_factory=list)  # per frame: 15 x [B, cp_vocab]
    prefill: torch.Tensor | None = None  # [B, L, hidden] left-padded talker input embeddings
    trailing: torch.Tensor | None = None  # [B, T, hidden] trailing text embeddings (padded with tts_pad)


class Official:
    """A loaded official model (fp32, CPU, sdpa) with hooks that record what it decided from."""

    def __init__(self, path: Path):
        qwen_tts = import_qwen_tts()
        self.wrapper = qwen_tts.Qwen3TTSModel.from_pretrained(str(path), dtype=torch.float32, device_map="cpu")
        self.model = self.wrapper.model
        self._cp_log: list[list[torch.Tensor]] | None = None
        self._install_hooks()

    def _install_hooks(self) -> None:
        talker = self.model.talker
        cp = talker.code_predictor
        cp_generate = cp.generate
        talker_generate = talker.generate

        def recording_cp_generate(*args, **kwargs):
            kwargs.update(output_scores=True, return_dict_in_generate=True)
            out = cp_generate(*args, **kwargs)
            if self._cp_log is not None:
                self._cp_log.append([s.float().clone() for s in out.scores])
            return out

        def recording_talker_generate(*args, **kwargs):
            kwargs.update(output_scores=True)
            self.last_prefill = kwargs["inputs_embeds"].float().clone()
            self.last_trailing = kwargs["trailing_text_hidden"].float().clone()
            out = talker_generate(*args, **kwargs)
            self.last_talker_scores = [s.float().clone() for s in out.scores]
            return out

        cp.generate = recording_cp_generate
        talker.generate = recording_talker_generate

    def ids(self, text: str) -> list[int]:
        return self.wrapper.processor(text=text, return_tensors="pt")["input_ids"][0].tolist()

    @torch.no_grad()
    def generate(
        self,
        texts: list[str],
        speakers: list[str] | None,
        languages: list[str],
        frames: int,
        streaming_layout: bool,
        instructs: list[str | None] | None = None,
        clones: list | None = None,
    ) -> OfficialRun:
        """Greedy codes; `frames` + 1 official max_new_tokens gives at most `frames` frames.
        clones: the official VoiceClonePromptItems (Base), one per text."""
        self._cp_log = []
        w = self.wrapper
        input_ids = w._tokenize_texts([w._build_assistant_text(t) for t in texts])
        instructs = instructs or [None] * len(texts)
        instruct_ids = [w._tokenize_texts([w._build_instruct_text(i)])[0] if i else None for i in instructs]
        clone_kwargs = {}
        if clones is not None:
            ref_ids = [w._tokenize_texts([w._build_ref_text(c.ref_text)])[0] if c.ref_text else None for c in clones]
            clone_kwargs = dict(voice_clone_prompt=w._prompt_items_to_voice_clone_prompt(clones), ref_ids=ref_ids)
        codes, _ = self.model.generate(
            input_ids=input_ids,
            instruct_ids=instruct_ids,
            languages=languages,
            speakers=speakers,
            non_streaming_mode=not streaming_layout,
            max_new_tokens=frames + 1,
            do_sample=False,
            subtalker_dosample=False,
            repetition_penalty=1.05,
            **clone_kwargs,
        )
        run = OfficialRun(
            [c.cpu() for c in codes], self.last_talker_scores, self._cp_log, self.last_prefill, self.last_trailing
        )
        self._cp_log = None
        return run

    def clone_prompt(self, wav, sample_rate: int, ref_text: str | None, x_vector_only: bool):
        """The official VoiceClonePromptItem of reference audio (numpy float32 at `sample_rate`)."""
        return self.wrapper.create_voice_clone_prompt((wav, sample_rate), ref_text, x_vector_only)[0]

    @torch.no_grad()
    def encode(self, wav, sample_rate: int) -> torch.Tensor:
        """Codec codes [frames, 16] of reference audio, as the official speech tokenizer encodes it."""
        return self.model.speech_tokenizer.encode(wav, sr=sample_rate).audio_codes[0].cpu()

    @torch.no_grad()
    def x_vector(self, wav) -> torch.Tensor:
        """The speaker embedding of 24 kHz float32 audio."""
        return self.model.extract_speaker_embedding(wav, 24000).float().cpu()

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        wavs, sr = self.model.speech_tokenizer.decode([{"audio_codes": codes}])
        assert sr == 24000
        return torch.from_numpy(wavs[0]).float()
