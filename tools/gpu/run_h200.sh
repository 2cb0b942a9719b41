#!/usr/bin/env bash
# tools/gpu/run_h200.sh — everything the owner runs on the lent H200 machine, in one call:
#
#   . .devdeps/unpack-deps.sh is sourced here; run from the repository root:
#   bash tools/gpu/run_h200.sh            # logs and results under $OUT (default ./gpu-out)
#
# Steps (one function each; each step's output is tee'd to $OUT/<step>.log; a failing step
# is recorded and the next one runs; a summary with per-step status and seconds ends it):
#   env_info      nvidia-smi, driver/toolkit/compiler/python/torch versions, cuDNN location
#   deps          sources .devdeps/unpack-deps.sh (fmt, spdlog, yaml-cpp, boost, catch2 .debs)
#   configure     meson setup build-gpu with /opt/torch/.venv's python, -Dcuda=enabled
#   build         ninja -C build-gpu
#   plugin_check  fl-plugin-check on libfl_cuda.so -> $OUT/plugin_check_cuda.json (+ text)
#   dlopen_smoke  loads libfl_cuda.so with python ctypes, init, device list, kernel count
#   vendor_tests  the Catch2 suite test_vendor_plugins (fl-plugin-check on each vendor plugin
#                 built, the CUDA plugin's sync= option and FL_CUDA_SYNC), here with a device
#   example_cnn   examples/train_cnn.py on fl:0 (the CUDA plugin only), then on cuda:0 apart
#   bench_compare bench/compare.py --native cuda:0 --fl fl:0
#   profile       bench/profile_step.py per training model, cuda:0 then fl:0
#   check_ops     tools/gpu/check_against_cpu.py: ops, LSTM/GRU, a sparse embedding, a CSR graph layer and an
#                 AdamW step against PyTorch's CPU
#   attention_entries  tools/gpu/check_cuda_attention_entries.py: the CUDA plugin's cuDNN fused-attention
#                 entries called directly (declines, layouts, masked rows, timing against torch's cuDNN)
#   native_ops    tools/gpu/check_against_native_cuda.py: the CUDA plugin's div (each rounding mode and
#                 kind of divisor), mul, add/sub, addcmul, addcdiv, lerp against PyTorch's CUDA, bit for bit
#   mixed_plugins tools/gpu/check_mixed_plugins.py: seeded dropout on each plugin, HeteroDataParallel
#                 across the CPU and CUDA plugins against a plain loop on the GPU, the fork guard
#   lightning     tests/python/_lightning_fit.py on the CUDA device (32-true, bf16-mixed) and
#                 strategy="ddp" over the CPU-plugin and CUDA devices (one rank each), without and
#                 with torch_fl.lightning.ResyncReplicas(4), and with sync_batchnorm=True; Lightning's
#                 pure-Python packages come from .lightning-site (carry it; see step_lightning)
#   flccl_mixed   tools/gpu/nccl_check.py --mixed: torch.distributed on fl with a CPU-plugin rank and a
#                 CUDA-plugin rank (every collective, DDP against the big batch)
#   rounding      tools/gpu/rounding_across_plugins.py: elements not bit-identical between the CPU
#                 plugin, the CUDA plugin and torch's CPU for an optimizer's elementwise steps
#   hetero        bench/hetero.py and examples/hetero_train.py on the CPU + CUDA plugins
#   hetero_example  examples/hetero_train.py alone
#   fallback_survey tools/fallback_survey.py: ops of common model families not native on CUDA
#   hetero_target the issue's H200 target as the ninth session measured it: the wide-MLP example
#                 on pinned rows at batch 65536 (1,048,576 rows, 12 epochs), FL_CPU_THREADS=12
#                 unless set; FL_HETERO_TARGET_RUNS runs (default 1); FL_HETERO_TARGET_BATCH,
#                 _SAMPLES and _EPOCHS change the batch, the rows and the epochs; FL_HETERO_TARGET_ARGS
#                 adds arguments (e.g. "--granularity 1024", "--ema 0.1"), FL_HETERO_TARGET_EVEN_ARGS more
#                 to the even runs only (e.g. "--no-backup": an A/B on one machine); each run's steps and balancer
#                 records go to $OUT/hetero_target_run<k>.json (the example's --history)
#   shard_scaling bench/shard_scaling.py: forward/backward time per shard size, CPU and CUDA plugins
#   cpu_plugin    the CPU plugin on this host alone: its OpenBLAS line, bench/compare.py against torch's
#                 CPU (FL_CPU_COMPARE_WORKLOADS, default "wide gemm cnn"), the wide MLP's op profile
#                 at 4096 rows, and the same with the OpenBLAS carried in .devdeps preloaded (the
#                 library the plugin ran before it loaded OpenBLAS itself: which kernels it chose here)
#   blas_spin     the CPU plugin alone per OPENBLAS_THREAD_TIMEOUT in FL_BLAS_TIMEOUTS (default "4 16 28";
#                 the plugin sets 4 unless the user did, OpenBLAS's own default is 28): compare.py
#                 against torch's CPU on the wide MLP and its op profile at 4096 rows
#   pair_wide     bench/hetero.py on the wide MLP per CPU-plugin thread count
#   host_bandwidth  bench/host_bandwidth.py: host copies beside pageable copies to the GPU
#   interference  bench/interference.py (what each device's pass loses beside the other's loads)
#                 and bench/hetero.py with a fixed split and its step timeline
#   probe         a diagnostic script with both plugins (FL_PROBE_SCRIPT, default
#                 tools/gpu/probe_gradient_shipping.py; tools/gpu/probe_switch_in.py times a
#                 split's first step after steps alone), arguments from FL_PROBE_ARGS
#   hetero_gpus   bench/hetero.py on two CUDA devices, and on CPU + two CUDA (2-GPU machines)
#   nccl          tools/gpu/nccl_check.py and bench/collectives.py (2-GPU machines)
#   <more>        OWNER HOOKS: add a function step_<name> and list it in STEPS below.
#
# Environment: FL_GPU_VENV (default /opt/torch/.venv), OUT, FL_BUILD_DIR (default build-gpu),
# FL_BENCH_WORKLOADS (default "small_ops gemm cnn"), FL_CNN_EPOCHS (default 3), FL_CNN_REPEATS
# (default 1: fl runs of the digits example), FL_CUDA_SYNC (the CUDA plugin's wait mode).
# Before the call, here: `../shared/device/pack-deps.sh libopenblas-dev libopenblas0
# libopenblas0-pthread libopenblas-pthread-dev` (the CPU plugin, which fl-plugin-check uses as
# its reference, needs pkg-config's `openblas`; the default pack does not carry it), and name
# `.devdeps` in `carry` (and `.cudnn-frontend`, see step_configure).
# The plugin finds cuBLAS/cuDNN through its RUNPATH (set at build time from where meson
# found them); LD_LIBRARY_PATH is not needed for it.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-out}"
mkdir -p "$OUT"
VENV="${FL_GPU_VENV:-/opt/torch/.venv}"
PY="$VENV/bin/python3"
BUILD="${FL_BUILD_DIR:-build-gpu}"
CUDA_SO="$ROOT/$BUILD/plugins/cuda/libfl_cuda.so"
export PATH="$VENV/bin:/usr/local/cuda/bin:$PATH"

