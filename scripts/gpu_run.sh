#!/usr/bin/env bash
# One device call: GPU tests, `gemmlab check`, the fuzz harness, the overhead measurement, the
# default benchmark, and the CPU ladder on the same machine at 2048x2048x1024.
# One log ($OUT/gpu_run.log) and the records under $OUT/results (the device tool brings back at
# most 8 files a call: keep it to one log); the records are the files to commit under results/.
# Usage on the GPU machine, from the repo root:
#   GEMMLAB_COMMIT=<sha> bash scripts/gpu_run.sh [bench args...]
# Knobs (environment): FP32_BENCH_ARGS, extra arguments of the FP32 bench (e.g. "-k sgemm_11_warp_tile"
# when the FP32 ladder is unchanged since its last full run); CPU_BENCH=0 skips the CPU ladder;
# STEPS, the parts to run (default "tests check fuzz overhead bench"; "fuzz" is `gemmlab fuzz` over
# FUZZ_CASES random problems (default 100000; on an H100, 454 s with a third of them through a fused epilogue,
# after about two minutes compiling every build a case may launch, plain and fused for the run's activation, which FUZZ_SECONDS does not count), failing on any wrong
# one or on fewer problems than that; "sanitize" adds compute-sanitizer's memcheck, racecheck and
# synccheck at small odd shapes and at shapes where every persistent block takes several tiles with a short K, "racecheck" the stream-K steps' racecheck at a larger shape,
# "cold-start" the first calls' time from an empty and a warm cubin cache (gemmlab cold-start), "layouts" the benchmark of transposed views (LAYOUTS, default "nt tn tt"), "sustained" the back-to-back runs at the power limit,
# "conv" gemmlab.conv2d against cuDNN on ResNet-50's layers, "conv-tiles" conv03 on each of its tiles there (CONV_TILES_SECONDS at most),
# "conv-depthwise" conv2d (conv05) against cuDNN on MobileNetV2's and ConvNeXt-T's depthwise layers (sweeps/conv/depthwise.toml), forward and a training step's
# passes (scripts/depthwise_bench.py), "conv-grouped" conv2d (conv02's grouped build, conv05's for narrow groups) on ResNeXt-50's grouped layers
# (sweeps/conv/resnext50.toml) with both paths forward and backward (scripts/grouped_paths.py),
# "few-tiles" the bf16 GEMMs auto leaves on a few tc04 tiles against tc09 staged and torch.mm (scripts/probe_few_tiles.py), "linear" the fused Linear + GELU against torch,
# "bmm" gemmlab.bmm in one launch and per matrix against torch.bmm (gemmlab bmm-bench, sweeps/bmm/grid.toml; BMM_SECONDS at most),
# "train" a transformer block's training step (forward, backward, AdamW, bf16, 8192 tokens) on gemmlab.nn.Linear against torch's own nn.Linear (gemmlab train-bench, sweeps/train/block.toml; TRAIN_SECONDS at most),
# "wgrad" the filter gradient of ResNet-50's 3x3 layers and projections: conv06, the GEMM over the im2col matrix and cuDNN's (scripts/wgrad_bench.py),
# "model" a torchvision network (ResNet-50) on gemmlab.nn.convert against torch's own, inference and a training step (scripts/model_bench.py; MODEL_SECONDS at most),
# "train-amp" the same step in mixed precision (float32 parameters, the forward pass under torch.autocast to bf16; sweeps/train/block-amp.toml),
# "accuracy" precision="3xtf32" against float64 and cuBLAS SGEMM (gemmlab accuracy: docs/ladder/tc11-3xtf32.md),
# "fp32-shapes" gemm()'s choice for exact float32 over sweeps/fp32-shapes.toml against cuBLAS SGEMM (the float32 target's records),
# "3xtf32" tc11 (precision="3xtf32") at the ladder's sizes against cuBLAS SGEMM (its speed target's records),
# "models" gemm() on Llama 3 8B's and 70B's layers (sweeps/models.toml) against cuBLAS,
# "conv-sanitize" compute-sanitizer's memcheck, racecheck and synccheck over conv03 and conv04 (scripts/conv_sanitize.py),
# "bmm-sanitize" the same over tc07's batched build, both epilogues (scripts/bmm_sanitize.py),
# "tile-sanitize" the same over every tc07 tile auto can launch, forced at small problems, several tiles a block (scripts/tile_sanitize.py),
# "wgrad-sanitize" the same over conv06 (the filter gradient through the im2col map) in each of its schedules (scripts/wgrad_sanitize.py),
# "host" host time a call at 64^3 with gemm()'s table of kinds of call on and off, against torch (scripts/profile_host.py record),
# "conv-fuzz" `gemmlab conv-fuzz` over CONV_FUZZ_CASES random convolutions (default 10000; conv02, conv03, conv04 and im2col in their risky regimes against float64 and cuDNN;
# CONV_FUZZ_SECONDS at most, default 420, after compiling the builds the cases launch: conv04 compiles
# each geometry in, about 1800 builds for 10000 cases), failing on any wrong one or on fewer convolutions than that):
# The GPU tests alone outlast a call: about 3,400 of them, 17% done in 570 s on an H200 (2026-11-29),
# so some 55 minutes in all. TEST_SHARD=I/N runs the I-th of N slices of them (pytest --shard, in
# collection order: tests/conftest.py), e.g. TEST_SHARD=1/6 ... 6/6 with COMPILE=0, a call each.
# a device call is limited to 10 minutes, so a full run needs several calls, e.g.
# COMPILE=0 STEPS="tests" TEST_SHARD=1/6 to 6/6, then STEPS="check", then COMPILE=0 STEPS="fuzz" (the fuzz compiles what it launches; the call is then full) then STEPS="sanitize" then COMPILE=0 STEPS="racecheck" then STEPS="overhead bench sustained"
# (on an H100 host "tests check sanitize" together ran past 10 minutes in racecheck, 2026-11-23; on an
# H200 the compile step, memcheck and the small racecheck alone took most of a call, 2026-11-24).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export GEMMLAB_CACHE_DIR=${GEMMLAB_CACHE_DIR:-/tmp/gemmlab-cache}
export CUDA_CACHE_DISABLE=${CUDA_CACHE_DISABLE:-1}  # ptxas reports on every compile (gemmlab/jit.py)
status=0
LOG="$OUT/gpu_run.log"
: > "$LOG"
step() { echo "=== $*" | tee -a "$LOG"; }
fail() { echo "FAILED STEP: $*" | tee -a "$LOG"; status=1; }  # names the command that set the status
STEPS=${STEPS:-tests check fuzz overhead bench}
# The device copy's .git, where one is found, need not be this tree's (2026-11-23: records of a
# later tree carried 958f8d7): the records' commit must come from the machine that made the tree.
[[ -n "${GEMMLAB_COMMIT:-}" ]] || echo "warning: GEMMLAB_COMMIT is not set; records take the commit of whatever .git the copy holds" >&2
want() { [[ " $STEPS " == *" $1 "* ]]; }

