#!/usr/bin/env bash
# The phases of past sessions' device calls, each named in the perf-notes row it measured, kept so
# that a measurement can be rerun as it was taken (some switch experiments whose code was removed
# since: those phases now fail or time this tree). Sourced by h200.sh, which runs them as
# `bash benchmarks/h200.sh PHASE` with its helpers (need_full, quiet, $full, $OUT, kernel_tests).
# A phase that finds its tests failed returns early (the current phases `continue` h200.sh's loop).

past_phase() {
  case $1 in
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
        -k "cuda and (persistent or rows_do_not)" 2>&1 | tee "$OUT/cudacp_tests.log" | tail -30 || return 0
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
      grep -q " passed" "$OUT/slab_tests.log" && ! grep -qE "failed|error" "$OUT/slab_tests.log" || return 0
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
      grep -q " passed" "$OUT/attn104_tests.log" && ! grep -qE "failed|error" "$OUT/attn104_tests.log" || return 0
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
      grep -q " passed" "$OUT/gemm64_tests.log" && ! grep -qE "failed|error" "$OUT/gemm64_tests.log" || return 0
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
      grep -q " passed" "$OUT/sampler_tests.log" && ! grep -qE "failed|error" "$OUT/sampler_tests.log" || return 0
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
      grep -q " passed" "$OUT/first_tests.log" && ! grep -qE "failed|error" "$OUT/first_tests.log" || return 0
      WALKAB_TESTS=0 WALKAB_BATCHES=${FIRST_BATCHES:-1,2} WALKAB_ROUNDS=${FIRST_ROUNDS:-1 2} \
        TREES="first=.,CADENCE_SLAB_FIRST_PASS=1 ${TREES:-}" bash "$0" walkab 2>&1 | grep -vE "INFO|prompt|prefill|^$" | tail -40 ;;
    kvlayout90)  # perf-notes #90: the talker's decode attention over the KV pool as laid out and head-major (~60 s)
      timeout -k 10 -s INT 300 python3 benchmarks/kv_layout.py --batches 64 256 --json "$OUT/kv_layout_90.json" ;;
    screen139)  # perf-notes #139: the three ready levers screened in one call, for a session whose device comes late:
      # their gpu tests (#135's same bits with the prefetch, #134's cap, #136/#137's kernel in 1 stage), then b64
      # walks of this tree, `kv32` (#135), `r160` (#134), `cps1` and `fps1` (#136, #137) and `all` (the three
      # together), two rounds, decode only (~8 min); the stamps and the variants of cap134, cp136 and prefetch135
      # are for the levers that pay
      need_full > "$OUT/need_full.log" 2>&1 &
      { timeout -k 10 -s INT 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_kv_prefetch.py
        timeout -k 10 -s INT 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_linear_kernels.py -k register_cap
        CADENCE_CUDA_ATTENTION_STAGES=1 timeout -k 10 -s INT 150 python3 -m pytest -q -x -p no:cacheprovider \
          tests/test_cuda_attention.py; } 2>&1 | tee "$OUT/screen_tests.log" | grep -E "passed|failed|error|Error" | tail -6
      wait
      caps=CADENCE_GEMM64_TILES=1024x2048=32:256:4:3:4:160+1024x3072=32:256:4:3:4:160
      attn=CADENCE_CUDA_ATTENTION_FIRST_PASS=1,CADENCE_CUDA_ATTENTION_STAGES=1
      WALKAB_TESTS=0 WALKAB_DECODE_ONLY=1 WALKAB_BATCHES=64 WALKAB_ROUNDS="1 2" TREES="kv32=.,CADENCE_KV_PREFETCH=32
        r160=.,$caps cps1=.,CADENCE_CUDA_ATTENTION_STAGES=1 fps1=.,$attn all=.,CADENCE_KV_PREFETCH=32,$caps,$attn
        ${TREES:-}" bash "$0" walkab ;;
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
    qkvsplit138)  # the lever after #137 (perf-notes, Next device session): qkv at 64 rows alone, its tiles split
      # over K with and without the ticket (--partials: the partials left for the attention to add), ~1 min
      for mode in "" --partials; do
        timeout -k 10 -s INT 200 python3 benchmarks/skinny_linear.py --rows 64 --stages 3 4 --shapes 4096x1024 \
          $mode --json "$OUT/qkv_split${mode:+_partials}.json" 2>&1 | tail -3
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
      grep -q " passed" "$OUT/prefetch_tests.log" && ! grep -qE "failed|error" "$OUT/prefetch_tests.log" || return 0
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
    norm141)  # perf-notes #141 (written for session 43; never completed): the norms' weights loaded before their PDL wait
      # (CADENCE_NORM_WEIGHTS_EARLY=1, `nw`): its tests (the same bits), b64 walks of this tree and `nw`, two
      # rounds, decode only; if `nw` is faster in both rounds by 0.01 ms or more, the issue's table with it
      # (`walks`, with b256 and b1 in it); then stamps142's stamps, with `nw` where it paid (~8-9 min)
      need_full > "$OUT/need_full.log" 2>&1 &
      { timeout -k 10 -s INT 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernels.py -k rms_norm
        CADENCE_NORM_WEIGHTS_EARLY=1 timeout -k 10 -s INT 200 python3 -m pytest -q -x -p no:cacheprovider -m gpu \
          tests/test_fast_step.py -k greedy; } 2>&1 | tee "$OUT/norm141_tests.log" | grep -E "passed|failed|rror" | tail -4
      wait
      grep -q " passed" "$OUT/norm141_tests.log" && ! grep -qE "failed|error" "$OUT/norm141_tests.log" || return 0
      WALKAB_TESTS=0 WALKAB_DECODE_ONLY=1 WALKAB_BATCHES=64 WALKAB_ROUNDS="1 2" \
        TREES="nw=.,CADENCE_NORM_WEIGHTS_EARLY=1 ${TREES:-}" bash "$0" walkab
      nw=0
      python3 - "$OUT/walkab_b64.json" <<'PY' && nw=1