STEP_NAMES=()
STEP_STATUS=()
STEP_SECONDS=()

# run_step NAME FUNCTION: runs FUNCTION in a subshell, output tee'd to $OUT/NAME.log.
run_step() {
  local name="$1" fn="$2"
  local start end rc
  echo
  echo "================ step $name ($(date -u +%H:%M:%S)) ================"
  start=$(date +%s.%N)
  ( set -o pipefail; "$fn" ) 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  end=$(date +%s.%N)
  STEP_NAMES+=("$name")
  STEP_STATUS+=("$rc")
  STEP_SECONDS+=("$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')")
  echo "---------------- step $name: exit $rc ----------------"
  return 0
}

# The python steps see only the CUDA plugin, and torch_fl from this tree.
python_env() {
  export FL_PLUGIN_PATH="$CUDA_SO"
  export PYTHONPATH="$ROOT/bindings/python:$ROOT/$BUILD/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
}

step_env_info() {
  nvidia-smi || echo "nvidia-smi failed"
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,memory.total,clocks.max.sm --format=csv || true
  echo "--- toolchain"
  nvcc --version || echo "nvcc missing"
  g++ --version | head -1
  "$PY" --version
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'available', torch.cuda.is_available())"
  "$VENV/bin/meson" --version 2>/dev/null || meson --version
  "$VENV/bin/ninja" --version 2>/dev/null || ninja --version
  echo "--- pkg-config (from .devdeps)"
  for p in fmt spdlog yaml-cpp nlohmann_json catch2 openblas; do
    printf '%-14s %s\n' "$p" "$(pkg-config --modversion "$p" 2>/dev/null || echo 'MISSING')"
  done
  echo "--- cuBLAS / cuDNN candidates"
  local site
  site=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  ls -d "$site"/nvidia/* 2>/dev/null
  ls "$site"/nvidia/cudnn/lib 2>/dev/null | head
  ls /usr/local/cuda/lib64 | grep -E "cublas|cudart" || true
  echo "--- profilers"; command -v nsys ncu || ls /usr/local/cuda/bin | grep -iE "nsys|ncu|nvprof" || echo "no nsys/ncu"
  nproc; free -g | head -2
}

step_configure() {
  # cudnn-frontend headers carried from here (the GPU machine's venv lacks the wheel):
  #   mkdir -p .cudnn-frontend && cp -r .venv/lib/python3.*/site-packages/include .cudnn-frontend/
  [[ -f .cudnn-frontend/include/cudnn_frontend.h ]] && export FL_CUDNN_FRONTEND_ROOT="$ROOT/.cudnn-frontend"
  local extra=()
  [[ -f "$BUILD/build.ninja" ]] && extra+=(--reconfigure)
  meson setup "$BUILD" "${extra[@]}" -Dpython="$PY" -Dcuda=enabled -Dbuildtype=release
}

