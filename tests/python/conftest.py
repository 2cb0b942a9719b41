"""Shared set-up for the binding's tests: two fl devices from the CPU plugin, paths of the
repository and build tree, and helpers that compare fl results with torch's own CPU ops.

FL_CPU_DEVICES must be set before torch_fl (and so the core runtime) is first imported."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tempfile  # noqa: E402

os.environ["FL_CPU_DEVICES"] = "2"
os.environ.pop("FL_PLUGIN_PATH", None)   # the core then loads the plugins of its own build tree
# FL_TEST_PLUGIN_PATH: these tests against the plugins of another build tree (a branch's
# worktree) through this binding, e.g. FL_TEST_PLUGIN_PATH=/tmp/wt/build/plugins/cpu.
if os.environ.get("FL_TEST_PLUGIN_PATH"):
    os.environ["FL_PLUGIN_PATH"] = os.environ["FL_TEST_PLUGIN_PATH"]
# Hermetic configuration: an empty config file (all defaults) instead of ~/.torch_fl/config.yaml,
# and none of the shell's overrides. FL_CPU_HOST_ACCESSIBLE is kept: test_staging sets it.
for _var in ("FL_FALLBACK_STRICT", "FL_ENABLE_CPU_FALLBACK", "FL_ENABLE_GENERIC_KERNEL", "FL_MEMORY_FRACTION",
             "FL_MATMUL_PRECISION", "FL_DETERMINISTIC", "FL_PLUGINS_ENABLE", "FL_PLUGINS_DISABLE", "FL_CPU_THREADS"):
    os.environ.pop(_var, None)
_EMPTY_CONFIG = os.path.join(tempfile.mkdtemp(prefix="fl_tests_"), "config.yaml")
with open(_EMPTY_CONFIG, "w") as _f:
    # The build tree also holds the template plugin (one host-memory device); the tests count
    # on exactly the CPU plugin's two devices as fl:0 and fl:1.
    _f.write("plugins:\n  disable: [template]\n")
os.environ["FL_CONFIG"] = _EMPTY_CONFIG

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_fl  # noqa: E402,F401 - registers the fl device

REPO = Path(__file__).resolve().parents[2]
# The build tree that holds the torch_fl._C in use (…/<build>/bindings/python/torch_fl/_C*.so).
BUILD = Path(torch_fl._C.__file__).absolute().parents[3]
STUB_PLUGIN = BUILD / "tests" / "plugin_zoo" / "libfl_stub.so"


def to_cpu(value):
    """fl tensors (possibly nested in tuples/lists) to CPU, for comparison."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(to_cpu(v) for v in value)
    return value


def to_fl(value, device="fl:0"):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(to_fl(v, device) for v in value)
    return value


def assert_same(actual, expected, rtol=None, atol=None, exact=False):
    """`actual` (fl or CPU) equals the CPU reference `expected`: same dtype, shape and values."""
    actual = to_cpu(actual)
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, rtol, atol, exact)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if exact:
        assert torch.equal(actual, expected)
    else:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with this process's sys.path (so the same torch_fl
    and build tree), plus `env` on top of the current environment."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    if env:
        for k, v in env.items():
            if v is None:
                full_env.pop(k, None)
            else:
                full_env[k] = v
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def layouts(t):
    """(name, tensor) pairs with t's values: t itself, a transposed view and a strided slice, so
    that a kernel is checked on the layouts training code hands it."""
    yield "contiguous", t
    if t.dim() >= 2:
        yield "transposed", t.transpose(0, -1).contiguous().transpose(0, -1)
        yield "sliced", torch.stack([t, t], -1)[..., 1]


def op_calls(stats: dict, base: str) -> dict:
    """Calls per tier of every overload of `base` ("aten::add" sums add.Tensor, add_.Tensor and
    add.out: structured ops reach the router as their out= overload)."""
    total = {"native": 0, "generic": 0, "cpu_fallback": 0}
    stem = base.split("::")[1]
    for name, s in stats.items():
        op = name.split("::")[1].split(".")[0]
        if op in (stem, stem + "_"):
            for k in total:
                total[k] += s[k]
    return total


@pytest.fixture
def fl0():
    return torch.device("fl:0")


@pytest.fixture(autouse=True)
def _restore_current_device():
    before = torch.fl.current_device()
    yield
    torch.fl.set_device(before)
