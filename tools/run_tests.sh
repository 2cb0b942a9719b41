#!/usr/bin/env bash
# The README's test command: set up (if needed), then every test — the Meson/Catch2 suites
# (core, plugins, loader zoo, fl-plugin-check) and the pytest suite of the binding.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup.sh" || exit 1
cd "$ROOT"
status=0
echo "== meson test (C++ suites)"
meson test -C build --print-errorlogs --num-processes 2 || status=1
echo "== pytest (binding)"
"$ROOT/.venv/bin/python" -m pytest -q tests/python || status=1
if command -v clang++ >/dev/null; then
  echo "== fuzzing (libFuzzer, bounded: ${FL_FUZZ_SECONDS:-20} s per target)"
  bash tests/fuzz/run_fuzz.sh "${FL_FUZZ_SECONDS:-20}" "$ROOT/build/fuzz" || status=1
else
  echo "== fuzzing skipped: clang++ not installed (tools/setup.sh installs it when it can)"
fi
if [[ "${FL_TEST_SANITIZERS:-0}" != 0 ]]; then
  # Opt-in (about 16 min of extra build on 2 cores): core, the CPU plugin, the zoo and the
  # Catch2 suites under ASan+UBSan (and TSan with FL_TEST_SANITIZERS=all).
  echo "== sanitizers (${FL_TEST_SANITIZERS})"
  which=asan; [[ "${FL_TEST_SANITIZERS}" == all ]] && which=all
  JOBS="$(nproc)" bash tests/sanitizers/run_sanitizers.sh "$which" "$ROOT/build-sanitize" || status=1
fi
exit $status
