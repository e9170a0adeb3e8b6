#!/usr/bin/env bash
# What one device call runs on the H200 (see docs/benchmarks.md). Usage, from the repo root there:
#   bash benchmarks/h200.sh PHASE... (the phases are the cases below)
# Expects the reference config/tokenizer files in .ref/ (carried) and writes logs under $OUT.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 CADENCE_REFERENCE_DIR=$PWD/.ref
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
full=/tmp/full06b
need_full() {
    [ -f $full/model.safetensors ] || python3 -m cadence.cli -q checkpoint random --from .ref/Qwen3-TTS-12Hz-0.6B-CustomVoice \
        --preset full --out $full --seed 0
}
quiet() { grep -Pv 'INFO(?!.*captured)'; }  # the INFO lines, but those of graph capture (build time)
kernel_tests="tests/test_kernels.py tests/test_attention_kernels.py tests/test_linear_kernels.py tests/test_sampling_kernels.py"
server_wheels() {
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PYTHONPATH
}
for phase in "$@"; do
  case $phase in
    tests)
      python3 -m pytest -q -p no:cacheprovider $kernel_tests tests/test_fast_step.py -x 2>&1 | tee "$OUT/tests.log" | tail -25 ;;
    bench)
      need_full
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
        --batches 1,8,32,64,128,256 --context 500 --prompt-lengths 60,250 --codec-streams 1,8,64 --codec-frames 1,2,8 \
        --steps 20 --warmup 5 --kv-gb 40 --json "$OUT/engine_steps_triton.json" 2>&1 | tee "$OUT/bench.log" | quiet ;;
    codecdtype)  # issue 5: the codec in bf16 / fp16 (SnakeBeta in fp32): speed and error against fp32
      need_full
      for dt in bfloat16 float16; do
        python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --codec-dtype $dt \
          --batches 1 --context 64 --prompt-lengths 60 --codec-streams 1,8,64 --codec-frames 1,2,8 \
          --steps 20 --warmup 5 --kv-gb 20 --json "$OUT/engine_steps_codec_$dt.json" 2>&1 | quiet
      done ;;
    profile)  # kernel breakdown of one decode walk and two codec chunks (1x1, 64x8), eager launches
      need_full
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --batches 1 \
        --context 64 --prompt-lengths 60 --codec-streams 64 --codec-frames 8 --steps 3 --warmup 1 --kv-gb 20 \
        --profile 2>&1 | quiet | tee "$OUT/profile.log" | tail -80 ;;
    profile256)  # issue 4: kernel breakdown of one decode walk at batch 256 (the batch that bounds saturation)
      need_full
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --batches 256 \
        --context 500 --prompt-lengths 60 --codec-streams 1 --codec-frames 1 --steps 3 --warmup 1 --kv-gb 40 \
        --profile 2>&1 | quiet | tee "$OUT/profile256.log" | tail -80 ;;
    profile256ab)  # perf-notes #64: profile256 of this tree ("new") and of each tree in TREES (NAME=DIR ...)
      need_full
      for tree in new=. ${TREES:-}; do
        name=${tree%%=*}; dir=${tree#*=}
        echo "== $name ($dir)"
        (cd "$dir" && PYTHONPATH=$PWD timeout 240 python3 benchmarks/engine_steps.py --model $full --device cuda \
          --attention-backend triton --batches 256 --context 500 --prompt-lengths 60 --codec-streams 1 \
          --codec-frames 1 --steps 3 --warmup 1 --kv-gb 20 --profile 2>&1 | quiet | tee "$OUT/profile256_$name.log" \
          | sed -n '/decode walk/,/Self CUDA/p' | head -24)
      done ;;
    skinny)  # issue 4: tile sweep of the weight-streaming GEMM on the decode shapes, against cuBLAS
      python3 benchmarks/skinny_linear.py --rows 1 16 --json "$OUT/skinny_linear.json" 2>&1 | tee "$OUT/skinny.log" | tail -24 ;;
    attention)  # issue 4: launch-choice sweep of the paged attention over one walk's 28 layers
      python3 benchmarks/paged_attention.py --batches 1 8 64 128 256 --context 500 --json "$OUT/paged_attention.json" \
        2>&1 | tee "$OUT/attention.log" | tail -12 ;;
    walks)  # issue 4: decode walks (layer kernels) at 1-256 streams and prefill + first frame: the issue's table
      need_full
      timeout 500 python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
        --batches 1,8,16,64,256 --context 500 --prompt-lengths 60 --codec-streams 1 --codec-frames 1 --steps 20 \
        --warmup 5 --kv-gb 40 --json "$OUT/engine_steps_walks.json" 2>&1 | quiet | tail -16 ;;
    walkab)  # changes A/B'd in one call: decode walks of this tree ("new") and of the trees in TREES (NAME=DIR
      # ..., e.g. `git archive` of earlier commits, carried; NAME=DIR,VAR=VALUE,... runs it with those
      # environment variables: `sync=.,CUDA_LAUNCH_BLOCKING=1`), interleaved so drift shows; gpu
      # tests first. Every tree runs this tree's engine_steps.py (one harness) on its own package. Each
      # walk builds an engine with graphs for the timed batches only (--graph-buckets; ~30-45 s; the
      # engine's every bucket with WALKAB_ALL_BUCKETS=1, ~100 s), so a call fits ~8 walks:
      # WALKAB_ROUNDS (default "1 2"), WALKAB_TESTS=0 skips the tests, WALKAB_DECODE_ONLY=1 skips the
      # prefill and codec timings (their engine's build: ~10 s a walk), WALKAB_CUDNN_LIMIT sets
      # cudnn.benchmark_limit in every tree's process (a sitecustomize: the codec's capture, not the walk).
      # The walks' JSON files go into one, $OUT/walkab_b<batches>.json ({"NAME_ROUND": walk}), since a call
      # returns at most 8 files (session 38 lost walks that way)
      need_full
      walk_dir=$(mktemp -d /tmp/walkab.XXXX)
      [ "${WALKAB_TESTS:-1}" = 0 ] || { timeout -k 10 -s INT 150 python3 -m pytest -q -x -p no:cacheprovider \
          $kernel_tests -k "${WALKAB_KERNEL_TESTS:-not cuda}"
        timeout -k 10 -s INT 240 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/test_fast_step.py; } 2>&1 \
        | tee "$OUT/walkab_tests.log" | grep -E "passed|failed|error|Error" | tail -8
      site=""
      if [ -n "${WALKAB_CUDNN_LIMIT:-}" ]; then
        site=/tmp/walkab_site; mkdir -p $site
        echo "import torch; torch.backends.cudnn.benchmark_limit = ${WALKAB_CUDNN_LIMIT}" > $site/sitecustomize.py
      fi
      harness=$PWD/benchmarks/engine_steps.py batches=${WALKAB_BATCHES:-1,4,64}
      buckets="--graph-buckets $batches"; [ "${WALKAB_ALL_BUCKETS:-0}" = 1 ] && buckets=""
      sections="--prompt-lengths 60 --codec-streams 1 --codec-frames 1"
      [ "${WALKAB_DECODE_ONLY:-0}" = 1 ] && sections="--prompt-lengths= --codec-streams="
      for round in ${WALKAB_ROUNDS:-1 2}; do for tree in new=. ${TREES:-}; do
        name=${tree%%=*}; spec=${tree#*=}; dir=${spec%%,*}; envs=""
        [ "$spec" = "$dir" ] || envs=${spec#*,}
        echo "== $name ($dir${envs:+, $envs}), round $round"
        log=/tmp/walk_${name}_$round.log  # not under $OUT, which returns at most 8 files
        (cd "$dir" && env ${envs//,/ } PYTHONPATH=$PWD${site:+:$site} timeout 200 python3 $harness --model $full \
          --device cuda --attention-backend triton --batches $batches $buckets --context 500 \
          $sections --steps 20 --warmup 5 --kv-gb 20 \
          --json "$walk_dir/${name}_$round.json" > $log 2>&1) || { echo "  walk failed (exit $?; 124: timed out):"; tail -6 $log; }
        quiet < $log | sed -n "/^ *batch/,/tokens:/p"
      done; done
      python3 - "$walk_dir" "$OUT/walkab_b${batches//,/_}.json" <<'PY'
import json, pathlib, sys
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
walks = json.loads(dst.read_text()) if dst.exists() else {}  # a phase may call walkab more than once
walks.update({f.stem: json.loads(f.read_text()) for f in sorted(src.glob("*.json"))})
dst.write_text(json.dumps(walks, indent=1))
PY
      ;;
    graphmem)  # perf-notes #62: graph memory with every capture on one stream, and an engine at the default KV size
      need_full
      timeout -k 10 -s INT 300 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/test_graph_capture.py \
        tests/test_codec_graphs.py tests/test_fast_step.py 2>&1 | tee "$OUT/graphmem_tests.log" | tail -4
      timeout 300 python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
        --batches 1,64 --context 500 --prompt-lengths 60 --codec-streams 1,64 --codec-frames 1,8 --steps 20 --warmup 5 \
        --json "$OUT/engine_steps_graphmem.json" 2>&1 | grep -Pv 'INFO(?!.*captured)' | tail -24 ;;
    profile64)  # issue 4: kernel breakdown of one decode walk at batch 64 (issue 4's 4 ms target)
      need_full
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --batches 64 \
        --context 500 --prompt-lengths 60 --codec-streams 1 --codec-frames 1 --steps 3 --warmup 1 --kv-gb 20 \
        --profile 2>&1 | quiet | tee "$OUT/profile64.log" | tail -40 ;;
    pdl)  # issue 4: programmatic dependent launch (perf-notes #27): its gpu tests, then the walk with it
      need_full
      timeout -s INT 300 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py \
        tests/test_attention_kernels.py tests/test_fast_step.py 2>&1 | tee "$OUT/pdltests.log" | tail -8
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --pdl-max-rows 256 \
        --batches 1,8,64,128,256 --context 500 --prompt-lengths 60,250 --codec-streams 1,64 --codec-frames 1,8 \
        --steps 20 --warmup 5 --kv-gb 40 --json "$OUT/engine_steps_pdl.json" 2>&1 | tee "$OUT/pdl.log" | quiet ;;
    precision)  # issue 4: bf16 against fp32 on the GPU (logits error, greedy agreement)
      need_full
      python3 benchmarks/precision.py --model $full --device cuda --frames 32 --json "$OUT/precision_h200.json" \
        2>&1 | quiet ;;
    eager)
      need_full
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend sdpa --enforce-eager \
        --batches 1,8,64 --context 500 --prompt-lengths 60 --codec-streams 1 --codec-frames 1 --steps 5 --warmup 2 \
        --kv-gb 20 --json "$OUT/engine_steps_sdpa.json" 2>&1 | tee "$OUT/eager.log" | quiet ;;
    load)
      need_full
      python3 benchmarks/engine_load.py --model $full --device cuda --streams 256 --frames 150 --ttfa-runs 20 \
        --kv-gb 40 --json "$OUT/engine_load.json" 2>&1 | tee "$OUT/load.log" | quiet ;;
    baselines)  # issue 4: official qwen-tts and faster-qwen3-tts against cadence (wheels: benchmarks/baseline_wheels.sh)
      need_full
      python3 -m pip install -q --no-index --no-deps --target /tmp/official .whl/official/*.whl
      python3 -m pip install -q --no-index --no-deps --target /tmp/faster .whl/faster/*.whl
      for impl in cadence official faster; do
        site=""; [ $impl = official ] && site=/tmp/official; [ $impl = faster ] && site=/tmp/faster
        PYTHONPATH=$site:$PYTHONPATH python3 benchmarks/baselines.py --impl $impl --model $full --frames 60 \
          2>"$OUT/baseline_$impl.err" | tee -a "$OUT/baselines.jsonl"
        tail -3 "$OUT/baseline_$impl.err"
      done ;;
    gputests)  # every gpu-marked test (the second GPU's where there is one)
      server_wheels
      # SIGINT on timeout: pytest then prints where it was and a summary instead of dying silently.
      { timeout -s INT 360 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/test_codec_graphs.py \
          tests/test_fast_step.py tests/test_engine_variants.py tests/test_disaggregated.py tests/test_engine_host_waits.py
        timeout -s INT 180 python3 -m pytest -q -p no:cacheprovider $kernel_tests; } 2>&1 | tee "$OUT/gputests.log" | tail -25 ;;
    codec)  # issue 5: the streaming codec alone (fp32), per (streams, frames) shape
      need_full
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --batches 1 \
        --context 64 --prompt-lengths 60 --codec-streams 1,8,64 --codec-frames 1,2,8 --steps 20 --warmup 5 \
        --kv-gb 20 --json "$OUT/engine_steps_codec_float32.json" 2>&1 | quiet ;;
    codecexact)  # issue 5: the codec and saturation in exact fp32
      need_full
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --no-codec-tf32 \
        --batches 1 --context 64 --prompt-lengths 60 --codec-streams 1,8,64 --codec-frames 1,2,8 --steps 20 \
        --warmup 5 --kv-gb 20 --json "$OUT/engine_steps_codec_exact.json" 2>&1 | quiet
      python3 benchmarks/engine_load.py --model $full --device cuda --streams 256 --frames 150 --ttfa-runs 5 \
        --kv-gb 40 --no-codec-tf32 --json "$OUT/engine_load_codec_exact.json" 2>&1 | quiet ;;
    lockstep)  # issue 5: 256 streams in lockstep with chunks growing by schedule alone (deadline off), against `load`
      need_full
      python3 benchmarks/engine_load.py --model $full --device cuda --streams 256 --frames 150 --ttfa-runs 5 \
        --kv-gb 40 --chunk-deadline 0 --json "$OUT/engine_load_no_deadline.json" 2>&1 | quiet ;;
    pipeline)  # issue 5: codec chunks overlapping the talker's step, off then on, in one engine
      need_full
      python3 benchmarks/engine_load.py --model $full --device cuda --streams 256 --frames 150 --ttfa-runs 20 \
        --kv-gb 40 --stagger 8 --pipeline-codec both --json "$OUT/engine_load_pipeline.json" 2>&1 | quiet ;;
    deadline)  # issue 5: the deadline-aware chunk policy against growth alone, cadence serve under load
      need_full; server_wheels
      for d in 0 0.2; do
        python3 benchmarks/scaleout.py --out /tmp/deadline --duration 20 --label deadline-$d --clients 2 \
          --concurrency 128 256 -- $full --device cuda:0 --max-streams 256 --kv-cache-memory 40 --chunk-deadline $d
        cp /tmp/deadline/deadline-$d/summary.json "$OUT/chunk-deadline-$d.json"
      done ;;
    disaggregated)  # issue 8, on two GPUs: the disaggregated deployment alone (see scaleout)
      need_full; server_wheels
      python3 benchmarks/scaleout.py --out /tmp/scaleout --duration 20 --label disaggregated --clients 2 \
        --concurrency 64 256 -- $full --device cuda:0 --codec-device cuda:1 --max-streams 256 --kv-cache-memory 40
      cp /tmp/scaleout/disaggregated/summary.json "$OUT/scaleout-disaggregated.json" ;;
    scaleout)  # issue 8, on two GPUs: 1 replica (colocated), 2 replicas, Talker/Codec on two GPUs
      need_full; server_wheels
      so="python3 benchmarks/scaleout.py --out /tmp/scaleout --duration 20"
      common="--max-streams 256 --kv-cache-memory 40"
      $so --label one-replica --clients 2 --concurrency 64 256 -- $full --device cuda:0 $common
      $so --label two-replicas --clients 4 --concurrency 64 256 512 -- $full --replicas 2 --device cuda $common
      $so --label disaggregated --clients 2 --concurrency 64 256 -- $full --device cuda:0 --codec-device cuda:1 $common
      tar czf "$OUT/scaleout.tgz" -C /tmp/scaleout . ;;
    sweep)  # cadence serve on the GPU, measured from outside by cadence bench (issue 7)
      need_full; server_wheels
      name=Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice
      mkdir -p /tmp/sweep
      python3 -m cadence.cli serve $full --served-model-name $name --device cuda --port 8000 --max-streams 256 \
        --max-queue 2048 --kv-cache-memory 40 > /tmp/sweep/serve.log 2>&1 &
      server=$!
      for _ in $(seq 1 240); do curl -sf localhost:8000/ready >/dev/null && break; sleep 1; done
      curl -s localhost:8000/v1/audio/speech -H 'Content-Type: application/json' -o /tmp/sweep/hello.wav -w '%{http_code} %{size_download} bytes\n' \
        -d "{\"model\":\"$name\",\"input\":\"Hello from cadence.\",\"voice\":\"ryan\",\"response_format\":\"wav\",\"max_new_tokens\":25}"
      common="--url http://127.0.0.1:8000 --model $name --voice ryan --format pcm --languages en --fixed-frames auto --no-progress"
      python3 -m cadence.cli bench $common --concurrency 1 8 32 128 256 --num-requests 256 --duration 15 \
        --output-dir /tmp/sweep/closed --label cadence-h200-closed 2>&1 | tail -25
      python3 -m cadence.cli bench $common --rate 1 10 20 40 --duration 12 --warmup 2 \
        --output-dir /tmp/sweep/open --label cadence-h200-open 2>&1 | tail -25
      kill -TERM $server; wait $server; echo "serve exited $?"; tail -5 /tmp/sweep/serve.log
      tar czf "$OUT/sweep.tgz" -C /tmp/sweep . ;;  # one file back (the device tool returns at most 8)
    *)
      echo "h200.sh: no phase '$phase' (the phases are the cases of this script)" >&2
      exit 2 ;;
  esac
done
