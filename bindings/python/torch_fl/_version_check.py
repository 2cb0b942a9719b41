"""Refuses to load against a torch the extension was not built for, with a clear message."""
from __future__ import annotations

import os
import sys

# torch minors the binding is written for (the C++ uses APIs stable across these).
SUPPORTED_MINORS = ("2.11", "2.12", "2.13")


def _built_version() -> str | None:
    for d in __import__("torch_fl").__path__:
        p = os.path.join(d, "_torch_version.txt")
        if os.path.exists(p):
            with open(p) as f:
                return f.read().strip()
    return None


def incompatibility(running: str) -> str | None:
    """Why this process's torch cannot load the extension, or None when it can."""
    running_minor = ".".join(running.split("+")[0].split(".")[:2])
    if running_minor not in SUPPORTED_MINORS:
        return (
            f"torch_fl supports torch {', '.join(SUPPORTED_MINORS)}; this process runs torch "
            f"{running}. Install one of those (pip install torch==2.13.0) or rebuild torch_fl "
            "against this torch (meson setup build --wipe, then ninja -C build)."
        )
    built = _built_version()
    if built is not None and built.split("+")[0] != running.split("+")[0]:
        return (
            f"torch_fl's extension was built against torch {built} but this process runs "
            f"torch {running}; the C++ ABI differs between releases. Rebuild: "
            "`meson setup build --reconfigure && ninja -C build` with this python."
        )
    return None


def check_torch_version(running: str) -> None:
    why = incompatibility(running)
    if why is not None:
        raise ImportError(why)


def loaded_by_torch_autoload() -> bool:
    """True while torch's own `import torch` is loading the `torch.backends` entry points."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_import_device_backends" and frame.f_globals.get("__name__") == "torch":
            return True
        frame = frame.f_back
    return False
