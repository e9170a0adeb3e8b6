"""The `cadence` command line.

The commands that live with their feature (serve, bench, serve-ray) are imported only when chosen:
`cadence --help` lists them without loading torch or the server, and a feature whose dependencies
are missing says which package to install when it is run.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass

from .dependencies import MissingDependencyError, is_own_module, missing_dependency

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"

log = logging.getLogger("cadence")


@dataclass(frozen=True)
class FeatureCommand:
    module: str  # its register(subparsers) adds the command's parser
    help: str  # what `cadence --help` says of it (the module's parser says the same)


FEATURE_COMMANDS = {
    "serve": FeatureCommand("cadence.server.cli", "serve an OpenAI-compatible speech API"),
    "bench": FeatureCommand(
        "cadence.bench.cli", "load-test an OpenAI-compatible speech server and report TTFA, RTF, underruns"
    ),
    "serve-ray": FeatureCommand(
        "cadence.deploy.ray_serve", "serve the OpenAI-compatible speech API on a Ray cluster (Ray Serve)"
    ),
}


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        "-m",
        default=DEFAULT_MODEL,
        help=f"checkpoint directory or Hugging Face id (default: {DEFAULT_MODEL})",
    )
    p.add_argument(
        "--dummy-weights",
        action="store_true",
        help="random weights of --model's architecture, to try the command without weights (the audio is noise); "
        "the released Qwen/Qwen3-TTS-12Hz-* names work offline",
    )
    p.add_argument(
        "--dummy-preset",
        choices=["full", "tiny"],
        default="full",
        help="with --dummy-weights: full size, or a tiny model that runs fast on a CPU (default full)",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bf16", "fp32"],
        help="talker precision; auto = bf16 on GPU, fp32 on CPU (the codec always runs in fp32)",
    )
    p.add_argument(
        "--tokenizer-regex",
        default="qwen2",
        choices=["qwen2", "mistral"],
        help="pre-tokenizer regex: qwen2 (the model's training regex, default) or mistral (what the "
        "official package applies to local checkpoint directories under transformers 4.57.3)",
    )


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "sampling (defaults: the checkpoint's generation_config.json; the first codebook is the talker's, "
        "codebooks 1-15 the code predictor's, the subtalker_* settings of the official package)"
    )
    g.add_argument("--greedy", action="store_true", help="argmax everywhere (deterministic)")
    g.add_argument("--seed", type=int, help="random seed for sampling")
    g.add_argument(
        "--temperature", type=float, help="the first codebook's; 0: greedy for every codebook, unless the "
        "--subtalker-* options say otherwise"
    )  # fmt: skip
    g.add_argument("--top-k", type=int, help="the first codebook's (0: off)")
    g.add_argument("--top-p", type=float, help="the first codebook's")
    g.add_argument("--repetition-penalty", type=float, help="over the first codebook's earlier codes")
    g.add_argument("--subtalker-temperature", type=float, help="codebooks 1-15 (0: greedy)")
    g.add_argument("--subtalker-top-k", type=int, help="codebooks 1-15 (0: off)")
    g.add_argument("--subtalker-top-p", type=float, help="codebooks 1-15")
    g.add_argument(
        "--subtalker-dosample", action=argparse.BooleanOptionalAction, help="sample codebooks 1-15, or argmax them"
    )
    g.add_argument(
        "--max-new-tokens", type=int, help="most audio frames to generate (80 ms each; the official package's "
        "max_new_tokens counts the end-of-speech step too, so N there gives at most N-1 frames)"
    )  # fmt: skip
    g.add_argument(
        "--no-runaway-guard", dest="runaway_guard", action="store_false", help="let the generation run to its end "
        "of speech or --max-new-tokens, as the official package does; by default it stops (finish_reason runaway) "
        "at more frames than the text can need, a loop of repeating codes, or seconds of silence"
    )  # fmt: skip


def cmd_synth(args: argparse.Namespace) -> int:
    import queue

    import numpy as np
    from tqdm import tqdm

    from .audio import write_wav
    from .engine.config import EngineConfig, RunawayGuard
    from .engine.engine import Engine
    from .errors import InvalidRequestError

    # The line break that ends piped text (echo, here-documents) is not meant to be spoken; kept, it
    # changes the tokens ("." + "\n" -> ".\n") from those of the same text given as an argument.
    text = args.text if args.text not in (None, "-") else sys.stdin.read().rstrip("\r\n")
    model = _load_model(args)
    clone = _reference_voice(args, model) if args.ref_audio else None
    # The serving engine with one slot: the same walks, stop rules and runaway guard as the server.
    config = EngineConfig(
        max_streams=1,
        max_queue=1,
        kv_cache_memory=args.kv_cache_memory,
        runaway=RunawayGuard(enabled=args.runaway_guard),
        codec_decode=args.codec_decode,
    )
    engine = Engine(model, config)
    try:
        request = model.prepare(_synthesis_request(args, text, clone), engine.config.max_input_tokens)
    except InvalidRequestError as e:
        print(f"error: {e}", file=sys.stderr)
        engine.close()
        return 2
    if model.instruct_ignored(args.instruct):
        log.warning("--instruct is ignored: the %s model does not take instructions", model.config.size_label)

    start = time.perf_counter()
    chunks: queue.Queue = queue.Queue()
    engine.submit(request, chunks.put)
    pcm, last = [], None
    with tqdm(desc="generating", unit="frame", disable=args.quiet) as bar:
        while last is None or not last.is_final:
            last = chunks.get()
            pcm.append(last.pcm)
            bar.update(last.num_frames)
    engine.close()
    elapsed = time.perf_counter() - start
    if last.finish_reason == "error":
        print(f"error: synthesis failed: {last.error}", file=sys.stderr)
        return 1
    audio = np.concatenate(pcm)
    write_wav(args.output, audio, model.sample_rate)
    seconds = audio.size / model.sample_rate
    cause = f" ({last.runaway_cause})" if last.runaway_cause else ""
    print(
        f"wrote {args.output}: {last.frame_end} frames, {seconds:.2f} s of audio at {model.sample_rate} Hz "
        f"({audio.size} samples), finish_reason={last.finish_reason}{cause}, {elapsed:.1f} s wall "
        f"(RTF wall/audio {elapsed / max(seconds, 1e-9):.2f})",
        file=sys.stderr,
    )
    return 0


def _synthesis_request(args: argparse.Namespace, text: str, clone):
    """The request `cadence synth`'s options describe."""
    from .models.qwen3_tts.frontend import SynthesisRequest

    return SynthesisRequest(
        text, args.voice, args.language, args.instruct, args.layout, clone=clone, x_vector_only=args.x_vector_only,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, repetition_penalty=args.repetition_penalty,
        subtalker_temperature=args.subtalker_temperature, subtalker_top_k=args.subtalker_top_k,
        subtalker_top_p=args.subtalker_top_p, subtalker_dosample=args.subtalker_dosample,
        max_new_tokens=args.max_new_tokens, seed=args.seed, greedy=args.greedy,
    )  # fmt: skip


