#!/usr/bin/env bash
# The GPU side of docs/benchmarks.md: each phase reproduces one of its tables. From the repository
# root, on a machine with an NVIDIA GPU:
#   bash benchmarks/gpu.sh PHASE [ARG] [PHASE [ARG] ...]
#   bash benchmarks/gpu.sh help
# Phases (the section of docs/benchmarks.md each reproduces in brackets):
#   decode              decode step at batch 1, 8, 16, 64, 256 and prefill + first frame (engine_steps.py)
#                       [Decode step]
#   codec               the streaming codec per (streams, frames per chunk), TF32 then exact fp32
#                       (engine_steps.py); CODEC_DTYPES="bfloat16 float16" adds those precisions [Codec]
#   load                the whole engine: time to first audio alone, then 256 streams at once
#                       (engine_load.py) [Whole engine]
#   gc                  a full garbage collection of the engine's process, with and without its start-up
#                       heap frozen (gc_pause.py) [Garbage collection]
#   precision           bf16 against fp32: logit error and greedy agreement (precision.py) [bf16 against fp32]
#   baselines           batch 1 against qwen-tts and faster-qwen3-tts (baselines.py; their wheels come from
#                       benchmarks/baseline_wheels.sh) [Baselines]
#   sweep               cadence serve measured by cadence bench, closed and open loop [Served sweep]
#   deadline            the deadline chunk policy against growth alone, served (scaleout.py)
#                       [Deadline chunking]
#   scaleout            one replica, two replicas, the codec on a second GPU (two GPUs; scaleout.py)
#                       [Scale-out]
#   serve SIZE          start cadence serve on a full-size random checkpoint of SIZE (0.6b, 1.7b) in the
#                       background, pinned off the last two cores (the client's); waits for /ready
#   protocol SIZE       the served protocol against that server (served_protocol.py): RATES, SEEDS,
#                       REQUESTS and SECONDS_PER_RATE shorten it to fit a call; LABEL names its result
#                       files (protocol-SIZE-LABEL), so that servers started with other SERVE_ARGS
#                       in one call keep theirs [Served protocol]
#   continuous          continuous against sentence WebSocket input against that server
#                       (continuous_input.py; SESSIONS a rate and mode) [Continuous input]
#   stop                stop that server; its log's tail into $OUT/serve.log (serve-LABEL.log)
#   tiles               the GEMM and attention tile sweeps (skinny_linear.py, paged_attention.py) that
#                       tile tables are read from; TILE_ROWS picks the GEMM rows, SIZE the model's shapes
#   gputests            every test marked gpu
#   ab TREE [TREE ...]  this tree against each TREE (NAME=DIR, or DIR: another checkout, carried with the
#                       call; DIR+OPTION+OPTION adds engine_steps.py options, e.g. slab8=.+--slab-max-rows=8
#                       is this tree with another setting), back to back and interleaved over AB_ROUNDS
#                       (default "1 2"): decode at AB_BATCHES (default 1,8,64,256) and prefill + first
#                       frame, each tree timed by its own engine_steps.py on its own package; takes the
#                       rest of the arguments
#   help                this text
# The engine phases use the full-size random 0.6B CustomVoice (SIZE=1.7b for the 1.7B), made once
# with `cadence checkpoint random` from the architecture cadence ships: nothing is downloaded. The
# server phases need cadence's server packages (fastapi, uvicorn, av, msgspec, pyzmq, websockets, ...);
# where the machine lacks them and reaches no package index, their wheels in .whl/ (downloaded
# elsewhere for its Python) are installed under /tmp/site. Everything printed also goes to
# $OUT/gpu.log; each phase writes one or two result files under $OUT (a device call brings back at
# most eight: run a few phases a call).
set -uo pipefail

arity_of() {  # the number of arguments PHASE takes; "rest" for all of them; nothing if unknown
    case $1 in
        decode | codec | load | gc | precision | baselines | sweep | deadline | scaleout | continuous | stop | tiles \
            | gputests | help) echo 0 ;;
        serve | protocol) echo 1 ;;
        ab) echo rest ;;
    esac
}

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

