#!/usr/bin/env bash
# Sets up a fresh clone for use in place: Debian build dependencies, .venv with torch 2.13.0,
# the Meson build in build/, and the .venv wiring so that `.venv/bin/python -c "import
# torch_fl"` works with no extra variables. Idempotent: a second run only rebuilds what changed.
#
#   bash tools/setup.sh            # what the README's two commands call first
#
# Environment: FL_SETUP_SKIP_APT=1 skips apt-get (packages already present); PYTHON selects the
# interpreter for the venv (default python3.11, else python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '\n== setup: %s\n' "$*"; }

APT_PACKAGES=(meson ninja-build pkg-config g++ libboost-dev libboost-filesystem-dev libfmt-dev
              libspdlog-dev libyaml-cpp-dev nlohmann-json3-dev catch2 libopenblas-dev)
# The HIP plugin compiles (never runs) here with Debian's ROCm toolchain, so it cannot rot.
# clang builds the libFuzzer targets; its fuzzer/ASan runtimes are a separate package that
# --no-install-recommends leaves out (without it the fuzz targets fail to link).
APT_OPTIONAL=(hipcc libamdhip64-dev clang libclang-rt-14-dev)

PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then PY=$(command -v python3.11 || command -v python3); fi
# The binding compiles against the interpreter's headers (Python.h): a distribution's Python
# ships them apart, as python3.X-dev (a pyenv or python.org build has them already).
has_python_h() {
  "$PY" -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"
}
PYDEV="python$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-dev"
has_python_h || APT_PACKAGES+=("$PYDEV")

missing=()
for p in "${APT_PACKAGES[@]}" "${APT_OPTIONAL[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 && "${FL_SETUP_SKIP_APT:-0}" != 1 ]]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${APT_PACKAGES[@]}"
  # Optional toolchains: a missing one only disables the plugin that needs it.
  $SUDO apt-get install -y -q --no-install-recommends "${APT_OPTIONAL[@]}" ||
    echo "setup: optional packages (${APT_OPTIONAL[*]}) not installed; HIP plugin/fuzzers skipped"
fi

if ! has_python_h; then
  echo "setup: $PY has no Python.h (the binding needs it): install $PYDEV" >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv with $PY"
  "$PY" -m venv .venv
fi
VPY="$ROOT/.venv/bin/python"
# torch is pinned exactly: a loose requirement would pull a multi-GB CUDA build.
if ! "$VPY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
  log "installing torch==2.13.0 and the Python tools"
  "$VPY" -m pip install -q torch==2.13.0
fi
"$VPY" -m pip install -q "numpy" "scikit-learn" "tqdm" "pytest" "pyyaml" "lightning==2.6.6" 2>&1 | grep -v "is ignored" || true

# The CUDA plugin builds whenever nvcc exists; cuBLAS/cuDNN headers come from NVIDIA's wheels.
MESON_EXTRA=()
if command -v nvcc >/dev/null; then
  if ! "$VPY" -c "import nvidia.cublas, nvidia.cudnn" 2>/dev/null; then
    log "nvcc found: installing cuBLAS and cuDNN headers/libraries (NVIDIA wheels)"
    "$VPY" -m pip install -q --no-deps nvidia-cublas==13.1.1.3 nvidia-cudnn-cu13==9.24.0.43 ||
      echo "setup: cuBLAS/cuDNN wheels unavailable; the CUDA plugin builds without them if it can"
  fi
  # cudnn-frontend headers (header-only): convolutions through cached cuDNN graph plans.
  if [[ ! -f "$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/include/cudnn_frontend.h" ]]; then
    "$VPY" -m pip install -q --no-deps nvidia-cudnn-frontend==1.14.0 ||
      echo "setup: nvidia-cudnn-frontend unavailable; convolutions use cuDNN's legacy API"
  fi
fi

log "configuring and building (meson, build/)"
if [[ ! -f build/build.ninja ]]; then
  # The HIP plugin is only compile-checked here (no AMD GPU): one GPU target keeps that
  # quick; a real ROCm build sets FL_HIP_ARCHS to its targets.
  FL_HIP_ARCHS="${FL_HIP_ARCHS:-gfx90a}" meson setup build -Dpython="$VPY" "${MESON_EXTRA[@]}"
fi
ninja -C build -j"$(nproc)"

log "wiring torch_fl into .venv"
SITE=$("$VPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
printf '%s\n%s\n' "$ROOT/bindings/python" "$ROOT/build/bindings/python" > "$SITE/torch_fl.pth"
# A dist-info so that `import torch` autoloads torch_fl (torch.backends entry point) and
# Lightning finds the fl accelerator.
DIST="$SITE/torch_fl-0.1.0.dist-info"
mkdir -p "$DIST"
printf 'Metadata-Version: 2.1\nName: torch_fl\nVersion: 0.1.0\nSummary: Torch-FL device runtime (used in place from %s)\n' "$ROOT" > "$DIST/METADATA"
printf '[torch.backends]\ntorch_fl = torch_fl._entry:autoload\n' > "$DIST/entry_points.txt"
printf 'torch_fl.pth,,\n' > "$DIST/RECORD"
printf 'tools/setup.sh\n' > "$DIST/INSTALLER"
"$VPY" -c "import torch_fl; print('setup: torch_fl ready:', [d['device'] + ' ' + d['name'] for d in torch_fl.list_devices()])"