def _load_model(args: argparse.Namespace):
    """The checkpoint's weights, or with --dummy-weights random ones of its architecture, loaded by
    the model family that reads it."""
    from .models import registry

    source = registry.model_source(
        args.model,
        random_preset=args.dummy_preset if args.dummy_weights else None,
        device=args.device,
        dtype=args.dtype,
        tokenizer_regex=args.tokenizer_regex,
    )
    return registry.load_runtime(source)


def _reference_voice(args: argparse.Namespace, model):
    """--ref-audio: the cloned voice of a Base checkpoint (its voice encoders, on the model's device)."""
    from pathlib import Path

    from .audio_input import decode_audio
    from .models.qwen3_tts.voice_encoder import VoiceEncoder

    encoder = VoiceEncoder.from_pretrained(model.path, model.device)
    wav = decode_audio(Path(args.ref_audio).read_bytes(), encoder.sample_rate)
    return encoder.encode(wav, args.ref_text)


def cmd_checkpoint_random(args: argparse.Namespace) -> int:
    from .models.qwen3_tts.checkpoint import write_random_checkpoint

    out = write_random_checkpoint(
        args.skeleton, args.out, args.preset, args.seed, progress=not args.quiet, variant=args.variant
    )
    kind = f" {args.variant}" if args.variant else ""
    print(f"wrote a random-weight {args.preset}{kind} checkpoint to {out}", file=sys.stderr)
    return 0


def register_feature(command: str, subparsers: argparse._SubParsersAction) -> None:
    """Add a feature command's parser; MissingDependencyError names a package it lacks."""
    try:
        importlib.import_module(FEATURE_COMMANDS[command].module).register(subparsers)
    except ModuleNotFoundError as e:
        if is_own_module(e.name):
            raise
        raise missing_dependency(e, f"`cadence {command}`") from e