step "environment and compile (resource report for the driver's arch)"
{ nvidia-smi
  python3 -c "import torch, cuda.core; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cuda.core', cuda.core.__version__)"
  # COMPILE=0 skips the resource report of every config (several minutes on a fresh machine), for
  # calls that need the time: the racecheck step alone fits in a call, not after it (H200, 2026-11-24)
  # -j 0: one thread a CPU core (in processes it took about a minute for every config on 16 cores)
  [[ "${COMPILE:-1}" == 0 ]] || python3 -m gemmlab compile -j 0; } 2>&1 | tee -a "$LOG" || fail "environment and compile"

# Tests of kernels that have not yet run on a GPU (PENDING_TESTS) run after the others, each file
# under a time limit of its own: a kernel whose barriers never complete hangs rather than fails, and
# must not take the rest of the call with it. A file leaves the list once it has passed on a GPU.
PENDING_TESTS=${PENDING_TESTS-}  # none now (FP32 step 15, conv03, the batched build and bmm-bench passed on an H100)
if want tests; then
  step "GPU tests"
  ignore=(); for f in $PENDING_TESTS; do ignore+=(--ignore "$f"); done
  shard=(); [[ -z "${TEST_SHARD:-}" ]] || shard=(--shard "$TEST_SHARD")
  python3 -m pytest -q -m gpu tests "${ignore[@]}" "${shard[@]}" -p no:cacheprovider 2>&1 | tee -a "$LOG" || fail "GPU tests"
  for f in $PENDING_TESTS; do
    step "GPU tests of a kernel not yet run on a GPU: $f (${PENDING_SECONDS:-240} s at most)"
    timeout "${PENDING_SECONDS:-240}" python3 -m pytest -q -x -m gpu "$f" -p no:cacheprovider 2>&1 | tee -a "$LOG" \
      || fail "GPU tests of $f"
  done
