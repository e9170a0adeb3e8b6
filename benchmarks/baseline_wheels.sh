#!/usr/bin/env bash
# Download the wheels that `bash benchmarks/gpu.sh baselines` installs on the GPU machine (which reaches
# no registry) into .whl/official and .whl/faster; carry .whl with the device call.
#   official: qwen-tts 0.1.1 with the transformers, tokenizers and huggingface-hub versions it pins
#             (the GPU image's transformers 5.x, tokenizers 0.23 and huggingface-hub 1.x are too new)
#   faster:   faster-qwen3-tts 0.5.4 and the qwen-tts fork it builds on (the image's transformers 5.x fits)
# Usage, from the repo root: bash benchmarks/baseline_wheels.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
get() {
    local dir=$1; shift
    mkdir -p ".whl/$dir"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d ".whl/$dir" "$@"
}
get official qwen-tts==0.1.1 transformers==4.57.3 "tokenizers>=0.22,<0.23" "huggingface-hub>=0.34,<1.0"
get faster faster-qwen3-tts==0.5.4 "qwen-tts-hf>=0.1.1.post1,<0.2"
du -sh .whl/official .whl/faster
