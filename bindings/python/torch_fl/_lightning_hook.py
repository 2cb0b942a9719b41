"""Registers the fl accelerator with Lightning as soon as Lightning loads, so that
`Trainer(accelerator="fl")` works without importing torch_fl.lightning first.

Lightning 2.6 has no entry-point group for accelerators (its registry is filled from its own
modules), and importing Lightning from torch_fl would make every `import torch` pay for it. So
this module installs a one-shot import hook: when `lightning.pytorch.trainer.connectors.
accelerator_connector` has been executed (by then Lightning's accelerator, strategy and
precision modules are loaded), it imports torch_fl.lightning, which registers "fl". If
Lightning is already imported, it registers at once. A failure is a warning, never a failed
Lightning import.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

_TARGET = "lightning.pytorch.trainer.connectors.accelerator_connector"


def _register() -> None:
    try:
        importlib.import_module("torch_fl.lightning")
    except Exception as exc:  # noqa: BLE001 - Lightning must stay importable
        warnings.warn(f"torch_fl: could not register the fl accelerator with Lightning: {exc!r}",
                      RuntimeWarning, stacklevel=2)


class _RegisteringLoader(importlib.abc.Loader):
    """Runs the real loader, then registers fl."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _register()

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _LightningFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        _uninstall()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


_finder = _LightningFinder()


def _uninstall() -> None:
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def install() -> None:
    if _TARGET in sys.modules:
        _register()
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


install()
