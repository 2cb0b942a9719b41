#!/usr/bin/env bash
# The README's test command: set up (if needed), then every test — the Meson/Catch2 suites
# (core, plugins, loader zoo, fl-plugin-check), the pytest suite of the binding, bounded
# libFuzzer runs, and the C++ suites again under ASan+UBSan and TSan.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup.sh" || exit 1
cd "$ROOT"
status=0
echo "== meson test (C++ suites)"
meson test -C build --print-errorlogs --num-processes 2 || status=1
echo "== pytest (binding)"
"$ROOT/.venv/bin/python" -m pytest -q tests/python || status=1
# clang's libFuzzer runtime is a package of its own (libclang-rt-<version>-dev): a link is probed.
fuzz_links() {
  local dir rc
  dir="$(mktemp -d)"
  printf 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }\n' |
    clang++ -x c++ -fsanitize=fuzzer,address - -o "$dir/probe" 2>"$dir/err"
  rc=$?
  [[ $rc -eq 0 ]] || tail -3 "$dir/err"
  rm -rf "$dir"
  return $rc
}
if ! command -v clang++ >/dev/null; then
  echo "== fuzzing skipped: clang++ not installed (tools/setup.sh installs it when it can)"
elif ! fuzz_links; then
  echo "== fuzzing skipped: clang++ cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)"
else
  echo "== fuzzing (libFuzzer, bounded: ${FL_FUZZ_SECONDS:-20} s per target)"
  bash tests/fuzz/run_fuzz.sh "${FL_FUZZ_SECONDS:-20}" "$ROOT/build/fuzz" || status=1
fi
# Core, the CPU plugin, the zoo and the Catch2 suites (the multi-thread stress test among
# them) rebuilt and run under ASan+UBSan and under TSan: about 16 min of extra build on
# 2 cores. FL_TEST_SANITIZERS=asan or =tsan runs one of the two, =0 skips them (a quick
# local run); CI runs both.
case "${FL_TEST_SANITIZERS:-all}" in
  0) echo "== sanitizers skipped (FL_TEST_SANITIZERS=0)" ;;
  asan|tsan|all)
    echo "== sanitizers (${FL_TEST_SANITIZERS:-all})"
    JOBS="$(nproc)" bash tests/sanitizers/run_sanitizers.sh "${FL_TEST_SANITIZERS:-all}" "$ROOT/build-sanitize" || status=1
    ;;
  *) echo "FL_TEST_SANITIZERS must be 0, asan, tsan or all" >&2; status=1 ;;
esac
exit $status