fi

if want check; then
  step "check"
  python3 -m gemmlab check --pending 2>&1 | tee -a "$LOG" || fail "check"
fi

if want fuzz; then
  step "fuzz: ${FUZZ_CASES:-100000} random problems in the kernels' risky regimes against float64 and cuBLAS"
  python3 -m gemmlab fuzz --cases "${FUZZ_CASES:-100000}" --min-cases "${FUZZ_CASES:-100000}" --seconds "${FUZZ_SECONDS:-480}" \
    --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "fuzz"
fi

if want conv-fuzz; then
  step "conv-fuzz: ${CONV_FUZZ_CASES:-10000} random convolutions (conv02, conv03, conv04, im2col) against float64 and cuDNN"
  python3 -m gemmlab conv-fuzz --cases "${CONV_FUZZ_CASES:-10000}" --min-cases "${CONV_FUZZ_CASES:-10000}" \
    --seconds "${CONV_FUZZ_SECONDS:-420}" --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "conv-fuzz"
fi

if want accuracy; then
  step "accuracy: precision=3xtf32 against float64 and cuBLAS SGEMM, K from 1 to 65536 (the contract's records)"
  python3 -m gemmlab accuracy --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "accuracy"
fi

# compute-sanitizer over the Hopper steps at small odd shapes (tc09's at shapes it splits):
# device-side errors only; the host-side cuGetProcAddress probes of cuda.core are filtered out
# (their count, 34 with cuda-core 1.2.0, stays in the ERROR SUMMARY line). racecheck is slow:
# each step takes ~15 s at 515x129x67, tc08 ~1 min and tc09 ~3 min at 1500x4000x300, and tc05-tc07
# over 150 s there (H200, 2026-11-24), so the larger shape is raced only for the stream-K steps,
# in a call of its own (STEPS="racecheck").
sanitize() {  # tool, shapes ("-s A -s B"), then kernels; a hazard fails racecheck and synccheck (memcheck
  # counts the host-side probes among its errors, so it fails only on a wrong result)
  local exitcode=(); [[ "$1" == memcheck ]] || exitcode=(--error-exitcode 99)
  compute-sanitizer --tool "$1" "${exitcode[@]}" --print-limit 20 python3 -m gemmlab check $2 "${@:3}" --random 0 2>&1 \
    | grep -v "cuGetProcAddress\|Saved host backtrace\|Host Frame\|^========= *$" | grep -E "=====|passed|FAIL" | tee -a "$LOG"
}
if want sanitize; then
  step "compute-sanitizer: memcheck over tc05-tc09, racecheck over tc05-tc09"
  hopper="-k tc05_tma -k tc06_warp_specialized -k tc07_persistent_cluster -k tc08_tf32 -k tc09_stream_k"
  sanitize memcheck "-s 515x129x67 -s 1500x4000x300 -s 3072x3072x130" $hopper || fail "memcheck"
  sanitize racecheck "-s 515x129x67" $hopper || fail "racecheck"
  # Several tiles a block with K of one or two stages (the 128 x 192 tile of tc07 at the first, tc09's
  # whole tiles and stream-K at the second): where the staging race lay (docs/notes/epilogue-staging-race.md)
  step "compute-sanitizer: racecheck and synccheck where persistent blocks take several tiles with a short K"
  for tool in racecheck synccheck; do
    sanitize $tool "-s 2894x3139x45" -k tc07_persistent_cluster || fail "$tool tc07, several tiles a block"
    sanitize $tool "-s 3072x3072x86" -k tc09_stream_k || fail "$tool tc09, several tiles a block"
  done
  # tc11 (3xTF32): its pre-pass and the GEMM at a small odd shape, and with several tiles a block
  # and a K of two stages
  step "compute-sanitizer: memcheck, racecheck and synccheck over tc11 (3xTF32)"
  for tool in memcheck racecheck synccheck; do
    sanitize $tool "-s 515x129x67 -s 2894x3139x45" -k tc11_3xtf32 || fail "$tool tc11"
  done
  # The FP32 steps past the seeds where they split K over runs (the last run adds the parts): step 12
  # at a small output with a long K, step 13 at a few rows and at one (A read from global memory),
  # step 14 at a few columns
  step "compute-sanitizer: memcheck and racecheck over the FP32 steps 12-14 where they split K"
  for tool in memcheck racecheck; do
    sanitize $tool "-s 96x80x40000 -s 5x1000x50000 -s 1x1000x50000 -s 64x3x131072" \
      -k sgemm_12_split_k -k sgemm_13_few_rows -k sgemm_14_few_columns || fail "$tool, FP32 steps 12-14"
    # step 12 reading a B stored transposed (x @ w.t(), TB = 1): split, odd, and both reductions
    sanitize $tool "-s 96x80x40000 -s 7x17x127 -s 17x127x20011 -s 300x200x1000" -k sgemm_12_split_k --layout nt \
      || fail "$tool, FP32 step 12 on a transposed B"
  done
