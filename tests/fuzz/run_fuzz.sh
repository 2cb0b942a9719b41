#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) and runs each
# for a bounded time, printing its execution count. Needs clang++ (apt-get install clang).
#
#   tests/fuzz/run_fuzz.sh [seconds per target (default 60)] [work dir (default /tmp/fl_fuzz)]
#
# Targets: fuzz_config (fl::parse_config on arbitrary bytes) and fuzz_plugin_table
# (validate_device_ops + validate_kernel_table on table-shaped bytes). Seeds come from
# tests/fuzz/corpus/<target>/; new inputs go to <work dir>/corpus/<target>/ (the repository's
# corpus is not modified). A crash leaves its input in <work dir> and fails the script.
set -euo pipefail

seconds="${1:-60}"
work="${2:-/tmp/fl_fuzz}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cxx="${CXX_FUZZ:-clang++}"
command -v "$cxx" >/dev/null || { echo "run_fuzz.sh: $cxx not found (apt-get install -y clang)" >&2; exit 2; }

mkdir -p "$work"
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$repo/abi" -I"$repo/core")
deps=($(pkg-config --cflags --libs yaml-cpp spdlog fmt))

build() {  # name sources...
  local name="$1"; shift
  echo "== building $name"
  "$cxx" "${flags[@]}" "$@" "${deps[@]}" -o "$work/$name"
}

build fuzz_config "$repo/tests/fuzz/fuzz_config.cpp" "$repo/core/config.cpp" "$repo/core/log.cpp" \
  "$repo/core/error.cpp"
build fuzz_plugin_table "$repo/tests/fuzz/fuzz_plugin_table.cpp" "$repo/core/plugin_validation.cpp" \
  "$repo/core/error.cpp"

status=0
for target in fuzz_config fuzz_plugin_table; do
  seeds="$repo/tests/fuzz/corpus/${target#fuzz_}"
  corpus="$work/corpus/$target"
  mkdir -p "$corpus"
  echo "== running $target for ${seconds}s (seeds: $seeds)"
  log="$work/$target.log"
  if (cd "$work" && "./$target" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
        -timeout=10 "$corpus" "$seeds" >"$log" 2>&1); then
    result=ok
  else
    result=FAILED
    status=1
    tail -40 "$log"
  fi
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 || true)
  echo "$target: $result, $execs executions, $cov, corpus $(ls "$corpus" | wc -l) inputs"
done
exit $status