step_build() {
  ninja -C "$BUILD" -k 0 -j"$(nproc)"
}

step_plugin_check() {
  local tool="$ROOT/$BUILD/tools/plugin_check/fl-plugin-check"
  if [[ ! -x "$tool" ]]; then echo "fl-plugin-check not built; skipping"; return 0; fi
  "$tool" --json "$CUDA_SO" > "$OUT/plugin_check_cuda.json"
  local rc=$?
  "$tool" "$CUDA_SO" || true
  return $rc
}

step_vendor_tests() {
  meson test -C "$BUILD" --print-errorlogs test_vendor_plugins
}

step_dlopen_smoke() {
  "$PY" - "$CUDA_SO" <<'PYEOF'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_LOCAL)
print("loaded", sys.argv[1])
lib.fl_plugin_get_ops.restype = ctypes.c_void_p
print("fl_plugin_get_ops ->", hex(lib.fl_plugin_get_ops()))
PYEOF
}

step_example_cnn() {
  python_env
  if [[ ! -f examples/train_cnn.py ]]; then echo "examples/train_cnn.py absent; skipping"; return 0; fi
  # Native CUDA in its own process (pytorch#161129: no native CUDA autograd beside fl).
  "$PY" examples/train_cnn.py --device fl:0 --epochs "${FL_CNN_EPOCHS:-3}" --json "$OUT/example_cnn_fl.json"
  local rc=$? k
  # FL_CNN_REPEATS > 1: the fl side again, to tell run-to-run differences from fl-vs-cuda ones.
  for ((k = 2; k <= ${FL_CNN_REPEATS:-1}; k++)); do
    "$PY" examples/train_cnn.py --device fl:0 --epochs "${FL_CNN_EPOCHS:-3}" --json "$OUT/example_cnn_fl_$k.json" || rc=1
  done
  (unset FL_PLUGIN_PATH; "$PY" examples/train_cnn.py --device cuda:0 --epochs "${FL_CNN_EPOCHS:-3}" \
     --json "$OUT/example_cnn_cuda.json") || true
  return $rc
}

step_bench_compare() {
  python_env
  if [[ ! -f bench/compare.py ]]; then echo "bench/compare.py absent; skipping"; return 0; fi
  # shellcheck disable=SC2086
  "$PY" bench/compare.py --native cuda:0 --fl fl:0 --workloads ${FL_BENCH_WORKLOADS:-small_ops gemm cnn} \
    --timeout "${FL_BENCH_TIMEOUT:-300}" --json "$OUT/bench_compare.json"
}

# ---- OWNER HOOKS: add steps here (function step_<name>, then list <name> in STEPS) ----

# Op-by-op and AdamW-step agreement of the CUDA plugin with PyTorch's CPU results.
step_check_ops() {
  python_env
  "$PY" tools/gpu/check_against_cpu.py fl:0
}

# tools/fallback_survey.py: which ops of small LLaMA/UNet/ViT/GAN steps and metric code are not
# native on the CUDA plugin.
step_fallback_survey() {
  python_env
  "$PY" tools/fallback_survey.py fl:0
}

