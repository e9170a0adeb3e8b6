#!/usr/bin/env bash
# Works anywhere, no download: write a small random-weight checkpoint from the reference config and
# tokenizer files (../shared/reference, or $CADENCE_SKELETON: a directory or Hugging Face id), then
# synthesise a sentence with it. Random weights make noise-like audio of the right length and
# format; pass a real checkpoint to `cadence synth --model` for speech.
set -euo pipefail
cd "$(dirname "$0")/.."
skeleton="${CADENCE_SKELETON:-../shared/reference/Qwen3-TTS-12Hz-0.6B-CustomVoice}"
[ -d "$skeleton" ] || skeleton="Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
mkdir -p checkpoints
[ -f checkpoints/demo-tiny/model.safetensors ] || \
    cadence checkpoint random --from "$skeleton" --preset tiny --out checkpoints/demo-tiny --seed 0
cadence synth "Hello from cadence, a streaming speech server." --model checkpoints/demo-tiny \
    --voice ryan --language english --max-new-tokens 40 -o demo.wav
