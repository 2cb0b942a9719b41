"""The same checks with device memory the host may not dereference (the CPU plugin's
FL_CPU_HOST_ACCESSIBLE=0, as a GPU's): copies, CPU-fallback write-back, RNG, serialization,
resizes and sparse tensors then take the binding's staging paths instead of host aliases, and
a host read of device memory faults (the plugin hands out addresses with bit 55 set), as it
would on a GPU: the binding's resize_ read device memory with a host memcpy, which only the
H200 showed until then."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_python

HERE = Path(__file__).resolve().parent
SUBSET = ["test_copy.py", "test_fallback.py", "test_random.py", "test_serialization.py", "test_streams.py",
          "test_autograd.py", "test_memory.py", "test_sparse.py"]
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


def test_a_host_read_of_device_memory_faults_as_on_a_gpu():
    code = ("import ctypes, torch, torch_fl\n"
            "x = torch.full((4,), 3.0, device='fl:0')\n"
            "print('PTR', x.data_ptr(), flush=True)\n"
            "print('SUM', x.sum().item(), flush=True)\n"
            "print('READ', ctypes.c_float.from_address(x.data_ptr()).value, flush=True)\n")
    fenced = run_python(code, env={"FL_CPU_HOST_ACCESSIBLE": "0"})
    assert "SUM 12.0" in fenced.stdout, fenced.stdout + fenced.stderr
    pointer = int(fenced.stdout.split("PTR ")[1].split()[0])
    assert pointer & (1 << 55)
    assert "READ" not in fenced.stdout and fenced.returncode != 0
    plain = run_python(code, env={"FL_CPU_HOST_ACCESSIBLE": None})
    assert plain.returncode == 0 and "READ 3.0" in plain.stdout, plain.stdout + plain.stderr
