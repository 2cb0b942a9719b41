"""The CPU plugin's OpenBLAS: loaded by the plugin at init with kernels for this CPU. OpenBLAS
0.3.21 (Debian's) does not know recent Xeons (family 6 model 207, the CI machine's and the H200
machine's) and falls back to its SSE3 kernels ("Prescott"), 3-5x slower on the GEMMs of the
examples; the plugin then loads it again with OPENBLAS_CORETYPE set, as a user would, unless the
user set it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from conftest import run_python

# OpenBLAS's x86-64 kernel sets with AVX2 or wider (openblas_get_corename's spelling, lower case).
AVX2_CORES = {"haswell", "zen", "excavator", "skylakex", "cooperlake", "sapphirerapids"}


def _cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def _blas_line(env: dict) -> str:
    code = "import torch, torch_fl; print(torch.fl.device_count())"
    r = run_python(code, env={"FL_LOG_LEVEL": "debug", "FL_CPU_DEVICES": "1", **env})
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "cpu plugin: OpenBLAS" in ln]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _kernels(line: str) -> str:
    return re.search(r", (\w+) kernels", line).group(1).lower()


@pytest.mark.skipif(not {"avx2", "fma"} <= _cpu_flags(), reason="needs an x86-64 CPU with AVX2 and FMA")
def test_the_plugin_runs_openblas_kernels_with_the_avx2_this_cpu_has():
    line = _blas_line({"OPENBLAS_CORETYPE": None})
    kernels = _kernels(line)
    assert kernels in AVX2_CORES, line
    best = "skylakex" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= _cpu_flags() else "haswell"
    if "OpenBLAS chose" in line:  # OpenBLAS did not know this CPU: the plugin's choice took effect
        assert "[torch_fl info]" in line and kernels == best, line
        assert re.search(r"OpenBLAS chose (\w+)", line).group(1).lower() not in AVX2_CORES, line


@pytest.mark.skipif(not {"avx2", "fma"} <= _cpu_flags(), reason="needs an x86-64 CPU with AVX2 and FMA")
def test_a_core_the_user_chose_is_kept():
    line = _blas_line({"OPENBLAS_CORETYPE": "Haswell"})
    assert _kernels(line) == "haswell" and "OpenBLAS chose" not in line, line
    assert "[torch_fl debug]" in line


@pytest.mark.skipif(not {"avx2", "fma"} <= _cpu_flags(), reason="needs an x86-64 CPU with AVX2 and FMA")
def test_an_openblas_held_by_another_component_is_kept_with_a_warning_naming_the_fix():
    line = _blas_line({"OPENBLAS_CORETYPE": None})
    if "OpenBLAS chose" not in line:
        pytest.skip("OpenBLAS knows this CPU: nothing to replace")
    library = re.search(r" from (\S+), ", line).group(1)
    # Loaded before the plugin (as a library linking it would): the plugin's reload returns the
    # same instance, whose kernels stay.
    held = _blas_line({"OPENBLAS_CORETYPE": None, "LD_PRELOAD": library})
    assert "[torch_fl warning]" in held and "could not load other kernels" in held, held
    assert _kernels(held) not in AVX2_CORES
    assert re.search(r"Set OPENBLAS_CORETYPE=(\w+)", held).group(1).lower() in AVX2_CORES


def test_gemms_after_the_reload_match_torch():
    # The reloaded library computes: a float32 addmm and a float64 matmul against torch's CPU.
    a, b, bias = torch.randn(257, 300), torch.randn(300, 65), torch.randn(65)
    fa, fb, fbias = (t.to("fl:0") for t in (a, b, bias))
    torch.testing.assert_close(torch.addmm(fbias, fa, fb).cpu(), torch.addmm(bias, a, b), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close((fa.double() @ fb.double()).cpu(), a.double() @ b.double(), rtol=1e-12, atol=1e-10)
