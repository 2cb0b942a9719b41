"""Loading torch_fl: the torch version check, and the `torch.backends` entry point that lets a
plain `import torch` register fl."""
from __future__ import annotations

import textwrap

import torch_fl
from conftest import run_python

NO_AUTOLOAD = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def test_unsupported_torch_minor_is_import_error():
    code = textwrap.dedent("""
        import torch
        torch.__version__ = "2.9.1"
        try:
            import torch_fl
        except ImportError as e:
            print("IMPORT ERROR:", e)
    """)
    r = run_python(code, env=NO_AUTOLOAD)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "IMPORT ERROR:" in out
    for minor in torch_fl._version_check.SUPPORTED_MINORS:
        assert minor in out
    assert "2.9.1" in out


def test_other_patch_release_than_built_is_import_error():
    code = textwrap.dedent("""
        import torch
        torch.__version__ = "2.13.7+cpu"
        try:
            import torch_fl
        except ImportError as e:
            print("IMPORT ERROR:", e)
    """)
    r = run_python(code, env=NO_AUTOLOAD)
    assert r.returncode == 0, r.stderr
    assert "IMPORT ERROR:" in r.stdout and "built against torch 2.13.0" in r.stdout


def _write_dist_info(site):
    info = site / "torch_fl_autoload_check-0.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-fl-autoload-check\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_fl = torch_fl._entry:autoload\n")


AUTOLOAD_CODE = textwrap.dedent("""
    import sys
    import torch
    print("LOADED", "torch_fl" in sys.modules, hasattr(torch, "fl"))
    if hasattr(torch, "fl"):
        x = torch.arange(4.0, device="fl")
        print("DEVICE", x.device, (x * 2).cpu().tolist())
""")


def test_import_torch_alone_registers_fl_through_entry_point(tmp_path):
    _write_dist_info(tmp_path)
    r = run_python("import sys; sys.path.insert(0, %r)\n" % str(tmp_path) + AUTOLOAD_CODE,
                   env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
    assert r.returncode == 0, r.stderr
    assert "LOADED True True" in r.stdout
    assert "DEVICE fl:0 [0.0, 2.0, 4.0, 6.0]" in r.stdout


def test_autoload_can_be_switched_off(tmp_path):
    _write_dist_info(tmp_path)
    r = run_python("import sys; sys.path.insert(0, %r)\n" % str(tmp_path) + AUTOLOAD_CODE, env=NO_AUTOLOAD)
    assert r.returncode == 0, r.stderr
    assert "LOADED False False" in r.stdout


def test_autoload_with_incompatible_torch_warns_and_keeps_torch_usable(tmp_path):
    _write_dist_info(tmp_path)
    # Patch the version seen by torch_fl before torch's __init__ reaches the entry points.
    code = textwrap.dedent("""
        import sys, warnings
        sys.path.insert(0, %r)
        import importlib.util, os
        torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
        spec = importlib.util.spec_from_file_location("torch.version", os.path.join(torch_dir, "version.py"))
        version = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(version)
        version.__version__ = "2.9.0"
        sys.modules["torch.version"] = version
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import torch
        print("TORCH OK", torch.ones(2).sum().item(), hasattr(torch, "fl"))
        print("WARNED", any("supports torch" in str(w.message) for w in caught))
    """) % str(tmp_path)
    r = run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
    assert r.returncode == 0, r.stderr
    assert "TORCH OK 2.0 False" in r.stdout, r.stdout + r.stderr
    assert "WARNED True" in r.stdout
