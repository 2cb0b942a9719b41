"""The same checks with device memory the host may not dereference (the CPU plugin's
FL_CPU_HOST_ACCESSIBLE=0, as a GPU's): copies, CPU-fallback write-back, RNG and
serialization then take the binding's staging paths instead of host aliases."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_python

HERE = Path(__file__).resolve().parent
SUBSET = ["test_copy.py", "test_fallback.py", "test_random.py", "test_serialization.py", "test_streams.py",
          "test_autograd.py"]
OPS_SUBSET = "inplace or out_argument or setitem or indexing or cat_and_stack or strided"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["FL_CPU_HOST_ACCESSIBLE"] = "0"
    return env


def test_staging_paths_pass_the_same_checks():
    probe = run_python("import torch_fl; print('HOST', torch_fl.list_devices()[0]['host_accessible'])",
                       env={"FL_CPU_HOST_ACCESSIBLE": "0"})
    assert probe.returncode == 0, probe.stderr
    if "HOST False" not in probe.stdout:
        pytest.skip("this CPU plugin build ignores FL_CPU_HOST_ACCESSIBLE")
    base = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:warnings"]
    for args in (SUBSET, ["test_ops.py", "-k", OPS_SUBSET]):
        r = subprocess.run(base + args, cwd=HERE, env=_env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