fi

# conv03 (TMA im2col, wgmma) and conv04 (few channels: gathered from a staged input tile): memcheck,
# racecheck and synccheck over a few small convolutions, conv03's with the staged epilogue and the
# register one, conv04's over 1, 3 and 5 input channels with bias and activation, every persistent
# block walking several tiles (scripts/conv_sanitize.py)
if want conv-sanitize; then
  step "compute-sanitizer: memcheck, racecheck and synccheck over conv03, conv04 and conv05 (several tiles a block; conv05's gradients)"
  for tool in memcheck racecheck synccheck; do
    exitcode=(); [[ "$tool" == memcheck ]] || exitcode=(--error-exitcode 99)
    compute-sanitizer --tool $tool "${exitcode[@]}" --print-limit 20 python3 scripts/conv_sanitize.py 2>&1 \
      | grep -v "cuGetProcAddress\|Saved host backtrace\|Host Frame\|^========= *$" | grep -E "=====|passed|FAIL" \
      | tee -a "$LOG"
    [[ "${PIPESTATUS[0]}" == 0 ]] || fail "$tool conv03, conv04, conv05"
  done
fi

# memcheck, racecheck and synccheck over a script's launches (--report-api-errors no: memcheck then
# counts device errors only, not torch's host-side probes, and can fail the step on one)
sanitize_script() {  # script, what the failure names
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 --print-limit 20 python3 "$1" 2>&1 \
      | grep -v "cuGetProcAddress\|Saved host backtrace\|Host Frame\|^========= *$" | grep -E "=====|passed|FAIL" \
      | tee -a "$LOG"
    [[ "${PIPESTATUS[0]}" == 0 ]] || fail "$tool $2"
  done
}

# tc07's batched build (bmm in one launch): the same three tools, the staged epilogue (rank-3 map
# over D) and the register one, every persistent block walking several tiles across batch entries
# (scripts/bmm_sanitize.py)
if want bmm-sanitize; then
  step "compute-sanitizer: memcheck, racecheck and synccheck over tc07's batched build, several tiles a block"
  sanitize_script scripts/bmm_sanitize.py "bmm one launch"
fi

