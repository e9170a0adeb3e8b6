#!/usr/bin/env bash
# Install cadence with its test dependencies and run the test suite (CPU is enough; 20 to 35 minutes
# on 2 cores, a ~2.2 GB virtualenv with the CPU build of torch).
#   bash scripts/test.sh                            # the CI suite: every test but the slow, gpu and real ones
#   bash scripts/test.sh -m "not gpu and not real"  # the CI suite and the slow full-size checkpoint tests
#   bash scripts/test.sh tests/test_cli.py -x       # arguments go to pytest and replace the default selection
# Uses the active virtualenv, or creates ./.venv. Needs no network beyond the package indexes and
# nothing beside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
    [ -d .venv ] || python3 -m venv .venv
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi
python -m pip install -q --upgrade pip
# A torch already installed (the README's CPU or CUDA build) is kept. Otherwise torch comes from the
# configured index: on a plain PyPI machine that is the CUDA build (several GB); install the CPU
# build first (README) where no GPU is used.
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
# ray: tests/test_ray_serve.py runs cadence on a local Ray cluster (Ray needs no torch: the one above stays).
python -m pip install -q -e ".[test,ray]"
# Triton, which the CPU build of torch lacks (a CUDA build brings its own): the kernels' tests run
# their Triton kernels on a CPU through its interpreter (TRITON_INTERPRET=1, set below where no GPU
# is), against the kernels' PyTorch definitions, and the launch-choice snapshot needs its tile
# arithmetic. Triton 3.6's interpreter turns one-element arrays into ints, which NumPy 2.4 refuses.
if python -c "import sys, torch; sys.exit(torch.version.cuda is not None)"; then
    python -m pip install -q "triton==3.6.0" "numpy>=1.26,<2.4"
fi
# The official implementation is the test oracle. --no-deps: it pins gradio, torchaudio, sox and
# onnxruntime, which its 12 Hz path never uses (tests/official.py stubs them).
python -m pip install -q --no-deps "qwen-tts==0.1.1"
# The playground's browser test drives the system's Chromium: install Debian's where this machine can
# (root with apt); elsewhere that one test says why it skips.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } >/dev/null 2>&1 \
        || echo "could not install chromium: tests/test_playground.py will skip"
fi
ruff check cadence tests benchmarks scripts
# Without a GPU the Triton kernels' tests run in Triton's interpreter.
python -c "import torch; assert not torch.cuda.is_available()" 2>/dev/null && export TRITON_INTERPRET=1
if [ "$#" -eq 0 ]; then set -- -m "not slow and not gpu and not real"; fi
python -m pytest -q "$@"