# tools/gpu/check_device_errors.py: an index out of range found by a CUDA kernel raises at the
# next wait, and the device works on.
step_device_errors() {
  python_env
  "$PY" tools/gpu/check_device_errors.py fl:0
}

# Bit-for-bit agreement of the CUDA plugin's elementwise arithmetic with PyTorch's own CUDA.
step_native_ops() {
  python_env
  "$PY" tools/gpu/check_against_native_cuda.py fl:0 cuda:0
}

# The CUDA plugin's fused-attention entries called directly (ctypes), against a float64
# reference and torch's own cuDNN attention.
step_attention_entries() {
  python_env
  "$PY" tools/gpu/check_cuda_attention_entries.py "$BUILD/plugins/cuda/libfl_cuda.so"
}

# Heterogeneous data parallel: the CUDA device and a CPU-plugin device in one process (bench
# and the example), then, on a machine with two GPUs, two CUDA devices and all three.
both_plugins_env() {
  python_env
  export FL_PLUGIN_PATH="$CUDA_SO:$ROOT/$BUILD/plugins/cpu/libfl_cpu.so"
}

cpu_plugin_blas() {  # the CPU plugin's OpenBLAS and the kernel set it runs (its init log line)
  # The plugins load when torch_fl first needs its devices, not at import.
  FL_LOG_LEVEL=debug "$PY" -c "import torch, torch_fl; torch.fl.device_count()" 2>&1 | grep "cpu plugin: OpenBLAS" \
    || echo "cpu plugin: no OpenBLAS line"
}

first_device_of() {  # first_device_of PLUGIN -> fl:N
  "$PY" -c "import sys, torch_fl; print(next(d['device'] for d in torch_fl.list_devices() if d['plugin'] == sys.argv[1]))" "$1"
}

step_mixed_plugins() {
  both_plugins_env
  timeout 120 "$PY" tools/gpu/check_mixed_plugins.py
}