# Every tc07 tile auto can launch, forced at small odd problems with three clusters' worth of blocks
# walking several tiles each (scripts/tile_sanitize.py): the sanitizer runs at a one-wave shape
# where auto takes the 192 x 128 tile ran past two minutes of racecheck (H200, 2026-11-29)
if want tile-sanitize; then
  step "compute-sanitizer: memcheck, racecheck and synccheck over every tc07 tile, several tiles a block"
  sanitize_script scripts/tile_sanitize.py "tc07 tiles"
fi

# conv06, the filter gradient through the im2col map: split-K, whole tiles and stream-K pieces with
# the grid forced down to six blocks (scripts/wgrad_sanitize.py)
if want wgrad-sanitize; then
  step "compute-sanitizer: memcheck, racecheck and synccheck over conv06, each schedule, several pieces a block"
  sanitize_script scripts/wgrad_sanitize.py "conv06"
fi

if want racecheck; then
  step "compute-sanitizer: racecheck over the stream-K steps (tc08, tc09) at 1500x4000x300"
  sanitize racecheck "-s 1500x4000x300" -k tc08_tf32 -k tc09_stream_k || fail "racecheck, stream-K steps"
fi

if want conv; then
  # gemmlab.conv2d as called (algorithm="auto": the step it picks a layer) against cuDNN on ResNet-50's
  # layers, bf16, fp16 and float32; then the steps alone: im2col, conv02 and conv03 (bf16 and fp16;
  # layers a step cannot serve run im2col)
  step "conv-bench: ResNet-50's convolutions against cuDNN (sweeps/conv/resnet50.toml)"
  python3 -m gemmlab conv-bench --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "conv-bench"
  for alg in im2col implicit tma; do
    python3 -m gemmlab conv-bench --algorithm $alg --dtype bf16 --dtype fp16 --out "$OUT/results" 2>&1 | tee -a "$LOG" \
      || fail "conv-bench $alg"
  done
fi

if want conv-depthwise; then
  step "conv-bench: depthwise layers against cuDNN (sweeps/conv/depthwise.toml, conv05 on auto)"
  python3 -m gemmlab conv-bench --sweep sweeps/conv/depthwise.toml --algorithm auto --out "$OUT/results" 2>&1 | tee -a "$LOG" \
    || fail "conv-bench depthwise"
  # and a training step's passes (forward, dgrad, wgrad) against cuDNN's, batch 32
  for dt in bf16 fp32; do
    python3 scripts/depthwise_bench.py $dt backward 2>&1 | tee -a "$LOG" || fail "depthwise_bench $dt backward"
  done
fi

if want conv-grouped; then
  step "conv-bench: ResNeXt-50's grouped layers against cuDNN (sweeps/conv/resnext50.toml, conv02's grouped build on auto)"
  python3 -m gemmlab conv-bench --sweep sweeps/conv/resnext50.toml --algorithm auto --out "$OUT/results" 2>&1 | tee -a "$LOG" \
    || fail "conv-bench grouped"
  for mode in "" backward "backward narrow"; do  # (narrow: conv05's layers, their dgrad and wgrad, without the slow path)
    python3 scripts/grouped_paths.py bf16,fp16 32,256 $mode 2>&1 | tee -a "$LOG" || fail "grouped_paths $mode"
  done
fi

if want few-tiles; then
  step "bf16 GEMMs on a few tc04 tiles against tc09 staged and torch.mm (scripts/probe_few_tiles.py)"
  python3 scripts/probe_few_tiles.py 2>&1 | tee -a "$LOG" || fail "probe_few_tiles"
fi

if want conv-tiles; then
  # conv03 on each of its tiles, layer by layer (the record's tile_ms): what CONV03_TILE_COST guesses
  step "conv-bench --tiles: conv03 on every tile of ResNet-50's layers, bf16 (${CONV_TILES_SECONDS:-480} s at most)"
  timeout "${CONV_TILES_SECONDS:-480}" python3 -m gemmlab conv-bench --algorithm tma --tiles --dtype bf16 --out "$OUT/results" 2>&1 \
    | tee -a "$LOG" || fail "conv-bench --tiles"
