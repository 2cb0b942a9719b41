"""Lightning on fl devices: `Trainer(accelerator="fl", devices=N)`.

    import torch_fl.lightning   # registers "fl" (torch_fl does it by itself when Lightning loads)
    trainer = lightning.pytorch.Trainer(accelerator="fl", devices=1)               # fl:0
    trainer = lightning.pytorch.Trainer(accelerator="fl", devices=2, strategy="ddp")
    trainer = lightning.pytorch.Trainer(accelerator="fl", devices=1, precision="bf16-mixed")

What importing this module does:
- registers `FlAccelerator` as "fl" in lightning.pytorch's AcceleratorRegistry;
- registers the "flccl" process-group backend (torch_fl.distributed), which maps the device
  type "fl" to "flccl" in torch.distributed.Backend.default_device_backend_map — that is where
  Lightning's DDP strategy looks up the backend for the root device;
- wraps three choices of Lightning that are hard-wired to built-in device names, changing
  them only for fl: with one device Lightning's accelerator connector builds
  `SingleDeviceStrategy(device="cpu")` for any accelerator that is not CUDA/MPS — we build it
  on the selected fl device instead; "16-mixed"/"bf16-mixed" build
  `MixedPrecision(..., device="cuda")` — we pass device="fl" (autocast on fl, which needs the
  binding's AutocastPrivateUse1 kernels); and DDPStrategy passes `device_ids=[index]` with a
  `torch.cuda.Stream` for any non-CPU root device — for fl it passes None.

Lightning (2.6) reads accelerators from its registry only; it has no entry-point group for
them, so registration needs this module imported: `torch_fl` installs an import hook that
imports it as soon as Lightning's accelerator connector is imported (see
torch_fl/_lightning_hook.py). Only the `lightning` package is handled, not the standalone
`pytorch_lightning` one, and Lightning Fabric (its own registry) is not registered.
"""
from __future__ import annotations

from typing import Any, Union

import torch
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.trainer.connectors import accelerator_connector as _connector_module

import torch_fl  # noqa: F401 - registers the fl device
from . import distributed as _distributed

__all__ = ["FlAccelerator", "register"]


def _parse_fl_devices(devices: Union[int, str, list[int], tuple[int, ...], None]) -> list[int]:
    """Lightning's `devices=` for fl: an int N (the first N devices; -1 all), "auto", a string
    "0,1" or "2", or a list of indices. Returns the indices."""
    count = torch.fl.device_count()
    if devices is None or devices == "auto":
        return list(range(count))
    if isinstance(devices, str) and "," in devices:
        indices = [int(p) for p in devices.split(",") if p.strip()]
    elif isinstance(devices, (int, str)):  # a count: "2" as 2
        n = int(devices)
        if n < -1:
            raise ValueError(f"devices={devices!r}: a count must be -1 (all) or >= 0")
        indices = list(range(count)) if n == -1 else list(range(n))
    else:
        indices = [int(i) for i in devices]
    if not indices:
        raise ValueError(f"devices={devices!r} selects no fl device")
    if len(set(indices)) != len(indices):
        raise ValueError(f"devices={devices!r}: each fl device may be listed once")
    bad = [i for i in indices if not 0 <= i < count]
    if bad:
        raise ValueError(f"devices={devices!r}: fl has {count} device(s), no index {bad}")
    return indices


class FlAccelerator(Accelerator):
    """Lightning accelerator for Torch-FL devices (`fl:N`, any plugin)."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != "fl":
            raise ValueError(f"FlAccelerator needs an fl device, got {device}")
        torch.fl.set_device(device.index or 0)

    def teardown(self) -> None:
        torch.fl.empty_cache()

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """The caching allocator's counters (torch.fl.memory_stats) for `device`."""
        return torch.fl.memory_stats(device)

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        return _parse_fl_devices(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        indices = devices if isinstance(devices, list) and all(isinstance(i, int) for i in devices) \
            else _parse_fl_devices(devices)
        return [torch.device("fl", i) for i in indices]

    @staticmethod
    def auto_device_count() -> int:
        return torch.fl.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.fl.is_available()

    @staticmethod
    def name() -> str:
        return "fl"

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        accelerator_registry.register("fl", cls, description="Torch-FL devices (any vendor plugin)",
                                      override=True)


# ---- connector choices that Lightning hard-wires to built-in devices ---------------------

_Connector = _connector_module._AcceleratorConnector


def _uses_fl(connector: Any) -> bool:
    return isinstance(getattr(connector, "accelerator", None), FlAccelerator)


def _wrap_connector() -> None:
    if getattr(_Connector, "_torch_fl_wrapped", False):
        return
    choose_strategy = _Connector._choose_strategy
    init_precision = _Connector._check_and_init_precision

    def _choose_strategy(self):
        strategy = choose_strategy(self)
        if _uses_fl(self) and isinstance(strategy, SingleDeviceStrategy) and strategy.root_device.type != "fl":
            device = self._parallel_devices[0] if self._parallel_devices else torch.device("fl", 0)
            return SingleDeviceStrategy(device=torch.device(device))
        return strategy

    def _check_and_init_precision(self):
        if _uses_fl(self) and self._precision_plugin_flag is None and \
                self._precision_flag in ("16-mixed", "bf16-mixed"):
            self._validate_precision_choice()
            return MixedPrecision(self._precision_flag, device="fl")
        return init_precision(self)

    _Connector._choose_strategy = _choose_strategy
    _Connector._check_and_init_precision = _check_and_init_precision
    _Connector._torch_fl_wrapped = True

    # DDPStrategy wraps the model in DDP(device_ids=[index]) under `torch.cuda.stream(...)`
    # whenever the root device is not the CPU; for fl the ids are None (DDP on a single-device
    # module; Lightning already moves each batch to the root device).
    ddp_device_ids = DDPStrategy.determine_ddp_device_ids

    def determine_ddp_device_ids(self):
        if self.root_device.type == "fl":
            return None
        return ddp_device_ids(self)

    DDPStrategy.determine_ddp_device_ids = determine_ddp_device_ids


def register() -> None:
    """Registers "fl" with Lightning and "flccl" with torch.distributed (idempotent)."""
    _distributed.register()
    FlAccelerator.register_accelerators(AcceleratorRegistry)
    _wrap_connector()


register()
