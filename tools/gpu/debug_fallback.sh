#!/usr/bin/env bash
# Narrows down a crash in the CPU-fallback path on the GPU machine: builds only what the
# python side needs, then runs a one-op fallback under cuda-gdb (backtrace), once with the
# fallback warning on and once with it off (config fallback.warn_once: false).
set -uo pipefail
. .devdeps/unpack-deps.sh >/dev/null 2>&1; unset CPATH
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
B=build-gpu
[[ -f $B/build.ninja ]] || meson setup $B -Dpython=/opt/torch/.venv/bin/python3 -Dcuda=enabled -Dtests=disabled >/dev/null
ninja -C $B -j16 bindings/torch_fl_ext_link plugins/cuda/libfl_cuda.so plugins/cpu/libfl_cpu.so 2>&1 | tail -2
export FL_PLUGIN_PATH=$PWD/$B/plugins/cuda/libfl_cuda.so PYTHONPATH=$PWD/bindings/python:$PWD/$B/bindings/python
cat > /tmp/r.py <<'PY'
import torch, torch_fl
y = torch.ones(8).to("fl:0")
print("hypot", torch.hypot(y, y).cpu(), flush=True)
x = torch.empty(8, device="fl:0"); x.normal_(); print("normal ok", flush=True)
PY
echo "== warn on"; timeout 60 python -X faulthandler /tmp/r.py 2>&1 | grep -v Warn | tail -4
timeout 120 cuda-gdb -batch -ex run -ex bt --args python /tmp/r.py 2>&1 | grep -E "^#[0-9] |^#1[0-2] |SIG" | cut -c1-220
printf 'fallback:\n  warn_once: false\n' > /tmp/nowarn.yaml
echo "== warn off"; FL_CONFIG=/tmp/nowarn.yaml timeout 60 python -X faulthandler /tmp/r.py 2>&1 | tail -4