# The GPU machine's venv has no Lightning; here: pip install --no-deps --target .lightning-site
# lightning==2.6.6 lightning-utilities torchmetrics tqdm (pure Python), appended to the path
# so that the venv's own packages come first.
step_lightning() {
  both_plugins_env
  [[ -d .lightning-site ]] && export PYTHONPATH="$PYTHONPATH:$ROOT/.lightning-site"
  export FL_CPU_DEVICES=1
  local rc=0 cuda run
  cuda="$(first_device_of cuda)"
  # Each run: devices strategy precision name [VAR=value ...] (the fit's options, see _lightning_fit.py).
  for run in "${cuda#fl:}, auto 32-true single" "${cuda#fl:}, auto bf16-mixed bf16" "2 ddp 32-true ddp" \
             "2 ddp 32-true ddpresync FL_FIT_RESYNC_EVERY=4" "2 ddp 32-true ddpsyncbn FL_FIT_SYNC_BN=1"; do
    set -- $run
    local devices=$1 strategy=$2 precision=$3 name=$4
    shift 4
    echo "== _lightning_fit.py devices=$devices strategy=$strategy precision=$precision $*"
    env "$@" timeout 180 "$PY" tests/python/_lightning_fit.py "$devices" "$strategy" "$precision" \
      "$OUT/lightning_$name.json" || rc=1
  done
  "$PY" - "$OUT" <<'PYEOF' || rc=1
import glob, json, sys
runs = {}
for path in sorted(glob.glob(sys.argv[1] + "/lightning_*.json.rank*")):
    r = json.load(open(path))
    runs[path.rsplit("/", 1)[1]] = r
    print(f"{path.rsplit('/', 1)[1]}: {r['strategy']} on {r['root_device']} (backend {r['backend']}), "
          f"steps on {r['devices_seen']}, loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
ok = len(runs) == 8 and all(r["losses"][-1] < r["losses"][0] for r in runs.values())
for name in ("ddp", "ddpresync", "ddpsyncbn"):
    ranks = [r for k, r in runs.items() if k.startswith(f"lightning_{name}.")]
    if len(ranks) == 2:
        # With SyncBatchNorm the running statistics are the whole batch's on both ranks too.
        same = ranks[0]["params"] == ranks[1]["params"] and ranks[0].get("buffers") == ranks[1].get("buffers")
        print(f"{name}: ranks on {ranks[0]['root_device']} and {ranks[1]['root_device']}, resyncs "
              f"{[r['resyncs'] for r in ranks]}: parameters identical {same}; per-tensor sums differ by "
              f"{[a - b for a, b in zip(ranks[0]['params'], ranks[1]['params'])]}")
        # Without resync, ranks of two vendors may drift (reported, not failed); with a resync at
        # the last step they must hold rank 0's bits.
        ok = ok and (same or name == "ddp")
sys.exit(0 if ok else 1)
PYEOF
  return $rc
}

step_flccl_mixed() {
  both_plugins_env
  FL_CPU_DEVICES=1 timeout 300 "$PY" tools/gpu/nccl_check.py --mixed
}

step_rounding() {
  both_plugins_env
  FL_CPU_DEVICES=1 timeout 120 "$PY" tools/gpu/rounding_across_plugins.py
}

step_hetero() {
  both_plugins_env
  "$PY" -c "import torch_fl; [print(d['device'], d['plugin'], d['name']) for d in torch_fl.list_devices()]"
  local rc=0
  # shellcheck disable=SC2086
  timeout 420 "$PY" bench/hetero.py --devices cpu cuda --workloads ${FL_HETERO_WORKLOADS:-mlp cnn convnet wide} \
    --steps "${FL_HETERO_STEPS:-30}" --repeats "${FL_HETERO_REPEATS:-3}" --json "$OUT/hetero.json" || rc=1
  step_hetero_example || rc=1
  return $rc
}

# The example once per model (FL_HETERO_EXAMPLE_MODELS, default "digits wide"), pageable
# batches; with FL_HETERO_EXAMPLE_PIN=1 each model again with pinned rows.
step_hetero_example() {
  both_plugins_env
  local rc=0 model cpu cuda
  cpu="$(first_device_of cpu)" cuda="$(first_device_of cuda)"
  for model in ${FL_HETERO_EXAMPLE_MODELS:-digits wide}; do
    echo "== examples/hetero_train.py --model $model"
    # shellcheck disable=SC2086
    if [[ "${FL_HETERO_EXAMPLE_PAGEABLE:-1}" == 1 ]]; then
      timeout 180 "$PY" examples/hetero_train.py --devices "$cpu" "$cuda" --model "$model" \
        --epochs "${FL_HETERO_EPOCHS:-8}" ${FL_HETERO_EXAMPLE_ARGS:-} || rc=1
    fi
    if [[ "${FL_HETERO_EXAMPLE_PIN:-0}" == 1 ]]; then
      echo "== examples/hetero_train.py --model $model --pin ${FL_HETERO_EXAMPLE_ARGS:-}"
      # shellcheck disable=SC2086
      timeout 180 "$PY" examples/hetero_train.py --devices "$cpu" "$cuda" --model "$model" --pin \
        --epochs "${FL_HETERO_EPOCHS:-8}" ${FL_HETERO_EXAMPLE_ARGS:-} || rc=1
    fi
  done
  return $rc
}

step_hetero_target() {
  both_plugins_env
  local rc=0 k cpu cuda
  local batch="${FL_HETERO_TARGET_BATCH:-65536}" samples="${FL_HETERO_TARGET_SAMPLES:-1048576}"
  local epochs="${FL_HETERO_TARGET_EPOCHS:-12}"
  cpu="$(first_device_of cpu)" cuda="$(first_device_of cuda)"
  cpu_plugin_blas
  local extra
  for ((k = 1; k <= ${FL_HETERO_TARGET_RUNS:-1}; k++)); do
    # FL_HETERO_TARGET_EVEN_ARGS: arguments the even runs add (an A/B within one machine's call)
    extra="${FL_HETERO_TARGET_ARGS:-}"
    ((k % 2 == 0)) && extra="$extra ${FL_HETERO_TARGET_EVEN_ARGS:-}"
    echo "== run $k: FL_CPU_THREADS=${FL_CPU_THREADS:-12} examples/hetero_train.py --devices $cpu $cuda --model wide" \
         "--batch-size $batch --samples $samples --epochs $epochs --pin $extra"
    # shellcheck disable=SC2086 # $extra is a list of arguments
    FL_CPU_THREADS="${FL_CPU_THREADS:-12}" timeout 240 "$PY" examples/hetero_train.py --devices "$cpu" "$cuda" \
      --model wide --batch-size "$batch" --samples "$samples" --epochs "$epochs" --pin \
      --history "$OUT/hetero_target_run$k.json" $extra || rc=1
  done
  return $rc
}

step_cpu_plugin() {
  both_plugins_env
  local rc=0 cpu old_blas
  cpu="$(first_device_of cpu)"
  cpu_plugin_blas
  lscpu | grep -E "^Model name|^CPU\(s\)|^Thread|^NUMA node\(s\)" || true
  # shellcheck disable=SC2086
  timeout 300 "$PY" bench/compare.py --native cpu --fl "$cpu" --workloads ${FL_CPU_COMPARE_WORKLOADS:-wide gemm cnn} \
    --json "$OUT/cpu_compare.json" || rc=1
  timeout 120 "$PY" bench/shard_scaling.py --device "$cpu" --workload wide --sizes 1024 4096 --profile || rc=1
  old_blas="$(find /opt/fldeps -name 'libopenblas.so.0' -path '*openblas-pthread*' | head -1)"
  if [[ -n "$old_blas" ]]; then
    echo "== with $old_blas preloaded"
    LD_PRELOAD="$old_blas" cpu_plugin_blas
    LD_PRELOAD="$old_blas" timeout 120 "$PY" bench/shard_scaling.py --device "$cpu" --workload wide --sizes 1024 4096 || rc=1
  fi
  return $rc
}

step_blas_spin() {
  both_plugins_env
  local rc=0 cpu t
  cpu="$(first_device_of cpu)"
  for t in ${FL_BLAS_TIMEOUTS:-4 16 28}; do
    echo "== OPENBLAS_THREAD_TIMEOUT=$t"
    OPENBLAS_THREAD_TIMEOUT=$t timeout 200 "$PY" bench/compare.py --native cpu --fl "$cpu" --workloads wide \
      --json "$OUT/cpu_compare_spin$t.json" || rc=1
    OPENBLAS_THREAD_TIMEOUT=$t timeout 120 "$PY" bench/shard_scaling.py --device "$cpu" --workload wide \
      --sizes 1024 4096 --profile || rc=1
  done
  return $rc
}

# How each plugin's forward/backward time grows with the shard size (the balancer's cost
# model, measured directly), per workload; the CPU plugin also at several OpenBLAS thread
# counts (FL_SCALING_BLAS_THREADS, "default" = unset).
step_shard_scaling() {
  both_plugins_env
  local rc=0 w threads cpu cuda
  cpu="$(first_device_of cpu)" cuda="$(first_device_of cuda)"
  lscpu | grep -E "^Model name|^CPU\(s\)|^Thread|^NUMA node\(s\)|^L3" || true
  for w in ${FL_SCALING_WORKLOADS:-wide cnn}; do
    timeout 120 "$PY" bench/shard_scaling.py --device "$cuda" --workload "$w" --json "$OUT/scaling_${w}_cuda.json" || rc=1
    for threads in ${FL_SCALING_BLAS_THREADS:-default 8 4}; do
      if [[ "$threads" == default ]]; then
        timeout 120 "$PY" bench/shard_scaling.py --device "$cpu" --workload "$w" --profile \
          --json "$OUT/scaling_${w}_cpu.json" || rc=1
      else
        OPENBLAS_NUM_THREADS="$threads" timeout 120 "$PY" bench/shard_scaling.py --device "$cpu" --workload "$w" \
          --json "$OUT/scaling_${w}_cpu_blas${threads}.json" || rc=1
      fi
    done
  done
  return $rc
}

# What one device costs the other in one process (bench/interference.py): the CPU-plugin
# device's pass beside loads on the CUDA device and the other way round, pageable and pinned;
# then bench/hetero.py with a fixed split (FL_SPLIT_PAGEABLE, FL_SPLIT_PINNED: CPU then CUDA
# proportions) and its step timeline. FL_INTERFERENCE_BLAS_THREADS adds CPU-target runs.
step_interference() {
  both_plugins_env
  local rc=0 cpu cuda w="${FL_INTERFERENCE_WORKLOAD:-wide}" threads
  cpu="$(first_device_of cpu)" cuda="$(first_device_of cuda)"
  for pin in "" --pin; do
    timeout 120 "$PY" bench/interference.py --target "$cpu" --other "$cuda" --workload "$w" --shard 1024 $pin \
      --json "$OUT/interference_cpu${pin}.json" || rc=1
    timeout 120 "$PY" bench/interference.py --target "$cuda" --other "$cpu" --workload "$w" --shard 3072 $pin \
      --json "$OUT/interference_cuda${pin}.json" || rc=1
  done
  for threads in ${FL_INTERFERENCE_BLAS_THREADS:-8}; do
    env -u FL_CPU_THREADS OPENBLAS_NUM_THREADS="$threads" timeout 120 "$PY" bench/interference.py --target "$cpu" --other "$cuda" \
      --workload "$w" --shard 1024 --json "$OUT/interference_cpu_blas${threads}.json" || rc=1
  done
  # shellcheck disable=SC2086
  timeout 200 "$PY" bench/hetero.py --devices cpu cuda --workloads "$w" --steps 30 --repeats 2 \
    --split ${FL_SPLIT_PAGEABLE:-1 2} --json "$OUT/hetero_split.json" || rc=1
  # shellcheck disable=SC2086
  timeout 200 "$PY" bench/hetero.py --devices cpu cuda --workloads "$w" --steps 30 --repeats 2 --pin \
    --split ${FL_SPLIT_PINNED:-1 6} --json "$OUT/hetero_split_pinned.json" || rc=1
  return $rc
}

# bench/hetero.py on the copy-bound wide MLP, pageable and pinned, for each CPU-plugin thread
# count in FL_PAIR_CPU_THREADS (default "default 12"; "default" = all cores); FL_PAIR_BATCH sets the
# batch (default: the workload's), FL_PAIR_SPLIT a fixed split (default: the balancer's),
# FL_PAIR_PINS the host batches (default "pageable pinned"), FL_PAIR_ARGS more bench/hetero.py arguments.
step_pair_wide() {
  both_plugins_env
  local rc=0 threads pin w="${FL_INTERFERENCE_WORKLOAD:-wide}" extra=()
  [[ -n "${FL_PAIR_BATCH:-}" ]] && extra+=(--batch-size "$FL_PAIR_BATCH")
  # shellcheck disable=SC2206
  [[ -n "${FL_PAIR_SPLIT:-}" ]] && extra+=(--split $FL_PAIR_SPLIT)
  # shellcheck disable=SC2206
  [[ -n "${FL_PAIR_ARGS:-}" ]] && extra+=($FL_PAIR_ARGS)
  for threads in ${FL_PAIR_CPU_THREADS:-default 12}; do
    for pin in ${FL_PAIR_PINS:-pageable pinned}; do
      if [[ "$pin" == pinned ]]; then pin=--pin; else pin=""; fi
      echo "== $w threads=$threads ${pin:-pageable}"
      if [[ "$threads" == default ]]; then unset FL_CPU_THREADS; else export FL_CPU_THREADS="$threads"; fi
      # shellcheck disable=SC2086
      timeout 200 "$PY" bench/hetero.py --devices cpu cuda --workloads "$w" --steps 30 --repeats "${FL_PAIR_REPEATS:-3}" $pin \
        "${extra[@]}" --json "$OUT/pair_${w}_${threads}${pin}.json" || rc=1
    done
  done
  unset FL_CPU_THREADS
  return $rc
}

# Host memory bandwidth: host copies by thread count, pageable and pinned copies to the CUDA
# device, and both at once (bench/host_bandwidth.py).
step_host_bandwidth() {
  both_plugins_env
  local rc=0
  timeout 120 "$PY" bench/host_bandwidth.py --device "$(first_device_of cuda)" --json "$OUT/host_bandwidth.json" || rc=1
  # The same copies through native torch (no autograd here, so pytorch#161129 does not apply).
  timeout 120 "$PY" bench/host_bandwidth.py --device cuda:0 --json "$OUT/host_bandwidth_native.json" || rc=1
  return $rc
}

# A diagnostic script (FL_PROBE_SCRIPT, default tools/gpu/probe_gradient_shipping.py) with both
# plugins' devices and the arguments in FL_PROBE_ARGS (split on spaces, not expanded).
step_probe() {
  both_plugins_env
  # shellcheck disable=SC2086 # FL_PROBE_ARGS is a list of arguments
  timeout 120 "$PY" "${FL_PROBE_SCRIPT:-tools/gpu/probe_gradient_shipping.py}" ${FL_PROBE_ARGS:-}
}

step_hetero_gpus() {
  both_plugins_env
  if (( $(cuda_device_count) < 2 )); then echo "one CUDA device: nothing to run"; return 0; fi
  local rc=0
  # shellcheck disable=SC2086
  local steps="${FL_HETERO_STEPS:-30}" repeats="${FL_HETERO_REPEATS:-3}" pin=()
  [[ "${FL_HETERO_PIN:-1}" == 1 ]] && pin=(--pin)  # batches from a pinned loader
  timeout 300 "$PY" bench/hetero.py --devices cuda cuda --workloads ${FL_HETERO_GPU_WORKLOADS:-convnet cnn} \
    --steps "$steps" --repeats "$repeats" "${pin[@]}" --json "$OUT/hetero_gpus.json" || rc=1
  timeout 300 "$PY" bench/hetero.py --devices cuda cuda --workloads convnet --batch-size 4096 \
    --steps "$steps" --repeats "$repeats" "${pin[@]}" --json "$OUT/hetero_gpus_4096.json" || rc=1
  if [[ "${FL_HETERO_THREE:-1}" == 1 ]]; then
    timeout 300 "$PY" bench/hetero.py --devices cpu cuda cuda --workloads convnet \
      --steps "$steps" --repeats "$repeats" --json "$OUT/hetero_three.json" || rc=1
  fi
  return $rc
}

# torch.distributed on fl: flccl's NCCL route against host staging (tools/gpu/nccl_check.py),
# and all_reduce bandwidth beside native NCCL (bench/collectives.py). Needs two GPUs.
cuda_device_count() {
  "$PY" -c "import torch_fl; print(sum(d['plugin'] == 'cuda' for d in torch_fl.list_devices()))"
}

step_nccl() {
  both_plugins_env
  if (( $(cuda_device_count) < 2 )); then echo "one CUDA device: nothing to run"; return 0; fi
  local rc=0
  if [[ "${FL_NCCL_CHECK:-1}" == 1 ]]; then timeout 300 "$PY" tools/gpu/nccl_check.py || rc=1; fi
  timeout 400 "$PY" bench/collectives.py --json "$OUT/collectives.json" || rc=1
  return $rc
}

# Where a training step's time goes, each model on both sides (separate processes): wall time,
# GPU kernel time and top kernels (CUPTI), and on fl the ops by host and device time with their
# tier. FL_PROFILE_WORKLOADS picks the models, FL_PROFILE_SIDES="fl" skips the native side.
step_profile() {
  python_env
  local w rc=0
  for w in ${FL_PROFILE_WORKLOADS:-cnn gpt2 resnet50}; do
    if [[ "${FL_PROFILE_SIDES:-cuda fl}" == *cuda* ]]; then
      (unset FL_PLUGIN_PATH; TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PY" bench/profile_step.py --device cuda:0 \
         --workload "$w" --json "$OUT/profile_${w}_cuda.json") || rc=1
    fi
    "$PY" bench/profile_step.py --device fl:0 --workload "$w" --top 40 --json "$OUT/profile_${w}_fl.json" || rc=1
  done
  return $rc
}

STEPS=(${FL_GPU_STEPS:-env_info configure build plugin_check dlopen_smoke check_ops example_cnn bench_compare hetero})

# deps must be sourced in this shell (it exports PKG_CONFIG_PATH, CPATH, ...).
dep_start=$(date +%s.%N)
if [[ -f .devdeps/unpack-deps.sh ]]; then
  # shellcheck disable=SC1091
  . .devdeps/unpack-deps.sh > "$OUT/deps.log" 2>&1
  dep_rc=$?
  # CPATH would put the carried Debian headers (fmt 9 among them) ahead of libtorch's bundled
  # fmt in every compile; meson gets the include paths from pkg-config instead.
  unset CPATH
else
  echo ".devdeps/unpack-deps.sh missing (carry .devdeps)" > "$OUT/deps.log"
  dep_rc=1
fi
STEP_NAMES+=(deps)
STEP_STATUS+=("$dep_rc")
STEP_SECONDS+=("$(awk -v a="$dep_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')")

for s in "${STEPS[@]}"; do
  # After a failed build, the steps that need the plugin have nothing to run.
  if [[ "$s" != env_info && "$s" != configure && "$s" != build && ! -f "$CUDA_SO" ]]; then
    STEP_NAMES+=("$s"); STEP_STATUS+=("skipped: no $CUDA_SO"); STEP_SECONDS+=(0)
    continue
  fi
  run_step "$s" "step_$s"
done

echo
echo "================ summary ================"
for i in "${!STEP_NAMES[@]}"; do
  printf '%-16s %-28s %8ss\n' "${STEP_NAMES[$i]}" "${STEP_STATUS[$i]}" "${STEP_SECONDS[$i]}"
done | tee "$OUT/summary.txt"
echo "logs in $OUT"
# Exit 1 when any step did not exit 0.
grep -qvE '^[a-z_]+ +0 ' "$OUT/summary.txt" && exit 1
exit 0