import json, sys
walks = json.load(open(sys.argv[1]))
ms = {name: walk["decode"][0]["back_to_back_ms"] for name, walk in walks.items()}
print("  back to back, ms:", ", ".join(f"{name} {v:.3f}" for name, v in sorted(ms.items())))
sys.exit(0 if all(ms.get(f"nw_{r}", 1e9) <= ms.get(f"new_{r}", 0) - 0.01 for r in (1, 2)) else 1)
PY
      echo "== nw pays: $nw"
      [ $nw = 1 ] && CADENCE_NORM_WEIGHTS_EARLY=1 bash "$0" walks
      CADENCE_NORM_WEIGHTS_EARLY=$nw bash "$0" stamps142 ;;
    screen143)  # perf-notes #141 and #143 in one call (session 46, call 1; ~6 min): their GPU tests, b64
      # walks of this tree, `nw` (CADENCE_NORM_WEIGHTS_EARLY=1), `ni` (CADENCE_GEMM64_NORM=1: the norm after o
      # inside gate/up's kernel) and `nwni` (both), one round (session 42: walk-to-walk spread under 0.01 ms);
      # then the issue's table (`walks`) with the fastest of the three if it beats this tree by 0.01 ms or more,
      # else this tree's stamps (`stamps142`)
      need_full > "$OUT/need_full.log" 2>&1 &
      # each switch walks only if its own tests pass, so a fault in one costs the other nothing
      # (#141's greedy walk with the switch passed in session 43's call: not run again, for the time)
      nw_ok=0 ni_ok=0
      passes 100 /tmp/screen143_nw.log tests/test_kernels.py -k rms_norm && nw_ok=1
      passes 200 /tmp/screen143_ni.log -m gpu tests/test_gemm64.py -k norm && ni_ok=1
      cat /tmp/screen143_nw.log /tmp/screen143_ni.log > "$OUT/screen143_tests.log"
      echo "== tests pass: nw $nw_ok, ni $ni_ok"
      wait
      trees=""
      [ $nw_ok = 1 ] && trees="nw=.,CADENCE_NORM_WEIGHTS_EARLY=1"
      [ $ni_ok = 1 ] && trees="$trees ni=.,CADENCE_GEMM64_NORM=1"
      [ $nw_ok$ni_ok = 11 ] && trees="$trees nwni=.,CADENCE_NORM_WEIGHTS_EARLY=1,CADENCE_GEMM64_NORM=1"
      screen_b64 "$trees" ;;
    *)
      echo "h200.sh: no phase '$1' (the phases are the cases of h200.sh and h200_past.sh)" >&2
      exit 2 ;;
  esac
}
