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
    sampler)  # perf-notes #68: the sampler kernel alone, top-k search width x warps, against the bisection
      python3 benchmarks/sampler.py --json "$OUT/sampler.json" 2>&1 | tee "$OUT/sampler.log" | tail -8 ;;
    attention)  # issue 4: launch-choice sweep of the paged attention over one walk's 28 layers
      python3 benchmarks/paged_attention.py --batches 1 8 64 128 256 --context 500 --json "$OUT/paged_attention.json" \
        2>&1 | tee "$OUT/attention.log" | tail -12 ;;
    attn72)  # perf-notes #72: the attention kernels' gpu tests, then the decode kernel's sweep with the block
      # loop pipelined (stages) at the talker's 500-token contexts (b64) and the code predictor's 17 (b1, b64)
      timeout -k 10 -s INT 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_attention_kernels.py 2>&1 \
        | tee "$OUT/attn72_tests.log" | tail -3
      timeout 200 python3 benchmarks/paged_attention.py --fused --batches 64 --context 500 --stages 0 2 3 --splits 1 2 \
        --json "$OUT/attn72_ctx500.json" 2>&1 | tail -2
      timeout 120 python3 benchmarks/paged_attention.py --fused --batches 1 64 --context 17 --stages 0 2 --splits 1 \
        --json "$OUT/attn72_ctx17.json" 2>&1 | tail -3 ;;
    attn72b)  # perf-notes #72, second call: the fast-step gpu tests with the prefetch on, the b64 walk's
      # timeline with the pipelined talker tiles, and the plain kernel's stages at 256 rows
      need_full
      timeout -k 10 -s INT 240 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/test_fast_step.py 2>&1 \
        | tee "$OUT/attn72b_tests.log" | tail -2
      CADENCE_ATTENTION_TILES=64:4:2 timeout 200 python3 benchmarks/walk_timeline.py --model $full --batches 64 \
        --walks 5 --rows 12 --json "$OUT/timeline_64_tiles642.json" 2>&1 | quiet | tail -15
      timeout 150 python3 benchmarks/paged_attention.py --batches 256 --context 500 --stages 0 2 --splits 1 \
        --json "$OUT/attn72_b256.json" 2>&1 | tail -1 ;;
    attn73)  # perf-notes #73's open question: the b64 talker attention alone, with consecutive pages, and
      # behind its qkv GEMM under PDL as the engine launches it (~40 s each)
      for mode in "" "--contiguous" "--chain" "--chain --contiguous"; do
        tag=$(echo "x$mode" | tr -d ' -')
        timeout 150 python3 benchmarks/paged_attention.py --fused $mode --batches 64 --context 500 --stages 0 2 \
          --splits 1 --json "$OUT/attn73_$tag.json" 2>&1 | tail -1
      done ;;
    layers78)  # perf-notes #79: the b64 talker attention inside its decoder layers (the layers without it taken
      # off), against behind its qkv GEMM alone (--chain), on one machine (~40-60 s each)
      for mode in "--layers" "--chain"; do
        timeout 200 python3 benchmarks/paged_attention.py --fused $mode --batches 64 --context 500 --stages 0 2 \
          --splits 1 --json "$OUT/layers78_${mode#--}.json" 2>&1 | tail -1
      done ;;
    half81)  # perf-notes #81: the b64 talker half (the advance graph) replayed alone, shipped and pipelined
      # attention tiles, and the whole walk with pipelined tiles over a 4 GB KV pool (~70 s each)
      need_full
      for run in "advance 20 shipped" "advance 20 64:4:2" "walk 4 64:4:2"; do
        set -- $run
        tiles=""; [ "$3" = shipped ] || tiles=$3
        CADENCE_ATTENTION_TILES=$tiles timeout 200 python3 benchmarks/walk_timeline.py --model $full --batches 64 \
          --walks 5 --half $1 --kv-gb $2 --rows 8 --json "$OUT/half81_$1_kv$2_${3//:/-}.json" 2>&1 | quiet | tail -10
      done ;;
    engattn82)  # perf-notes #82: the b64 talker attention on the engine's KV pool and table, and on copies of them
      # and inside the engine's own decoder layers (ENGATTN_CACHES: a subset of "engine table32 copy random"; ~100 s)
      need_full
      timeout 300 python3 benchmarks/engine_attention.py --model $full --batch 64 --context 500 --kv-gb 20 ${ENGATTN_CACHES:+--caches $ENGATTN_CACHES} 2>&1 \
        | quiet | tee "$OUT/engattn82.log" | tail -8 ;;
    skinny64)  # issue 4: the weight-streaming GEMM with 32/64-row tiles against cuBLAS (batches 17-64)
      python3 benchmarks/skinny_linear.py --rows 32 64 --json "$OUT/skinny_linear_64.json" 2>&1 | tee "$OUT/skinny64.log" | tail -24 ;;
    barrier)  # issue 4: the cost of a grid-wide barrier inside a kernel (decides the persistent code predictor)
      python3 benchmarks/grid_barrier.py --json "$OUT/grid_barrier.json" 2>&1 | tee "$OUT/barrier.log" | tail -6 ;;
    codepredictor)  # issue 4: the code predictor as layer kernels against one persistent kernel (perf-notes #35)
      need_full
      timeout 420 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py -k "persistent or sampling" 2>&1 | tail -4
      timeout 420 python3 benchmarks/code_predictor.py --model $full --batches 1 8 16 --sweep \
        --json "$OUT/code_predictor.json" 2>&1 | quiet | tee "$OUT/code_predictor.log" | tail -30 ;;
    cudacp)  # issue 4: the CUDA persistent code predictor (perf-notes #45): its tests, time and trace, the walk with it
      # The CUDA kernels' gpu tests first (tiny checkpoint, seconds): a kernel that fails or hangs there
      # would waste the timings' time, so they run only when these pass. CP_VARIANTS: the kernel's
      # experiment switches to A/B in the same process (code_predictor.py --variants; default: base).
      timeout -k 10 -s INT 240 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels.py \
        -k "cuda and (persistent or rows_do_not)" 2>&1 | tee "$OUT/cudacp_tests.log" | tail -30 || continue
      need_full
      timeout 420 python3 benchmarks/code_predictor.py --model $full --kernel cuda --batches 1 4 \
        --variants ${CP_VARIANTS:-base} --json "$OUT/code_predictor_cuda.json" 2>&1 | quiet
      for kernel in cuda triton; do  # the walk with the CUDA kernel, then with the layer kernels (the default)
        rows=$([ $kernel = cuda ] && echo 4 || echo 0)
        timeout 200 python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
          --batches 1,4 --context 500 --prompt-lengths 60 --codec-streams 1 --codec-frames 1 --steps 20 --warmup 5 \
          --kv-gb 20 --persistent-max-rows $rows --persistent-kernel $kernel \
          --json "$OUT/engine_steps_cp_$kernel.json" 2>&1 | quiet | tail -8
      done ;;
    megaphase)  # issue 4: the phase chain as one CUDA kernel, weights streamed by the copy engine (perf-notes #43)
      nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -o /tmp/phase_chain \
        benchmarks/cuda/phase_chain.cu 2>&1 | grep -E "registers|spill" | head -4
      timeout 120 /tmp/phase_chain reps=20 json="$OUT/phase_chain.json" 2>&1 | tee "$OUT/phase_chain.log" ;;
    phases)  # issue 4: one persistent-kernel phase: barrier orders, prefetching, L2-resident weights (perf-notes #37-#40)
      timeout 300 python3 benchmarks/phase_latency.py --orders after nobarrier split ahead bulk_ahead --tiles 32x4 16x4 \
        --json "$OUT/phase_latency.json" 2>&1 | tee "$OUT/phases.log" | tail -14
      timeout 200 python3 benchmarks/phase_latency.py --copies 2 --orders after nobarrier split --tiles 32x4 16x4 \
        --json "$OUT/phase_latency_l2.json" 2>&1 | tee -a "$OUT/phases.log" | tail -6 ;;
    walks)  # issue 4: decode walks (layer kernels) at 1-256 streams and prefill + first frame: the issue's table
      need_full
      timeout 500 python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
        --batches 1,8,16,64,256 --context 500 --prompt-lengths 60 --codec-streams 1 --codec-frames 1 --steps 20 \
        --warmup 5 --kv-gb 40 --json "$OUT/engine_steps_walks.json" 2>&1 | quiet | tail -16 ;;
    walkab)  # changes A/B'd in one call: decode walks of this tree ("new") and of the trees in TREES (NAME=DIR
      # ..., e.g. `git archive` of earlier commits, carried; NAME=DIR,VAR=VALUE,... runs it with those
      # environment variables: `early=.,CADENCE_PDL_TRIGGER_FIRST=1`), interleaved so drift shows; gpu
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
    trace93)  # perf-notes #93: the GEMM and attention kernel tests (the stamped GEMM's bits among them), then the
      # stamps of a GEMM chain at 1, 16 and 64 rows and of the talker attention at 64 and 256 (~2-3 min)
      timeout -k 10 -s INT 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_linear_kernels.py \
        tests/test_attention_kernels.py 2>&1 | tee "$OUT/trace93_tests.log" | tail -3
      timeout -k 10 -s INT 300 python3 benchmarks/kernel_trace.py --rows 1 16 64 --attention-rows 64 256 \
        --json "$OUT/kernel_trace_93.json" ;;
    stamps93)  # perf-notes #93: one decode walk at b1 and b64 with its GEMMs' and attentions' clock stamps (~3 min)
      need_full
      timeout -k 10 -s INT 400 python3 benchmarks/walk_timeline.py --model $full --stamps --batches 1,64 \
        --json "$OUT/walk_stamps_93.json" 2>&1 | quiet | tail -60 ;;
    pdlchain94)  # perf-notes #94: a one-row GEMM chain as CUDA kernels under PDL, each CTA's weight slab bulk-copied
      # into shared memory before its wait; then the Triton layer kernels' chain on the same machine (~2 min)
      nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -o /tmp/pdl_chain \
        benchmarks/cuda/pdl_chain.cu 2>&1 | grep -E "error|registers|spill" | head -6
      timeout -k 10 -s INT 200 /tmp/pdl_chain layers=${PDL_LAYERS:-24} reps=30 json="$OUT/pdl_chain_94.json" \
        2>&1 | tee "$OUT/pdl_chain_94.log"
      timeout -k 10 -s INT 200 python3 benchmarks/kernel_trace.py --rows 1 --layers ${PDL_LAYERS:-24} --no-norms \
        --attention-rows --json "$OUT/kernel_trace_94.json" 2>&1 | tail -30 ;;
    warpks128)  # perf-notes #128: the 64-row slab GEMM with 4 x 2 warps (K halves, CADENCE_GEMM64_WARP_KS=2, 16 K steps
      # of x in flight): its gpu tests, gate/up and qkv alone against 2 x 4 warps, then b64 walks of this tree (gate/up on
      # 2 x 4 warps), `ks2` (gate/up on 4 x 2), `all4` and `all2` (qkv and the heads on the slab too); W128_ROUNDS ("1")
      need_full > "$OUT/need_full.log" 2>&1 &
      CADENCE_GEMM64_WARP_KS=2 CADENCE_GEMM64_BATCH=16 timeout -k 10 -s INT 150 python3 -m pytest -q -x -p no:cacheprovider \
        tests/test_gemm64.py -m gpu 2>&1 | tail -1
      for pair in 4:8 2:16; do ks=${pair%%:*} batch=${pair#*:}
        echo "== WARP_KS=$ks BATCH=$batch"
        CADENCE_GEMM64_WARP_KS=$ks CADENCE_GEMM64_BATCH=$batch timeout -k 10 -s INT 150 python3 benchmarks/gemm64.py \
          --rows 64 --variants $batch:1:0:1:132 --json "$OUT/gemm64_ks$ks.json" 2>&1 | grep -v Warn | tail -6
      done
      wait
      WALKAB_TESTS=0 WALKAB_BATCHES=64 WALKAB_ROUNDS=${W128_ROUNDS:-1} TREES="ks2=.,CADENCE_GEMM64_WARP_KS=2,CADENCE_GEMM64_BATCH=16
        all4=.,CADENCE_GEMM64=1 all2=.,CADENCE_GEMM64=1,CADENCE_GEMM64_WARP_KS=2,CADENCE_GEMM64_BATCH=16 ${TREES:-}" \
        bash "$0" walkab ;;
    look129)  # perf-notes #129: the issue's table of this tree, a stamped b64 walk, and the 64-row slab GEMM with
      # its K quarters' sums left out (ablation 3) beside the served kernel (~5 min)
      need_full
      timeout -k 10 -s INT 150 python3 benchmarks/gemm64.py --rows 64 --variants 8:1:0:1:132 8:1:3:1:132 \
        --json "$OUT/gemm64_129.json" 2>&1 | grep -v Warn | tail -12
      timeout -k 10 -s INT 240 python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
        --batches 1,64,256 --graph-buckets 1,64,256 --context 500 --prompt-lengths 60 --codec-streams 1 \
        --codec-frames 1 --steps 20 --warmup 5 --kv-gb 40 --json "$OUT/walks_129.json" 2>&1 | quiet | tail -14
      timeout -k 10 -s INT 200 python3 benchmarks/walk_timeline.py --model $full --stamps --batches 64 \
        --json "$OUT/stamps_129.json" 2>&1 | quiet | tail -14 ;;
    sums130)  # perf-notes #130: the 64-row slab GEMM with its K sums scattered over the warps: its gpu tests, gate/up and
      # qkv alone (and without the sums), then b64 walks of this tree, of `prev` (PREV130, default prev130: `git archive` of
      # the tree before, carried) and of `all` (qkv and the heads on the slab too); S130_ROUNDS (default "1 2") (~7 min)
      need_full > "$OUT/need_full.log" 2>&1 &
      timeout -k 10 -s INT 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemm64.py -m gpu 2>&1 | tail -1
      timeout -k 10 -s INT 150 python3 benchmarks/gemm64.py --rows 64 --variants 8:1:0:1:132 8:1:3:1:132 \
        --json "$OUT/gemm64_130.json" 2>&1 | grep -v Warn | tail -12
      wait
      WALKAB_TESTS=0 WALKAB_BATCHES=64 WALKAB_ROUNDS=${S130_ROUNDS:-1 2} \
        TREES="prev=${PREV130:-prev130} all=.,CADENCE_GEMM64=1 ${TREES:-}" bash "$0" walkab ;;
    stages131)  # perf-notes #131: b64 walks with o and down in 2 stages (`o2`), and qkv too (`o2q2`), against this tree;
      # then the stamps of `o2` (whether gate/up's CTAs now start beside o's); S131_ROUNDS (default "1 2") (~7 min)
      o2="CADENCE_GEMM64_TILES=1024x2048=32:256:4:2:4+1024x3072=32:256:4:2:4"
      WALKAB_TESTS=0 WALKAB_BATCHES=64 WALKAB_ROUNDS=${S131_ROUNDS:-1 2} \
        TREES="o2=.,$o2 o2q2=.,$o2+4096x1024=32:256:4:2:1 ${TREES:-}" bash "$0" walkab
      env "$o2" timeout -k 10 -s INT 200 python3 benchmarks/walk_timeline.py --model $full --stamps --batches 64 \
        --json "$OUT/stamps_131.json" 2>&1 | quiet | tail -11 ;;
    regs133)  # perf-notes #133: the slab gate/up capped at 128 registers (CADENCE_GEMM64_MIN_BLOCKS=2): its gpu tests, b64 walks
      # against this tree (S133_ROUNDS, default "1 2"), then the issue's table of this tree (~6 min)
      need_full > "$OUT/need_full.log" 2>&1 &
      CADENCE_GEMM64_MIN_BLOCKS=2 timeout -k 10 -s INT 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemm64.py \
        -m gpu 2>&1 | tail -1
      wait
      WALKAB_TESTS=0 WALKAB_BATCHES=64 WALKAB_ROUNDS=${S133_ROUNDS:-1 2} TREES="mb2=.,CADENCE_GEMM64_MIN_BLOCKS=2 ${TREES:-}" \
        bash "$0" walkab
      timeout -k 10 -s INT 200 python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
        --batches 1,64,256 --graph-buckets 1,64,256 --context 500 --prompt-lengths 60 --codec-streams 1 \
        --codec-frames 1 --steps 20 --warmup 5 --kv-gb 40 --json "$OUT/walks_133.json" 2>&1 | quiet | tail -9 ;;
    cap134)  # perf-notes #134, the next session's first call: b64 walks with o and down capped at 160 registers a thread
      # (`r160`), and o at 160 with down at 192 (`o160d192`: fewer spills in down, the same three kernels let in early,
      # benchmarks/residency.py), against this tree; the cap's gpu test first, the stamps of `r160` last; CAP_ROUNDS ("1 2")
      cap=1024x2048=32:256:4:3:4:160
      need_full > "$OUT/need_full.log" 2>&1 &
      timeout -k 10 -s INT 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_linear_kernels.py -k register_cap \
        2>&1 | tail -1
      wait
      WALKAB_TESTS=0 WALKAB_DECODE_ONLY=1 WALKAB_BATCHES=64 WALKAB_ROUNDS=${CAP_ROUNDS:-1 2} TREES="r160=.,CADENCE_GEMM64_TILES=$cap+1024x3072=32:256:4:3:4:160
        o160d192=.,CADENCE_GEMM64_TILES=$cap+1024x3072=32:256:4:3:4:192 ${TREES:-}" bash "$0" walkab
      CADENCE_GEMM64_TILES=$cap+1024x3072=32:256:4:3:4:160 timeout -k 10 -s INT 200 python3 benchmarks/walk_timeline.py \
        --model $full --stamps --batches 64 --json "$OUT/stamps_134.json" 2>&1 | quiet | tail -11 ;;
    cp136)  # perf-notes #136 and #137, the code predictor's attention at b64: its decode steps' kernel in 1 stage
      # (`cps1`: its contexts hold one cached page; 45 KB a CTA instead of 145, so its CTAs fit beside qkv's and
      # load the row's page, table, position and RoPE rows under it), its first pass by the same kernel (`fp`,
      # two new tokens a stream, instead of the Triton QK-norm + RoPE + cache write and paged attention), and
      # both (`fps1`). The kernel's tests at 4 and 1 stages, b64 walks of this tree and the three, two rounds,
      # decode only, then the stamps of this tree and of `fps1`, the norms' too (~7 min)
      need_full > "$OUT/need_full.log" 2>&1 &
      for stages in 4 1; do
        CADENCE_CUDA_ATTENTION_STAGES=$stages timeout -k 10 -s INT 150 python3 -m pytest -q -x -p no:cacheprovider \
          tests/test_cuda_attention.py 2>&1 | tail -1
      done
      timeout -k 10 -s INT 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_linear_kernels.py -k traced \
        2>&1 | tail -1  # the norms' stamps (walk_timeline --stamp-norms) and the GEMMs'
      wait
      WALKAB_TESTS=0 WALKAB_DECODE_ONLY=1 WALKAB_BATCHES=64 WALKAB_ROUNDS="1 2" TREES="cps1=.,CADENCE_CUDA_ATTENTION_STAGES=1
        fp=.,CADENCE_CUDA_ATTENTION_FIRST_PASS=1 fps1=.,CADENCE_CUDA_ATTENTION_FIRST_PASS=1,CADENCE_CUDA_ATTENTION_STAGES=1
        ${TREES:-}" bash "$0" walkab
      for tree in "new:" "fps1:CADENCE_CUDA_ATTENTION_FIRST_PASS=1 CADENCE_CUDA_ATTENTION_STAGES=1"; do
        echo "== stamps, ${tree%%:*} (${tree#*:})"
        env ${tree#*:} timeout -k 10 -s INT 200 python3 benchmarks/walk_timeline.py --model $full --stamps \
          --stamp-norms --batches 64 --json "$OUT/stamps_136_${tree%%:*}.json" 2>&1 | quiet | tail -14
      done ;;
    prefetch135)  # perf-notes #135: the norms pull the next attention's cached keys and values into L2
      # (CADENCE_KV_PREFETCH=MB a layer): their gpu tests and the fast walk's with 32 MB, then b64 walks of this
      # tree against 32 MB (`kv32`), 16 MB (`kv16`), 32 MB from the norm after o (`kv32o`) and 32 MB after the
      # norm's wait (`kv32w`), two rounds, the decode walks alone (~7 min; KV_TREES replaces the four)
      need_full > "$OUT/need_full.log" 2>&1 &
      { timeout -k 10 -s INT 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_kv_prefetch.py
        CADENCE_KV_PREFETCH=32 timeout -k 10 -s INT 120 python3 -m pytest -q -x -p no:cacheprovider -m gpu \
          tests/test_fast_step.py -k greedy; } 2>&1 | tee "$OUT/prefetch_tests.log" | grep -E "passed|failed|error|Error" | tail -4
      wait
      grep -q " passed" "$OUT/prefetch_tests.log" && ! grep -qE "failed|error" "$OUT/prefetch_tests.log" || continue
      trees=${KV_TREES:-kv32=.,CADENCE_KV_PREFETCH=32 kv16=.,CADENCE_KV_PREFETCH=16 kv32o=.,CADENCE_KV_PREFETCH=32:o
        kv32w=.,CADENCE_KV_PREFETCH=32:waited}
      WALKAB_TESTS=0 WALKAB_DECODE_ONLY=1 WALKAB_BATCHES=64 WALKAB_ROUNDS="1 2" TREES="$trees" bash "$0" walkab ;;
    prefetch135b)  # perf-notes #135's follow-up, if a budget paid: the stamps of the b64 walk with KV_BEST (default 32) MB,
      # then b256 walks of this tree against 32 and 48 MB, and b64 against KV_BEST with evict-last (`:last`), one round
      # each (~7 min)
      need_full
      best=${KV_BEST:-32}
      CADENCE_KV_PREFETCH=$best timeout -k 10 -s INT 200 python3 benchmarks/walk_timeline.py --model $full --stamps \
        --batches 64 --json "$OUT/stamps_135.json" 2>&1 | quiet | tail -11
      WALKAB_TESTS=0 WALKAB_DECODE_ONLY=1 WALKAB_BATCHES=256 WALKAB_ROUNDS=1 TREES="kv32=.,CADENCE_KV_PREFETCH=32 kv48=.,CADENCE_KV_PREFETCH=48" \
        bash "$0" walkab
      WALKAB_TESTS=0 WALKAB_DECODE_ONLY=1 WALKAB_BATCHES=64 WALKAB_ROUNDS=1 TREES="kv${best}=.,CADENCE_KV_PREFETCH=$best \
        kv${best}last=.,CADENCE_KV_PREFETCH=$best:last" bash "$0" walkab ;;
    xmulticast124)  # perf-notes #124: how fast 128 CTAs each receive a 64-row GEMM's 128 KB input from L2: loads,
      # bulk copies, or clusters of 2-8 sharing it by multicast copies; with and without each CTA's weights (~1 min)
      nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/x_multicast benchmarks/cuda/x_multicast.cu \
        2>&1 | grep -E "error" | head -6
      for ctas in 128 96; do
        timeout -k 10 -s INT 120 /tmp/x_multicast ctas=$ctas json="$OUT/x_multicast_${ctas}.json" 2>&1
      done ;;
    slab95)  # perf-notes #95: the slab GEMM's gpu tests and the fast walk's, the bf16 walk's greedy agreement with
      # the fp32 model with and without it, then walks of this tree (slab on by default), with it off
      # (`off`) and TREES, interleaved (walkab; SLAB_BATCHES, default 1,2,8; ~6 min). The rest only if the tests pass.
      timeout -k 10 -s INT 300 python3 -m pytest -q -x -p no:cacheprovider tests/test_slab_gemv.py -m gpu \
        tests/test_fast_step.py 2>&1 | tee "$OUT/slab_tests.log" | tail -6
      grep -q " passed" "$OUT/slab_tests.log" && ! grep -qE "failed|error" "$OUT/slab_tests.log" || continue
      need_full
      timeout -k 10 -s INT 300 python3 benchmarks/walk_agreement.py --model $full --frames 48 --slab 0 2 \
        --json "$OUT/walk_agreement.json" 2>&1 | quiet | tail -10
      WALKAB_TESTS=0 WALKAB_BATCHES=${SLAB_BATCHES:-1,2,8} WALKAB_ROUNDS=${SLAB_ROUNDS:-1} \
        TREES="off=.,CADENCE_SLAB_MAX_ROWS=0 ${TREES:-}" bash "$0" walkab 2>&1 | grep -vE "INFO|prompt|prefill|^$" | tail -30 ;;
    timeline29)  # perf-notes "Next device session" 1 (session 29): each kernel's adds in the b1 walk's graph replays,
      # this tree as shipped (~90 s)
      need_full
      timeout -k 10 -s INT 240 python3 benchmarks/walk_timeline.py --model $full --batches 1 --walks 5 --rows 45 \
        --json "$OUT/timeline_b1_29.json" 2>&1 | quiet | tee "$OUT/timeline_b1_29.log" | tail -50 ;;
    glue100b)  # perf-notes #100-#102 in a short call: the fast walk's gpu tests (the walk under graphs against
      # the eager one), b1 walks of this tree and of TREES (prev=prev100), two rounds, then the sampler's and
      # the ticket merge's kernel tests (~6 min); logs under $OUT as they come
      need_full
      timeout -k 10 -s INT 170 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/test_fast_step.py 2>&1 \
        | tee "$OUT/fast_tests.log" | grep -E "passed|failed|error|Error" | tail -4
      WALKAB_TESTS=0 WALKAB_BATCHES=${GLUE_BATCHES:-1} WALKAB_ROUNDS=${GLUE_ROUNDS:-1 2} bash "$0" walkab 2>&1 \
        | grep -E "^==|^ +[0-9]|failed"
      timeout -k 10 -s INT 90 python3 -m pytest -q -x -p no:cacheprovider tests/test_sampling_kernels.py \
        tests/test_attention_kernels.py -k "rows or matches_definition or ticket" 2>&1 | tee "$OUT/kernel_tests.log" \
        | grep -E "passed|failed|error|Error" | tail -4 ;;
    timeline100)  # perf-notes #100-#101, session 29's last call: the b1 walk's timeline with the glue beside the
      # code predictor (set against call 1's, `timeline29`), the ticket merge's kernel test (#101, reverted
      # since: the test selects nothing now), then b1 walks of this tree and with the glue inline (`inline`),
      # one round (~2.5 min)
      need_full
      timeout -k 10 -s INT 150 python3 benchmarks/walk_timeline.py --model $full --batches 1 --walks 5 --rows 45 \
        --json "$OUT/timeline_b1_100.json" 2>&1 | quiet > "$OUT/timeline_b1_100.log"; head -30 "$OUT/timeline_b1_100.log"
      timeout -k 10 -s INT 60 python3 -m pytest -q -x -p no:cacheprovider tests/test_attention_kernels.py -k ticket \
        2>&1 | tail -1
      WALKAB_TESTS=0 WALKAB_BATCHES=1 WALKAB_ROUNDS=1 TREES="inline=.,CADENCE_WALK_SIDE_STREAM=0" bash "$0" walkab \
        2>&1 | grep -E "^==|^ +[0-9]|failed" ;;
    attn104)  # perf-notes #104: the CUDA decode attention's gpu tests and the Triton decode kernel's (the dispatcher
      # in front of it), the kernels alone at 64 rows (the Triton sweep's shipped and best against the CUDA kernel at
      # 2-4 pages in flight; alone, then behind the qkv GEMMs), then b64 walks of this tree, with the CUDA kernel
      # for the talker (`long`), for the code predictor (`short`) and both (`all`), and TREES (A104_ROUNDS,
      # default "1 2"; A104_TREES to walk other switches; ~8 min)
      need_full > "$OUT/need_full.log" 2>&1 &
      [ "${A104_WALKS_ONLY:-0}" = 1 ] || { timeout -k 10 -s INT 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_attention.py \
        tests/test_attention_kernels.py -k "cuda_attention or gpu or qk_norm_rope_attention" 2>&1 \
        | tee "$OUT/attn104_tests.log" | grep -E "passed|failed|rror" | tail -6
      grep -q " passed" "$OUT/attn104_tests.log" && ! grep -qE "failed|error" "$OUT/attn104_tests.log" || continue
      for chain in "" --chain; do
        timeout -k 10 -s INT 150 python3 benchmarks/paged_attention.py --batches 64 --fused $chain --stages 2 \
          --splits 1 --cuda 2 3 4 --json "$OUT/attn104_kernel${chain}.json" 2>&1 | grep -vE "^ *$" | tail -5
      done; }
      wait
      WALKAB_TESTS=0 WALKAB_BATCHES=64 WALKAB_ROUNDS=${A104_ROUNDS:-1 2} \
        TREES="${A104_TREES:-long=.,CADENCE_CUDA_ATTENTION=long short=.,CADENCE_CUDA_ATTENTION=short all=.,CADENCE_CUDA_ATTENTION=all} ${TREES:-}" bash "$0" walkab \
        2>&1 | grep -E "^==|^ +[0-9]|failed|rror" ;;
    gemm64115)  # perf-notes #115: the 64-row slab GEMM's tests (gpu and emulated), the kernel alone against the shipped
      # route (benchmarks/gemm64.py), then b64 walks of this tree with it on (`g64`: CADENCE_GEMM64=1, or
      # G64_SHAPES) against off, interleaved (walkab; G64_ROUNDS, default "1 2"). The rest only if the tests pass.
      timeout -k 10 -s INT 300 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemm64.py 2>&1 \
        | tee "$OUT/gemm64_tests.log" | tail -4
      grep -q " passed" "$OUT/gemm64_tests.log" && ! grep -qE "failed|error" "$OUT/gemm64_tests.log" || continue
      timeout -k 10 -s INT 240 python3 benchmarks/gemm64.py --rows 48 64 --json "$OUT/gemm64.json" 2>&1 | tail -16
      WALKAB_TESTS=0 WALKAB_BATCHES=64 WALKAB_ROUNDS=${G64_ROUNDS:-1 2} \
        TREES="g64=.,CADENCE_GEMM64=${G64_SHAPES:-1} ${TREES:-}" bash "$0" walkab 2>&1 | grep -vE "INFO|prompt|prefill|^$" | tail -30 ;;
    stamps108)  # perf-notes #108: the CUDA kernels' clock stamps (the slab GEMM's, the decode attention's) checked on the
      # GPU, then a stamped walk at b1 and b64 (walk_timeline.py --stamps: every GEMM's and attention's lead, release,
      # loop and tail, Triton's and CUDA's; ~4 min)
      need_full > "$OUT/need_full.log" 2>&1 &
      timeout -k 10 -s INT 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_attention.py \
        tests/test_slab_gemv.py 2>&1 | tee "$OUT/stamps_tests.log" | grep -E "passed|failed|rror" | tail -4
      wait
      timeout -k 10 -s INT 300 python3 benchmarks/walk_timeline.py --model $full --stamps --batches ${STAMPS_BATCHES:-1,64} \
        --json "$OUT/stamps_108.json" 2>&1 | quiet | tail -60 ;;
    warps109)  # perf-notes #109: the CUDA decode attention with two warps a kv head over the talker's contexts: its
      # gpu tests, the kernel alone (cuda_attention_parts.py), then b64 walks of this tree (`short`) against the
      # talker's calls on it with 2 warps a head (`long2`) and TREES (W109_ROUNDS, default 1; ~5 min)
      need_full > "$OUT/need_full.log" 2>&1 &
      timeout -k 10 -s INT 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_attention.py 2>&1 \
        | tee "$OUT/warps_tests.log" | grep -E "passed|failed|rror" | tail -4
      timeout -k 10 -s INT 150 python3 benchmarks/cuda_attention_parts.py --json "$OUT/warps_109.json" --variants \
        heads_per_cta=4,stages=4 heads_per_cta=4,stages=4,warps_per_head=2 heads_per_cta=4,stages=6,warps_per_head=2 \
        heads_per_cta=4,stages=4,warps_per_head=2,ablate=2 heads_per_cta=2,stages=4,warps_per_head=2 2>&1 | grep -v Warn
      wait
      A104_WALKS_ONLY=1 A104_ROUNDS="${W109_ROUNDS:-1}" \
        A104_TREES="long2=.,CADENCE_CUDA_ATTENTION=long,CADENCE_CUDA_ATTENTION_LONG_WARPS=2" bash "$0" attn104 ;;
    sampler103)  # perf-notes #103: the samplers' kernel tests (the CUDA sampler's and the shared ones, both GPU
      # samplers), the fast walk's gpu tests (under graphs against the eager walk), the sampler kernels alone, then
      # walks of this tree, of it with the Triton sampler (`triton`) and of TREES (S103_BATCHES, default 1;
      # S103_ROUNDS, default 1; ~7 min); logs under $OUT as they come
      need_full
      timeout -k 10 -s INT 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_cuda_sampler.py \
        tests/test_sampling_kernels.py 2>&1 | tee "$OUT/sampler_tests.log" | grep -E "passed|failed|rror" | tail -4
      grep -q " passed" "$OUT/sampler_tests.log" && ! grep -qE "failed|error" "$OUT/sampler_tests.log" || continue
      timeout -k 10 -s INT 170 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/test_fast_step.py 2>&1 \
        | tee "$OUT/fast_tests.log" | grep -E "passed|failed|rror" | tail -4
      timeout -k 10 -s INT 120 python3 benchmarks/sampler.py --rows 1 64 --json "$OUT/sampler_103.json" 2>&1 | tail -12
      WALKAB_TESTS=0 WALKAB_BATCHES=${S103_BATCHES:-1} WALKAB_ROUNDS=${S103_ROUNDS:-1} \
        TREES="triton=.,CADENCE_SAMPLER=triton ${TREES:-}" bash "$0" walkab 2>&1 | grep -E "^==|^ +[0-9]|failed" ;;
    first99)  # perf-notes #99: the code predictor's first pass with its attention inside o (CADENCE_SLAB_FIRST_PASS):
      # the slab gpu tests and the fast walk's with it on, then walks of this tree and with it (`first`) and
      # TREES, interleaved (FIRST_BATCHES, default 1,2; FIRST_ROUNDS "1 2"; ~7 min)
      CADENCE_SLAB_FIRST_PASS=1 timeout -k 10 -s INT 260 python3 -m pytest -q -x -p no:cacheprovider -m gpu \
        tests/test_slab_gemv.py tests/test_fast_step.py 2>&1 | tee "$OUT/first_tests.log" | tail -4
      grep -q " passed" "$OUT/first_tests.log" && ! grep -qE "failed|error" "$OUT/first_tests.log" || continue
      WALKAB_TESTS=0 WALKAB_BATCHES=${FIRST_BATCHES:-1,2} WALKAB_ROUNDS=${FIRST_ROUNDS:-1 2} \
        TREES="first=.,CADENCE_SLAB_FIRST_PASS=1 ${TREES:-}" bash "$0" walkab 2>&1 | grep -vE "INFO|prompt|prefill|^$" | tail -40 ;;
    kvlayout90)  # perf-notes #90: the talker's decode attention over the KV pool as laid out and head-major (~60 s)
      timeout -k 10 -s INT 300 python3 benchmarks/kv_layout.py --batches 64 256 --json "$OUT/kv_layout_90.json" ;;
    graphmem)  # perf-notes #62: graph memory with every capture on one stream, and an engine at the default KV size
      need_full
      timeout -k 10 -s INT 300 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/test_graph_capture.py \
        tests/test_codec_graphs.py tests/test_fast_step.py 2>&1 | tee "$OUT/graphmem_tests.log" | tail -4
      timeout 300 python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
        --batches 1,64 --context 500 --prompt-lengths 60 --codec-streams 1,64 --codec-frames 1,8 --steps 20 --warmup 5 \
        --json "$OUT/engine_steps_graphmem.json" 2>&1 | grep -Pv 'INFO(?!.*captured)' | tail -24 ;;
    cpcheck)  # issue 4: the persistent code predictor's codes against the layer kernels', fp32 and bf16
      need_full
      for dt in bf16 fp32; do timeout 200 python3 benchmarks/code_predictor.py --model $full --dtype $dt --batches 8 --check \
        2>&1 | quiet | tail -4; done ;;
    persistent)  # issue 4: decode walks of 1-16 streams with the persistent code predictor and without
      need_full
      for rows in 16 0; do
        timeout 400 python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton \
          --batches 1,8,16 --context 500 --prompt-lengths 60 --codec-streams 1 --codec-frames 1 --steps 20 --warmup 5 \
          --kv-gb 20 --persistent-max-rows $rows --json "$OUT/engine_steps_persistent_$rows.json" 2>&1 | quiet | tail -14
      done ;;
    profile64)  # issue 4: kernel breakdown of one decode walk at batch 64 (issue 4's 4 ms target)
      need_full
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --batches 64 \
        --context 500 --prompt-lengths 60 --codec-streams 1 --codec-frames 1 --steps 3 --warmup 1 --kv-gb 20 \
        --profile 2>&1 | quiet | tee "$OUT/profile64.log" | tail -40 ;;
    timeline)  # perf-notes #65: each kernel's start and end in the b1 / b64 walks' graph replays, both launch orders
      need_full
      for order in 0 1; do
        CADENCE_PDL_TRIGGER_FIRST=$order timeout 240 python3 benchmarks/walk_timeline.py --model $full --batches 1,64 \
          --walks 5 --json "$OUT/timeline_trigger$order.json" 2>&1 | quiet | tee "$OUT/timeline_trigger$order.log" | tail -30
      done ;;
    pdl)  # issue 4: programmatic dependent launch (perf-notes #27): its gpu tests, then the walk with it
      need_full
      CADENCE_PDL=1 timeout -s INT 300 python3 -m pytest -q -p no:cacheprovider tests/test_kernels.py \
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
    codecexact)  # issue 5: where the TF32 error comes from per stage; the codec and saturation in exact fp32
      need_full
      python3 benchmarks/codec_precision.py --model $full --json "$OUT/codec_precision.json" 2>&1 | quiet
      python3 benchmarks/engine_steps.py --model $full --device cuda --attention-backend triton --no-codec-tf32 \
        --batches 1 --context 64 --prompt-lengths 60 --codec-streams 1,8,64 --codec-frames 1,2,8 --steps 20 \
        --warmup 5 --kv-gb 20 --json "$OUT/engine_steps_codec_exact.json" 2>&1 | quiet
      python3 benchmarks/engine_load.py --model $full --device cuda --streams 256 --frames 150 --ttfa-runs 5 \
        --kv-gb 40 --no-codec-tf32 --json "$OUT/engine_load_codec_exact.json" 2>&1 | quiet ;;
    codecbuild)  # codec graph capture time and replay time, cuDNN autotuning on every graph vs none
      need_full
      for from in 1 0x7fffffff; do
        python3 benchmarks/codec_build.py --model $full --autotune-from $from --json "$OUT/codec_build_$from.json" 2>&1 | quiet
      done ;;
    codeclimit)  # codec graph capture with fewer cuDNN algorithms tried a conv shape (benchmark_limit 1, 3; default 10)
      need_full
      for limit in ${CODEC_LIMITS:-1 3 10}; do
        timeout 200 python3 benchmarks/codec_build.py --model $full --benchmark-limit $limit \
          --json "$OUT/codec_build_limit_$limit.json" 2>&1 | quiet | head -3
      done ;;
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
  esac
done
