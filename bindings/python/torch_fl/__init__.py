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

import warnings

import torch

from . import _version_check

__all__ = [
    "devices",
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
_incompatible = _version_check.incompatibility(torch.__version__)

if _incompatible is not None and not _version_check.loaded_by_torch_autoload():
    raise ImportError(_incompatible)


def _register() -> None:
    """Renames PrivateUse1 to `fl` and registers torch.fl; idempotent."""
    global _registered
    if _registered or _incompatible is not None:
        return
    torch.utils.rename_privateuse1_backend("fl")
    torch._register_device_module("fl", _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True
    )
    _registered = True


def _autoload() -> None:
    """Entry point of the `torch.backends` group: a plain `import torch` makes `fl` usable.
    With an incompatible torch it warns instead of failing `import torch` itself."""
    _register()


if _incompatible is not None:
    # Imported by torch's backend autoload: leave torch usable, without fl.
    warnings.warn(f"{_incompatible} The fl device is not registered.", RuntimeWarning, stacklevel=2)
else:
    from . import _C  # noqa: E402
    from . import device_module as _device_module  # noqa: E402
    from .tools import (  # noqa: E402
        devices,
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

    _register()

    # "flccl" for fl tensors in torch.distributed. Registered at load, not only on `import
    # torch_fl.distributed`: torch's backend autoload makes fl the accelerator, and
    # init_process_group() without a backend then asks for fl's backend, in a CPU-only
    # script too ("We detected accelerator fl ... we don't know which communication backend").
    if torch.distributed.is_available():
        from . import distributed as _distributed  # noqa: E402,F401

    from . import _lightning_hook  # noqa: E402,F401 - Trainer(accelerator="fl") registers itself when Lightning loads

_initialized = True
