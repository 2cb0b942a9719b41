"""`meson install` puts the whole Python package beside its extension: every module of
bindings/python/torch_fl is in the build's install plan (before, only __init__.py was, so an
installed `import torch_fl` found _C but none of parallel, distributed, lightning, ...)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, REPO


def _install_plan() -> dict[str, str]:
    meson = shutil.which("meson")
    if meson is None:
        pytest.skip("meson is not on PATH")
    out = subprocess.run([meson, "introspect", str(BUILD), "--installed"], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    return {str(Path(k).resolve()): v for k, v in json.loads(out).items()}


def test_every_module_of_the_package_is_installed_next_to_the_extension():
    plan = _install_plan()
    package = REPO / "bindings" / "python" / "torch_fl"
    modules = sorted(package.glob("*.py"))
    assert len(modules) > 5
    missing = [m.name for m in modules if str(m.resolve()) not in plan]
    assert not missing, f"not installed by meson: {missing} (list them in bindings/meson.build)"
    extension_dir = {Path(v).parent for k, v in plan.items() if Path(k).name.startswith("_C.")}
    assert len(extension_dir) == 1
    assert {Path(plan[str(m.resolve())]).parent for m in modules} == extension_dir
