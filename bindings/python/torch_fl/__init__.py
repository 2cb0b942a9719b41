"""torch_fl — PyTorch on every accelerator through one vendor-neutral runtime.

`import torch_fl` (or just `import torch`, through the `torch.backends` entry point) makes
every device of every loaded Torch-FL plugin usable as `fl:0 … fl:N-1`:

    x = torch.randn(4, 4, device="fl:0")
    model.to("fl")

The C++ extension `_C` lives in the Meson build tree (build/bindings/python/torch_fl/); the
package's __path__ is extended to find it (pkgutil.extend_path over sys.path).
"""
from __future__ import annotations

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)  # noqa: F821 - finds build/.../torch_fl/_C

import torch

from . import _version_check

_version_check.check_torch_version(torch.__version__)

from . import _C  # noqa: E402
from . import device_module as _device_module  # noqa: E402
from .tools import (  # noqa: E402
    fallback_report,
    fallback_stats,
    list_devices,
    loaded_plugins,
    op_support,
    profile,
    reset_fallback_stats,
    skipped_plugins,
)
from .coverage import coverage_report  # noqa: E402

__all__ = [
    "list_devices",
    "loaded_plugins",
    "skipped_plugins",
    "op_support",
    "fallback_stats",
    "fallback_report",
    "reset_fallback_stats",
    "profile",
    "coverage_report",
]

_registered = False


def _register() -> None:
    """Renames PrivateUse1 to `fl` and registers torch.fl; idempotent."""
    global _registered
    if _registered:
        return
    torch.utils.rename_privateuse1_backend("fl")
    torch._register_device_module("fl", _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True
    )
    _registered = True


def _autoload() -> None:
    """Entry point of the `torch.backends` group: `import torch` loads torch_fl."""
    # Importing this module already registered everything.


_register()

from . import _lightning_hook  # noqa: E402,F401 - Trainer(accelerator="fl") registers itself when Lightning loads
