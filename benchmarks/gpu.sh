#!/usr/bin/env bash
# What a GPU machine runs to reproduce the tables of docs/benchmarks.md. From the repository root:
#   bash benchmarks/gpu.sh PHASE [PHASE ...]
# Phases:
#   serve SIZE          start `cadence serve` on a full-size random checkpoint of SIZE (0.6b, 1.7b) in the
#                       background, pinned off the client's last two cores; waits for /ready
#   protocol SIZE       the served protocol (benchmarks/served_protocol.py) against that server; RATES and
#                       SECONDS (per rate) shorten it to fit a call: the full protocol is 1,000 requests a
#                       rate and three seeds
#   continuous          continuous against sentence WebSocket input (benchmarks/continuous_input.py)
#   stop                stop the server
#   gputests            every test marked gpu
#   steps [TREE ...]    decode and prefill walk timings of this tree and of each TREE (another checkout,
#                       carried), back to back, interleaved
# Expects the wheels the GPU image lacks in .whl/ (../shared/device/fetch-wheels.sh) and writes a few
# flat files under $OUT (a call returns at most eight).
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PORT=8123
SIZES_FROM=${SIZES_FROM:-}  # a folder of skeletons (config and tokenizer files) when the package has none
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -d .whl ] && ! python3 -c "import fastapi, av, zmq, msgspec" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
cores=$(nproc)

checkpoint() {  # checkpoint SIZE: a full-size random checkpoint, made once
    local size=$1 dir=/tmp/full-$1 name from
    name=Qwen3-TTS-12Hz-${size^^}-CustomVoice
    from=${SIZES_FROM:+$SIZES_FROM/}$name
    [ -n "$SIZES_FROM" ] || from=Qwen/$name
    [ -f $dir/model.safetensors ] || python3 -m cadence.cli -q checkpoint random --from "$from" --preset full \
        --out $dir --seed 0 >&2
    echo $dir
}

while [ $# -gt 0 ]; do
  phase=$1; shift
  case $phase in
    serve)
      size=${1:?serve SIZE}; shift
      ckpt=$(checkpoint "$size")
      start=$(date +%s)
      taskset -c 0-$((cores - 3)) python3 -m cadence.cli serve "$ckpt" --device cuda --port $PORT \
          --served-model-name protocol ${SERVE_ARGS:---max-streams 128} > /tmp/serve.log 2>&1 &
      until curl -sf localhost:$PORT/ready > /dev/null; do
          sleep 1; kill -0 $! 2>/dev/null || { tail -30 /tmp/serve.log; exit 1; }
      done
      echo "ready in $(( $(date +%s) - start )) s"
      grep -E "captured|graph|KV cache|loaded|warm-up" /tmp/serve.log | tail -8 ;;
    protocol)
      size=${1:?protocol SIZE}; shift
      python3 benchmarks/served_protocol.py --size "$size" --url http://127.0.0.1:$PORT --log /tmp/serve.log \
          --rates ${RATES:-1 4 10 20 40 60 80} --seeds ${SEEDS:-0 1 2} --requests ${REQUESTS:-1000} \
          ${SECONDS_PER_RATE:+--max-seconds $SECONDS_PER_RATE} --out /tmp/protocol-$size 2>&1 | tail -24
      cp /tmp/protocol-$size/protocol.md "$OUT/protocol-$size.md"
      cp /tmp/protocol-$size/protocol.json "$OUT/protocol-$size.json" ;;
    continuous)
      python3 benchmarks/continuous_input.py --url http://127.0.0.1:$PORT --rates 20 50 100 \
          --sessions ${SESSIONS:-3} --out /tmp/continuous 2>&1 | tail -10
      cp /tmp/continuous/continuous.md "$OUT/continuous.md" ;;
    stop)
      pkill -f "cadence.cli serve" && sleep 3
      grep -E "ERROR|Traceback" /tmp/serve.log | head -5
      tail -c 200000 /tmp/serve.log > "$OUT/serve.log" ;;
    gputests)
      timeout -s INT 300 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests 2>&1 | tee "$OUT/gputests.log" | tail -15 ;;
    steps)  # the rest of the arguments are the other trees
      trees=("new=." "$@"); set --
      ckpt=$(checkpoint 0.6b)
      for round in 1 2; do for tree in "${trees[@]}"; do
        name=${tree%%=*}; dir=${tree#*=}
        echo "== $name round $round"
        (cd "$dir" && PYTHONPATH=$PWD:${PYTHONPATH#*:} timeout 240 python3 benchmarks/engine_steps.py --model $ckpt \
            --device cuda --attention-backend triton --batches 1,8,64,256 --context 500 --prompt-lengths 70 \
            --codec-streams= --steps 20 --warmup 5 --kv-gb 30 --json "$OUT/steps_${name}_$round.json" 2>&1 \
            | grep -vE "INFO|Warning" | tail -12)
      done; done ;;
    *) echo "unknown phase $phase"; exit 2 ;;
  esac
done
