#!/usr/bin/env bash
# The README's main command: set up (if needed) and train the digits CNN on fl:0 through
# whatever plugins are found (the CPU plugin everywhere), compared with native CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup.sh"
exec "$ROOT/.venv/bin/python" "$ROOT/examples/train_cnn.py" --device fl:0 --compare cpu "$@"