fi

if want linear; then
  # gemmlab.linear (bias and GELU in the GEMM's epilogue) against torch eager and torch.compile
  step "linear-bench: Llama 3's MLP weights with GELU against torch eager and torch.compile (sweeps/linear/llama-mlp.toml)"
  python3 -m gemmlab linear-bench --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "linear-bench"
fi

if want bmm; then
  # gemmlab.bmm over a batch, in one launch (tc07's batched build) and per matrix, against torch.bmm.
  # Under a time limit (on an H100 the sweep took under a minute)
  step "bmm-bench: batched bf16 GEMM against torch.bmm, B = 8-64, M = N = K = 512-2048 (sweeps/bmm/grid.toml; ${BMM_SECONDS:-480} s at most)"
  timeout "${BMM_SECONDS:-480}" python3 -m gemmlab bmm-bench --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "bmm-bench"
fi

if want train; then
  # a transformer block's training step, every nn.Linear swapped for gemmlab.nn.Linear, against the
  # same block on torch's own (same weights, input, target; the losses and gradients checked first)
  step "train-bench: a transformer block's training step in bf16 at 8192 tokens, d_model 1024 and 4096, against torch's own Linear (sweeps/train/block.toml; ${TRAIN_SECONDS:-480} s at most)"
  timeout "${TRAIN_SECONDS:-480}" python3 -m gemmlab train-bench --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "train-bench"
fi

if want train-amp; then
  # the same step as torch's mixed-precision recipe runs it: float32 parameters and AdamW, the forward
  # pass in a bf16 autocast region (gemmlab.amp casts for gemmlab.nn.Linear as torch does for its own)
  step "train-bench: the block's training step under torch.autocast to bf16, float32 parameters (sweeps/train/block-amp.toml; ${TRAIN_SECONDS:-480} s at most)"
  timeout "${TRAIN_SECONDS:-480}" python3 -m gemmlab train-bench --sweep sweeps/train/block-amp.toml --out "$OUT/results" 2>&1 \
    | tee -a "$LOG" || fail "train-bench, mixed precision"
fi

if want wgrad; then
  step "wgrad-bench: ResNet-50's filter gradients on conv06, on the im2col matrix and on cuDNN (scripts/wgrad_bench.py)"
  python3 scripts/wgrad_bench.py --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "wgrad-bench"
fi

if want model; then
  step "model-bench: torchvision's ResNet-50 on gemmlab (gemmlab.nn.convert) against torch's own, inference and a training step, bf16 (scripts/model_bench.py; ${MODEL_SECONDS:-480} s at most)"
  timeout "${MODEL_SECONDS:-480}" python3 scripts/model_bench.py --model resnet50 --out "$OUT/results" 2>&1 \
    | tee -a "$LOG" || fail "model-bench"
fi

if want cold-start; then
  # a program's first bf16 and fp32 gemm() with an empty and a warm cubin cache, in fresh processes
  # with their own temporary caches (the compile step above does not warm them)
  step "cold-start: first calls with an empty and a warm cache, beside torch.mm's"
  python3 -m gemmlab cold-start --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "cold-start"
fi

if want overhead; then
  step "overhead"
  python3 -m gemmlab overhead --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "overhead"
fi

if want host; then
  step "host time a call at 64^3: torch.mm, gemmlab.gemm and gemmlab.linear with gemm()'s table of kinds of call on and off"
  python3 scripts/profile_host.py record --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "host"
fi

if want bench; then
  step "bench: gemm()'s choice in each dtype against cuBLAS (the README's main job)"
  python3 -m gemmlab bench --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "bench overview"

  step "bench, FP32 ladder"
  python3 -m gemmlab bench --ladder --pending --out "$OUT/results" ${FP32_BENCH_ARGS:-} "$@" 2>&1 | tee -a "$LOG" || fail "bench float32"

  step "bench, tensor-core ladder (bf16, fp16, float32 as TF32, and 16-bit inputs with fp32 output)"
  for dt in bf16 fp16 tf32 bf16-fp32out fp16-fp32out; do
    python3 -m gemmlab bench --ladder --dtype $dt --pending --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "bench $dt"
  done
