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

from .cli_options import (
    DEFAULT_MODEL,
    add_codec_decode_argument,
    add_device_argument,
    add_model_arguments,
    add_sampling_arguments,
    engine_config_from_args,
    sampling_from_args,
)
from .dependencies import MissingDependencyError, is_own_module, missing_dependency

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


def cmd_synth(args: argparse.Namespace) -> int:
    from .engine.engine import Engine
    from .errors import InvalidRequestError

    # The line break that ends piped text (echo, here-documents) is not meant to be spoken; kept, it
    # changes the tokens ("." + "\n" -> ".\n") from those of the same text given as an argument.
    text = args.text if args.text not in (None, "-") else sys.stdin.read().rstrip("\r\n")
    from .server.segmenter import long_form_pieces

    # A long text is cut as the server cuts a long input (paragraphs, then sentences).
    pieces = long_form_pieces(text, args.long_form_chars) or [text]
    model = _load_model(args)
    clone = _reference_voice(args, model) if args.ref_audio else None
    # The serving engine with one slot: the same walks, stop rules and runaway guard as the server.
    engine = Engine(model, engine_config_from_args(args, max_streams=1, max_queue=1))
    try:
        try:
            requests = [_prepare_piece(args, model, engine, piece, i, clone) for i, piece in enumerate(pieces)]
        except InvalidRequestError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if model.instruct_ignored(args.instruct):
            log.warning("--instruct is ignored: the %s model does not take instructions", model.config.size_label)
        start = time.perf_counter()
        result = _generate_pieces(engine, requests, round(args.long_form_pause * model.sample_rate), args.quiet)
    finally:
        engine.close()
    if result.error is not None:
        print(f"error: synthesis failed: {result.error}", file=sys.stderr)
        return 1
    _write_synth_output(args, result, model.sample_rate, time.perf_counter() - start)
    return 0


def _prepare_piece(args: argparse.Namespace, model, engine, text: str, index: int, clone):
    """Piece `index`'s engine request: the command's voice and sampling, seeded `seed + index`."""
    from .models.qwen3_tts.frontend import SynthesisRequest
    from .server.long_form import piece_seed

    sampling = sampling_from_args(args)
    overrides = {**sampling.overrides(), "seed": piece_seed(sampling.seed, index)}
    synthesis = SynthesisRequest(
        text,
        args.voice,
        args.language,
        args.instruct,
        args.layout,
        clone=clone,
        x_vector_only=args.x_vector_only,
        **overrides,
        greedy=args.greedy,
    )  # fmt: skip
    return model.prepare(synthesis, engine.config.max_input_tokens)


@dataclass
class SynthResult:
    """What the pieces of one `cadence synth` produced."""

    audio: object  # float32 samples, the pieces joined by their pauses
    frames: int
    finish_reasons: list[str]  # one a piece, in order
    runaway_causes: list[str]
    error: str | None = None


def _generate_pieces(engine, requests: list, pause_samples: int, quiet: bool) -> SynthResult:
    """Run the requests one after another, a progress bar of frames (and pieces, if several)."""
    import queue

    import numpy as np
    from tqdm import tqdm

    pcm, reasons, causes, frames = [], [], [], 0
    for index, request in enumerate(requests):
        if index:
            pcm.append(np.zeros(pause_samples, np.float32))
        chunks: queue.Queue = queue.Queue()
        engine.submit(request, chunks.put)
        desc = f"piece {index + 1}/{len(requests)}" if len(requests) > 1 else "generating"
        last = None
        with tqdm(desc=desc, unit="frame", disable=quiet) as bar:
            while last is None or not last.is_final:
                last = chunks.get()
                pcm.append(last.pcm)
                bar.update(last.num_frames)
        if last.finish_reason == "error":
            return SynthResult(None, frames, reasons, causes, error=last.error)
        frames += last.frame_end
        reasons.append(last.finish_reason)
        if last.runaway_cause:
            causes.append(last.runaway_cause)
    return SynthResult(np.concatenate(pcm), frames, reasons, causes)


def _write_synth_output(args: argparse.Namespace, result: SynthResult, sample_rate: int, elapsed: float) -> None:
    from .audio import write_wav

    write_wav(args.output, result.audio, sample_rate)
    seconds = result.audio.size / sample_rate
    reasons = ",".join(dict.fromkeys(result.finish_reasons))  # one word when every piece ended alike
    cause = f" ({', '.join(result.runaway_causes)})" if result.runaway_causes else ""
    pieces = len(result.finish_reasons)
    in_pieces = f" in {pieces} pieces" if pieces > 1 else ""
    print(
        f"wrote {args.output}: {result.frames} frames{in_pieces}, {seconds:.2f} s of audio at {sample_rate} Hz "
        f"({result.audio.size} samples), finish_reason={reasons}{cause}, {elapsed:.1f} s wall "
        f"(RTF wall/audio {elapsed / max(seconds, 1e-9):.2f})",
        file=sys.stderr,
    )


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


def _kernel_profile(value: str) -> str:
    """--kernel-profile checked as it is parsed: a bad one is a usage error, not a traceback."""
    from .kernels.config import KernelConfig

    try:
        KernelConfig(profile=value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _add_synth_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "synth",
        help="synthesise one utterance to a WAV file",
        description="Synthesise TEXT (or standard input) and write a 24 kHz WAV file: with a preset voice "
        "(CustomVoice), a voice cloned from --ref-audio (Base), or one described by --instruct (VoiceDesign).",
    )
    p.add_argument("text", nargs="?", help="text to speak; '-' or nothing reads standard input")
    p.add_argument(
        "--model",
        "-m",
        default=DEFAULT_MODEL,
        help=f"checkpoint directory or Hugging Face id (default: {DEFAULT_MODEL})",
    )
    add_device_argument(p)
    add_model_arguments(p)
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
        "--long-form-chars", type=int, default=600, metavar="N", help="a text longer than N characters is spoken "
        "as pieces of at most N, cut at paragraphs and sentences, one after another into the one WAV file, as the "
        "server speaks a long input (default 600; 0: never cut)"
    )  # fmt: skip
    p.add_argument(
        "--long-form-pause", type=float, default=0.25, metavar="S", help="seconds of silence between the pieces "
        "(default 0.25)"
    )  # fmt: skip
    p.add_argument(
        "--kernel-profile", type=_kernel_profile, metavar="auto|h100|h200|PATH", help="the tile table the GPU "
        "kernels choose their launches from (default auto: the table of the GPU's family; see cadence serve --help)"
    )  # fmt: skip
    add_codec_decode_argument(p)
    sampling = add_sampling_arguments(p)
    sampling.add_argument(
        "--no-runaway-guard", dest="runaway_guard", action="store_false", help="let the generation run to its end "
        "of speech or --max-new-tokens, as the official package does; by default it stops (finish_reason runaway) "
        "at more frames than the text can need, a loop of repeating codes, or seconds of silence"
    )  # fmt: skip
    p.set_defaults(func=cmd_synth)


def _add_checkpoint_command(sub: argparse._SubParsersAction) -> None:
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
