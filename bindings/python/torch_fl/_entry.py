"""The `torch.backends` entry point (`torch_fl._entry:autoload`): `import torch` alone makes the
fl device usable.

It lives apart from the package's __init__ because `import torch_fl` itself imports torch,
whose autoload then calls back here while torch_fl is only partly initialized: in that case
there is nothing to do — torch_fl's own import registers fl when it completes."""
from __future__ import annotations

import sys


def autoload() -> None:
    package = sys.modules.get("torch_fl")
    if package is not None and not getattr(package, "_initialized", False):
        return  # torch_fl's import is in progress (it is the one importing torch)
    import torch_fl

    torch_fl._autoload()