fi

if want fp32-shapes; then
  step "bench: exact float32 over sweeps/fp32-shapes.toml against cuBLAS SGEMM"
  python3 -m gemmlab bench --sweep sweeps/fp32-shapes.toml --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "fp32-shapes"
fi

if want 3xtf32; then
  step "bench: precision=3xtf32 (tc11) against cuBLAS SGEMM"
  python3 -m gemmlab bench -k tc11_3xtf32 --dtype 3xtf32 --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "bench 3xtf32"
fi

if want models; then
  step "bench: Llama 3 8B's and 70B's layers (sweeps/models.toml) against cuBLAS"
  python3 -m gemmlab bench --sweep sweeps/models.toml --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "models"
fi

if want layouts; then
  # Transposed views, read in place by tc07 and tc09: B stored transposed (nt: x @ w.t() of a [N, K]
  # weight, K-major tiles), A stored transposed (tn: dy.t() @ x, the weight gradient, M-major tiles),
  # and both (tt); the squares and a weight gradient's tall K
  step "bench, transposed views (nt, tn, tt): bf16 and fp16 on tc07/tc09, TF32 nt on tc08, against cuBLAS on the same views"
  for layout in ${LAYOUTS:-nt tn tt}; do
    for dt in bf16 fp16; do
      python3 -m gemmlab bench --dtype $dt --layout $layout -k tc07_persistent_cluster -k tc09_stream_k \
        -s 2048x2048x2048 -s 4096x4096x4096 -s 6144x6144x6144 -s 8192x8192x8192 -s 3135x3135x3135 \
        -s 4096x4096x16384 --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "bench $dt $layout"
    done
  done
  # TF32 (tc08) reads a B stored transposed from shared memory (TB = 1); other layouts are copied
  if [[ " ${LAYOUTS:-nt tn tt} " == *" nt "* ]]; then
    python3 -m gemmlab bench --dtype tf32 --layout nt -k tc08_tf32 -s 2048x2048x2048 -s 4096x4096x4096 \
      -s 6144x6144x6144 -s 8192x8192x8192 -s 5120x5120x5120 -s 4096x4096x16384 \
      --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "bench tf32 nt"
  fi
fi

if want sustained; then
  # back to back at the power limit: clock, power and throughput against cuBLAS (gemmlab sustained)
  step "sustained: the Hopper steps at 4096 and 8192 with the card at its power limit"
  python3 -m gemmlab sustained --dtype bf16 -k tc07_persistent_cluster -k tc09_stream_k -s 4096 -s 6144 -s 8192 \
    --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "sustained bf16"
  python3 -m gemmlab sustained --dtype tf32 -k tc08_tf32 -s 4096 -s 8192 --out "$OUT/results" 2>&1 | tee -a "$LOG" \
    || fail "sustained tf32"
fi

if want bench && [ "${CPU_BENCH:-1}" != 0 ]; then
  step "CPU ladder on this machine's cores at seed 001's 2048x2048x1024 (against the GPU above)"
  python3 -m gemmlab bench --device cpu -s 2048x2048x1024 -k cpu02_reordered -k cpu03_blocked -k cpu04_parallel \
    --out "$OUT/results" 2>&1 | tee -a "$LOG" || fail "bench cpu"
fi

# The device tool brings back at most 8 files a call: past 7 records, one archive of them instead.
if [ -d "$OUT/results" ] && [ "$(find "$OUT/results" -type f | wc -l)" -gt 7 ]; then
  tar czf "$OUT/results.tar.gz" -C "$OUT" results && rm -rf "$OUT/results" \
    && echo "records packed into results.tar.gz (tar xzf it at the repo root)" | tee -a "$LOG"
fi
echo "gpu_run status: $status" | tee -a "$LOG"
exit $status