def _add_synth_command(sub: argparse._SubParsersAction) -> None:
    """`cadence synth`: one utterance to a WAV file."""
    p = sub.add_parser(
        "synth",
        help="synthesise one utterance to a WAV file",
        description="Synthesise TEXT (or standard input) and write a 24 kHz WAV file: with a preset voice "
        "(CustomVoice), a voice cloned from --ref-audio (Base), or one described by --instruct (VoiceDesign).",
    )
    p.add_argument("text", nargs="?", help="text to speak; '-' or nothing reads standard input")
    _add_model_args(p)
    p.add_argument("--voice", "-v", help="preset speaker of a CustomVoice model (ryan, vivian, ...; default ryan)")
    p.add_argument("--language", "-l", default="auto", help="auto, english, chinese, ... (default auto)")
    p.add_argument(
        "--instruct", help="style (1.7B CustomVoice; ignored with a warning on 0.6B) or the voice's description "
        "(VoiceDesign)"
    )  # fmt: skip
    p.add_argument("--ref-audio", metavar="FILE", help="Base: the voice to clone (wav, mp3, flac, ogg, ...)")
    p.add_argument("--ref-text", help="Base: the transcript of --ref-audio (enables the in-context mode)")
    p.add_argument(
        "--x-vector-only", action="store_true", default=None, help="Base: clone from the speaker embedding alone"
    )
    p.add_argument(
        "--layout",
        choices=["whole", "streaming"],
        help="whole text in the prompt or fed one token per frame (default: the official default of the "
        "model's type: streaming for Base, whole for the others)",
    )
    p.add_argument("--output", "-o", default="out.wav", help="WAV file to write (default out.wav)")
    p.add_argument("--kv-cache-memory", type=float, default=1.0, help="GB of KV cache for the request (default 1)")
    p.add_argument(
        "--codec-decode",
        choices=["exact", "chunked"],
        default="exact",
        help="exact (default): the decode of the whole utterance; chunked: past 300 frames (24 s) the official "
        "package's decode, which restarts the codec every 300 frames with 25 frames of context (bit-parity with "
        "qwen-tts; it differs from the exact audio there)",
    )
    _add_sampling_args(p)
    p.set_defaults(func=cmd_synth)


def _add_checkpoint_command(sub: argparse._SubParsersAction) -> None:
    """`cadence checkpoint random`: random-weight checkpoints."""
    p = sub.add_parser("checkpoint", help="checkpoint tools")
    csub = p.add_subparsers(dest="checkpoint_command", required=True)
    r = csub.add_parser(
        "random",
        help="write a random-weight checkpoint in the official layout",
        description="Write a checkpoint of random weights that both cadence and the official qwen-tts "
        "package load: the architecture of SKELETON, shrunk by --preset, as the family member --variant names. "
        "SKELETON is a released checkpoint's name (Qwen/Qwen3-TTS-12Hz-{0.6B,1.7B}-{CustomVoice,Base}, "
        "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign: their config and tokenizer files ship with cadence, so this works "
        "offline), a directory holding such files, or another Hugging Face id (only its small files are fetched).",
    )
    r.add_argument(
        "--from", dest="skeleton", required=True, help="a released checkpoint's name, a directory or a Hugging Face id"
    )
    r.add_argument("--preset", default="tiny", choices=["tiny", "full"], help="tiny (CPU tests) or full size")
    r.add_argument(
        "--variant",
        choices=["custom_voice", "base", "voice_design"],
        help="the checkpoint type to write (default: the skeleton's, or the one its name says). From a CustomVoice "
        "skeleton: base drops the speakers and adds the speaker encoder (voice cloning), voice_design drops the "
        "speakers",
    )
    r.add_argument("--out", required=True, help="directory to write")
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(func=cmd_checkpoint_random)


def build_parser(features: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The command line. `features`: the feature commands (FEATURE_COMMANDS) whose options are built,
    raising MissingDependencyError for a package one lacks; the others are only listed. None: all
    of them, those whose dependencies are missing only listed."""
    parser = argparse.ArgumentParser(
        prog="cadence",
        description="Streaming text-to-speech for the Qwen3-TTS 12 Hz models.",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars, warnings only")
    sub = parser.add_subparsers(dest="command", required=True)

    _add_synth_command(sub)
    _add_checkpoint_command(sub)
    for name, feature in FEATURE_COMMANDS.items():
        if features is None or name in features:
            try:
                register_feature(name, sub)
                continue
            except MissingDependencyError:
                if features is not None:
                    raise
        sub.add_parser(name, help=feature.help, add_help=False)  # listed; `cadence NAME` builds it in full
    return parser


def chosen_command(argv: list[str]) -> str | None:
    """The command word of `argv` (the top-level options take no values)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = chosen_command(argv)
    try:
        parser = build_parser([command] if command in FEATURE_COMMANDS else [])
    except MissingDependencyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as e:  # a package the command imports as it runs
        if is_own_module(e.name):
            raise
        print(f"error: {missing_dependency(e, f'`cadence {args.command}`')}", file=sys.stderr)
        return 1
    except Exception as e:  # user-facing errors (bad checkpoint, offline hub) as one clear line
        from .checkpoints import CheckpointError
        from .models.qwen3_tts.config import ConfigError

        if isinstance(e, (ConfigError, CheckpointError, FileNotFoundError)):
            print(f"error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