# Check every phase before anything runs: a misspelt phase fails at once, not after minutes of work.
args=("$@")
[ $# -gt 0 ] || { usage; exit 2; }
i=0
while [ $i -lt ${#args[@]} ]; do
    phase=${args[$i]} arity=$(arity_of "${args[$i]}")
    [ -n "$arity" ] || { echo "gpu.sh: no phase '$phase' (bash benchmarks/gpu.sh help)" >&2; exit 2; }
    [ "$phase" = help ] && { usage; exit 0; }
    if [ "$arity" = rest ]; then
        [ $((${#args[@]} - i)) -ge 2 ] || { echo "gpu.sh: $phase needs at least one TREE" >&2; exit 2; }
        break
    fi
    [ $((${#args[@]} - i - 1)) -ge "$arity" ] || { echo "gpu.sh: $phase needs $arity argument(s)" >&2; exit 2; }
    i=$((i + 1 + arity))
done

ROOT=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu.log") 2>&1
SITE=""
if compgen -G ".whl/*.whl" > /dev/null && ! python3 -c "import fastapi, av, zmq, msgspec, websockets" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    SITE=/tmp/site
fi
export PYTHONPATH=$ROOT${SITE:+:$SITE} PYTHONUNBUFFERED=1
PORT=8123
SIZE=${SIZE:-0.6b}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'triton', triton.__version__)"

checkpoint() {  # checkpoint SIZE: prints the directory of a full-size random checkpoint, made once
    local size=$1 dir=/tmp/full-$1
    [ -f "$dir/model.safetensors" ] || python3 -m cadence.cli -q checkpoint random \
        --from "Qwen/Qwen3-TTS-12Hz-${size^^}-CustomVoice" --preset full --out "$dir" --seed 0 >&2
    echo "$dir"
}
quiet() { grep -Pv 'INFO(?!.*captured)'; }  # the INFO lines, but those of graph capture (start-up time)
steps() { python3 benchmarks/engine_steps.py --model "$(checkpoint "$SIZE")" --device cuda --attention-backend triton \
    --steps 20 --warmup 5 "$@" 2>&1 | quiet; }
need_wheels() {
    python3 -c "import fastapi, uvicorn, av, zmq, msgspec, websockets" 2>/dev/null && return
    echo "the server's packages are missing: put their wheels in .whl/ (see the top of this script)" >&2
    exit 1
}

phase_decode() {
    steps --batches 1,8,16,64,256 --context 500 --prompt-lengths 60 --codec-streams= --kv-gb 40 \
        --json "$OUT/decode.json"
}
phase_codec() {
    steps --batches 1 --context 64 --prompt-lengths= --codec-streams 1,8,64 --codec-frames 1,2,8 --kv-gb 8 \
        --json "$OUT/codec.json"
    steps --batches 1 --context 64 --prompt-lengths= --codec-streams 1,8,64 --codec-frames 1,2,8 --kv-gb 8 \
        --no-codec-tf32 --json "$OUT/codec_exact.json"
    for dtype in ${CODEC_DTYPES:-}; do
        steps --batches 1 --context 64 --prompt-lengths= --codec-streams 1,8,64 --codec-frames 1,8 --kv-gb 8 \
            --codec-dtype "$dtype" --json "$OUT/codec_$dtype.json"
    done
}
phase_load() {
    python3 benchmarks/engine_load.py --model "$(checkpoint "$SIZE")" --device cuda --streams 256 --frames 150 \
        --ttfa-runs 20 --kv-gb 40 --json "$OUT/load.json" 2>&1 | quiet
}
phase_gc() {
    python3 benchmarks/gc_pause.py --model "$(checkpoint "$SIZE")" --device cuda --json "$OUT/gc_pause.json" 2>&1 \
        | quiet
}
phase_precision() {
    python3 benchmarks/precision.py --model "$(checkpoint "$SIZE")" --device cuda --frames 32 \
        --json "$OUT/precision.json" 2>&1 | quiet
}
phase_baselines() {
    [ -d .whl/official ] && [ -d .whl/faster ] || { echo "no .whl/official or .whl/faster:" \
        "run bash benchmarks/baseline_wheels.sh where a package index answers, and carry .whl" >&2; exit 1; }
    local ckpt impl site
    ckpt=$(checkpoint "$SIZE")
    python3 -m pip install -q --no-index --no-deps --target /tmp/official .whl/official/*.whl
    python3 -m pip install -q --no-index --no-deps --target /tmp/faster .whl/faster/*.whl
    for impl in cadence official faster; do
        site=""; [ $impl = official ] && site=/tmp/official; [ $impl = faster ] && site=/tmp/faster
        PYTHONPATH=$site${site:+:}$PYTHONPATH python3 benchmarks/baselines.py --impl $impl --model "$ckpt" \
            --frames 60 2>/tmp/baseline_$impl.err | tee -a "$OUT/baselines.jsonl"
        tail -3 /tmp/baseline_$impl.err
    done
}
phase_sweep() {
    need_wheels
    local ckpt name=Qwen/Qwen3-TTS-12Hz-${SIZE^^}-CustomVoice server common
    ckpt=$(checkpoint "$SIZE")
    mkdir -p /tmp/sweep
    python3 -m cadence.cli serve "$ckpt" --served-model-name $name --device cuda --port 8000 --max-streams 256 \
        --max-queue 2048 --kv-cache-memory 40 > /tmp/sweep/serve.log 2>&1 &
    server=$!
    for _ in $(seq 1 300); do curl -sf localhost:8000/ready > /dev/null && break; sleep 1; done
    common="--url http://127.0.0.1:8000 --model $name --voice ryan --format pcm --languages en --fixed-frames auto"
    python3 -m cadence.cli bench $common --no-progress --concurrency 1 8 32 128 256 --num-requests 256 \
        --duration 15 --output-dir /tmp/sweep/closed --label closed 2>&1 | tail -25
    python3 -m cadence.cli bench $common --no-progress --rate 1 10 20 40 --duration 12 --warmup 2 \
        --output-dir /tmp/sweep/open --label open 2>&1 | tail -25
    kill -TERM $server; wait $server; echo "serve exited $?"
    tar czf "$OUT/sweep.tgz" -C /tmp/sweep .
}
phase_deadline() {
    need_wheels
    local ckpt deadline
    ckpt=$(checkpoint "$SIZE")
    for deadline in 0 0.2; do
        python3 benchmarks/scaleout.py --out /tmp/deadline --duration 20 --label deadline-$deadline --clients 2 \
            --concurrency 128 256 -- "$ckpt" --device cuda:0 --max-streams 256 --kv-cache-memory 40 \
            --chunk-deadline $deadline
    done
    tar czf "$OUT/deadline.tgz" -C /tmp/deadline .
}
phase_scaleout() {
    need_wheels
    local ckpt so common
    ckpt=$(checkpoint "$SIZE")
    so="python3 benchmarks/scaleout.py --out /tmp/scaleout --duration 20"
    common="--max-streams 256 --kv-cache-memory 40"
    $so --label one-replica --clients 2 --concurrency 64 256 -- "$ckpt" --device cuda:0 $common
    $so --label two-replicas --clients 4 --concurrency 64 256 512 -- "$ckpt" --replicas 2 --device cuda $common
    $so --label disaggregated --clients 2 --concurrency 64 256 -- "$ckpt" --device cuda:0 --codec-device cuda:1 \
        $common
    tar czf "$OUT/scaleout.tgz" -C /tmp/scaleout .
}
phase_serve() {
    need_wheels
    local size=$1 ckpt start cores
    ckpt=$(checkpoint "$size")
    cores=$(nproc)
    start=$(date +%s)
    # shellcheck disable=SC2086  # SERVE_ARGS is a list of options
    taskset -c 0-$((cores - 3)) python3 -m cadence.cli serve "$ckpt" --device cuda --port $PORT \
        --served-model-name protocol ${SERVE_ARGS:-} > /tmp/serve.log 2>&1 &
    echo $! > /tmp/serve.pid
    until curl -sf localhost:$PORT/ready > /dev/null; do
        sleep 1
        kill -0 "$(cat /tmp/serve.pid)" 2>/dev/null || { tail -30 /tmp/serve.log; exit 1; }
    done
    echo "ready in $(($(date +%s) - start)) s"
    grep -E "captured|graph|KV cache|loaded|warm-up|max_streams" /tmp/serve.log | tail -10
}
phase_protocol() {
    local size=$1
    # shellcheck disable=SC2086  # RATES and SEEDS are lists
    python3 benchmarks/served_protocol.py --size "$size" --url http://127.0.0.1:$PORT --log /tmp/serve.log \
        --rates ${RATES:-1 4 10 20 40 60 80} --seeds ${SEEDS:-0 1 2} --requests "${REQUESTS:-1000}" \
        ${SECONDS_PER_RATE:+--max-seconds $SECONDS_PER_RATE} --out /tmp/protocol-"$size" 2>&1 | tail -24
    cp /tmp/protocol-"$size"/protocol.md "$OUT/protocol-$size${LABEL:+-$LABEL}.md"
    cp /tmp/protocol-"$size"/protocol.json "$OUT/protocol-$size${LABEL:+-$LABEL}.json"
}
phase_continuous() {
    python3 benchmarks/continuous_input.py --url http://127.0.0.1:$PORT --rates 20 50 100 \
        --sessions "${SESSIONS:-3}" --out /tmp/continuous 2>&1 | tail -10
    cp /tmp/continuous/continuous.md "$OUT/continuous.md"
}
phase_stop() {
    [ -f /tmp/serve.pid ] || { echo "no server started by this script"; return; }
    local pid
    pid=$(cat /tmp/serve.pid)
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    rm -f /tmp/serve.pid
    grep -E "ERROR|Traceback" /tmp/serve.log | head -5
    tail -c 200000 /tmp/serve.log > "$OUT/serve${LABEL:+-$LABEL}.log"
}
phase_tiles() {
    # shellcheck disable=SC2086  # TILE_ROWS is a list
    python3 benchmarks/skinny_linear.py --size "$SIZE" --rows ${TILE_ROWS:-1 16 32 64} --stages 3 4 \
        --json "$OUT/gemm_tiles.json" 2>&1 | tail -40
    # the decode attention with its QK-norm, RoPE and cache write up to 64 rows, the plain one above
    python3 benchmarks/paged_attention.py --batches 1 8 16 64 --context 500 --fused \
        --json "$OUT/attention_tiles_fused.json" 2>&1 | tail -12
    python3 benchmarks/paged_attention.py --batches 128 256 --context 500 --json "$OUT/attention_tiles.json" \
        2>&1 | tail -8
}
phase_gputests() {  # the modules that mark tests gpu: others may import clients this machine lacks (openai)
    # shellcheck disable=SC2046  # one argument a module
    timeout -s INT 500 python3 -m pytest -q -rs -p no:cacheprovider -m gpu $(grep -l "mark\.gpu" tests/test_*.py) \
        2>&1 | tail -40
}
phase_ab() {  # phase_ab TREE...: this tree against each TREE, interleaved rounds
    local trees=("this=$ROOT") tree name spec dir options round ckpt runs batches=${AB_BATCHES:-1,8,64,256}
    for tree in "$@"; do
        if [[ $tree == *=* ]]; then trees+=("$tree"); else trees+=("$(basename "${tree%%+*}")=$tree"); fi
    done
    ckpt=$(checkpoint "$SIZE")
    runs=$(mktemp -d /tmp/ab.XXXX)
    for round in ${AB_ROUNDS:-1 2}; do
        for tree in "${trees[@]}"; do
            name=${tree%%=*} spec=${tree#*=}
            dir=$(cd "${spec%%+*}" && pwd) options=""
            [[ $spec == *+* ]] && options=${spec#*+} && options=${options//+/ }
            echo "== $name ($dir${options:+ with $options}), round $round"
            # shellcheck disable=SC2086  # options is a list
            (cd "$dir" && PYTHONPATH=$dir${SITE:+:$SITE} timeout 280 python3 benchmarks/engine_steps.py \
                --model "$ckpt" --device cuda --attention-backend triton --batches "$batches" \
                --graph-buckets "$batches" --context 500 --prompt-lengths 60 --codec-streams= --steps 20 --warmup 5 \
                --kv-gb 30 $options --json "$runs/${name}_$round.json" > "/tmp/ab_${name}_$round.log" 2>&1) \
                || { echo "  failed (exit $?; 124: timed out):"; tail -6 "/tmp/ab_${name}_$round.log"; }
            quiet < "/tmp/ab_${name}_$round.log" | sed -n "/^ *batch/,/tokens:/p"
        done
    done
    python3 benchmarks/ab_table.py "$runs" --order this --json "$OUT/ab.json"
}

set -- "${args[@]}"
while [ $# -gt 0 ]; do
    phase=$1 arity=$(arity_of "$1")
    shift
    case $arity in
        rest) echo "=== $phase $*"; "phase_$phase" "$@"; set -- ;;
        1) echo "=== $phase $1"; "phase_$phase" "$1"; shift ;;
        *) echo "=== $phase"; "phase_$phase" ;;
    esac
done
