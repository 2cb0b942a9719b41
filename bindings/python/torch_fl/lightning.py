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
  `torch.cuda.Stream` for any non-CPU root device — for fl it passes None;
- accelerator="auto" looks for a TPU, MPS and CUDA, else takes the CPU: it takes fl instead of
  the CPU when a GPU or NPU plugin has fl devices (FlAutoAccelerator, whose devices="auto" and
  counts are those devices, not the CPU plugin's);
- with devices="auto" in a notebook, Lightning uses one CUDA device (a multi-device run there
  forks) — fl does the same instead of forking a process per device;
- the fork-based launchers (strategy="ddp_fork"/"ddp_notebook") refuse to start once this
  process has used an fl device, as Lightning's fork check does for CUDA: a forked child
  inherits the runtime's state but not its stream worker threads, and its first fl op waits
  forever (with a GPU plugin they always refuse: its driver was initialised when torch_fl
  loaded). The spawn and forkserver launchers move a model that is on fl to the CPU for the
  trip and back afterwards (torch.multiprocessing can only share CPU and CUDA tensors; each
  process moves it to its own device anyway);
- `ResyncReplicas(every_n_steps)`, a callback for DDP over ranks of different plugins: it calls
  torch_fl.distributed.resync every N optimizer steps, so that replicas on plugins whose kernels
  round differently hold rank 0's parameters, buffers and optimizer state again (Lightning adds
  no callback by itself; flccl warns when the ranks' plugins differ);
- the batch-size finder (Tuner.scale_batch_size) recognises only CUDA's and the CPU
  allocator's out-of-memory messages; it also recognises fl's, so the search stops at the
  largest batch that fits instead of failing.

Lightning (2.6) reads accelerators from its registry only; it has no entry-point group for
them, so registration needs this module imported: `torch_fl` installs an import hook that
imports it as soon as Lightning's accelerator connector is imported (see
torch_fl/_lightning_hook.py). Only the `lightning` package is handled, not the standalone
`pytorch_lightning` one, and Lightning Fabric (its own registry) is not registered.
"""
from __future__ import annotations

import re
from typing import Any, Union

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.strategies.launchers import multiprocessing as _launcher_module
from lightning.pytorch.trainer.connectors import accelerator_connector as _connector_module
from lightning.pytorch.tuner import batch_size_scaling as _batch_size_scaling
from lightning.pytorch.utilities import memory as _memory
from lightning.pytorch.utilities.rank_zero import rank_zero_info

import torch_fl  # registers the fl device; its _C says whether this process used fl
from . import distributed as _distributed

__all__ = ["FlAccelerator", "FlAutoAccelerator", "ResyncReplicas", "register"]


class ResyncReplicas(Callback):
    """Every `every_n_steps` optimizer steps of a multi-process run, copies rank 0's model
    (parameters, buffers) and optimizers' state to every rank with
    torch_fl.distributed.resync: for DDP over ranks on different plugins, whose replicas drift
    apart in the last bits as each vendor's kernels round their own way. Single-process runs
    are left alone. `resyncs` counts the copies made."""

    def __init__(self, every_n_steps: int = 200) -> None:
        if int(every_n_steps) < 1:
            raise ValueError(f"ResyncReplicas: every_n_steps must be at least 1, got {every_n_steps}")
        self.every_n_steps = int(every_n_steps)
        self.resyncs = 0
        self._last_step = 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._last_step = trainer.global_step  # a callback reused for another fit, or a resumed one

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        # N optimizer steps since the last copy: with gradient accumulation several batches end
        # at one step, and with manual optimization over several optimizers global_step moves by
        # more than one a batch (so "a multiple of N" could be skipped every time).
        if trainer.world_size < 2 or step - self._last_step < self.every_n_steps:
            return
        self._last_step = step
        _distributed.resync(pl_module, list(trainer.optimizers))
        self.resyncs += 1


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


def _accelerator_devices() -> list[int]:
    """The fl devices of plugins other than the CPU one (GPUs, NPUs): the accelerators that
    Lightning's own `accelerator="auto"` cannot see."""
    return [i for i in range(torch.fl.device_count()) if torch.fl.get_device_properties(i)["plugin"] != "cpu"]


class FlAutoAccelerator(FlAccelerator):
    """What `accelerator="auto"` picks when Lightning finds no TPU, MPS or CUDA device but fl
    has devices of a GPU or NPU plugin. Its `devices="auto"` (and a count N) take those
    devices, not the CPU plugin's, which would only slow them down as DDP ranks; a list of
    indices still names fl devices. `accelerator="fl"` keeps taking every fl device."""

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        chosen = _accelerator_devices()
        if devices is None or devices == "auto" or devices == -1 or devices == "-1":
            return chosen
        if isinstance(devices, (int, str)) and "," not in str(devices):
            n = int(devices)
            if n > len(chosen):
                raise ValueError(f"devices={devices!r}: accelerator='auto' chose fl's {len(chosen)} "
                                 f"accelerator device(s) {chosen}; pass accelerator='fl' to count every fl device")
            return _parse_fl_devices(chosen[:n] if n > 0 else [])
        return _parse_fl_devices(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        indices = devices if isinstance(devices, list) and all(isinstance(i, int) for i in devices) \
            else FlAutoAccelerator.parse_devices(devices)
        return [torch.device("fl", i) for i in indices]

    @staticmethod
    def auto_device_count() -> int:
        return len(_accelerator_devices())


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

    # devices="auto": Lightning takes every device, except CUDA in a notebook, where it takes one
    # (several would need the fork launcher, see _check_fl_fork). The same for fl.
    set_devices_if_auto = _Connector._set_devices_flag_if_auto_passed

    def _set_devices_flag_if_auto_passed(self):
        if _uses_fl(self) and self._devices_flag == "auto" and _connector_module._IS_INTERACTIVE \
                and self.accelerator.auto_device_count() > 1:
            self._devices_flag = 1
            rank_zero_info(
                f"Trainer will use only 1 of {self.accelerator.auto_device_count()} fl devices because it is "
                "running inside an interactive / notebook environment. Pass `devices=N` to use more (with "
                "strategy='ddp_notebook' on CPU-plugin devices, before any fl tensor is created in this "
                "process; a GPU plugin's devices cannot be forked to).")
            return
        set_devices_if_auto(self)

    # accelerator="auto": Lightning looks for a TPU, MPS and CUDA, else takes the CPU. fl's
    # devices of a GPU or NPU plugin come before the CPU (not before a native CUDA device,
    # which torch's own CUDA serves without a layer between).
    choose_auto_accelerator = _Connector._choose_auto_accelerator

    def _choose_auto_accelerator():
        chosen = choose_auto_accelerator()
        if chosen == "cpu" and torch.fl.is_available() and _accelerator_devices():
            plugins = sorted({torch.fl.get_device_properties(i)["plugin"] for i in _accelerator_devices()})
            rank_zero_info(f"accelerator='auto' chose fl: the {', '.join(plugins)} plugin's devices "
                           f"{['fl:%d' % i for i in _accelerator_devices()]}")
            return FlAutoAccelerator()
        return chosen

    _Connector._choose_auto_accelerator = staticmethod(_choose_auto_accelerator)
    _Connector._choose_strategy = _choose_strategy
    _Connector._check_and_init_precision = _check_and_init_precision
    _Connector._set_devices_flag_if_auto_passed = _set_devices_flag_if_auto_passed
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


# ---- process launchers: fork and spawn --------------------------------------------------

def _fork_refusal(devices: list[torch.device]) -> str | None:
    """Why a child forked now could not use `devices`, or None. A device of a GPU plugin
    (cuda, hip, ascend) never can: its driver was initialised when torch_fl loaded (the plugin
    probed it), and a driver does not survive fork. A CPU-plugin device can until this process
    allocated fl memory (the binding's own rule, torch.fl._is_in_bad_fork in the child): from
    then on a child has the runtime's state but not its stream threads."""
    drivers = sorted({torch.fl.get_device_properties(d)["plugin"] for d in devices} - {"cpu"})
    if drivers:
        return (f"the {', '.join(drivers)} plugin's driver was initialised when torch_fl loaded, and a "
                "driver does not survive fork")
    if torch_fl._C.was_used():
        return ("this process has used an fl device, and a forked child has the fl runtime's state but not "
                "its worker threads")
    return None


def _check_fl_fork(devices: list[torch.device]) -> None:
    reason = _fork_refusal(devices)
    if reason is not None:
        message = (f"Lightning can't fork new processes (strategy='ddp_fork' or 'ddp_notebook') on these fl "
                   f"devices: {reason}. Use strategy='ddp' (in a script) or 'ddp_spawn'.")
        if _connector_module._IS_INTERACTIVE:
            message += " You will have to restart the Python kernel."
        raise RuntimeError(message)


def _modules_to_cpu(collection: Any) -> list[tuple[torch.nn.Module, torch.device]]:
    """Moves the modules in `collection` (the LightningModule that `fit` hands to the
    launcher) that are on an fl device to the CPU, in place; returns them with their device."""
    moved = []

    def to_cpu(module: torch.nn.Module) -> torch.nn.Module:
        on_fl = [t.device for t in (*module.parameters(), *module.buffers()) if t.device.type == "fl"]
        if on_fl:
            moved.append((module, on_fl[0]))
            module.cpu()
        return module

    apply_to_collection(collection, torch.nn.Module, to_cpu)
    return moved


def _wrap_launcher() -> None:
    launcher_cls = _launcher_module._MultiProcessingLauncher
    if getattr(launcher_cls, "_torch_fl_wrapped", False):
        return
    launch = launcher_cls.launch

    def _launch(self, function, *args, trainer=None, **kwargs):
        moved = []
        if isinstance(self._strategy.accelerator, FlAccelerator):
            # Only "fork" copies this process; a "forkserver" child is forked from a fresh server.
            if self._start_method == "fork":
                _check_fl_fork(self._strategy.parallel_devices or [])
            elif self._start_method in ("spawn", "forkserver"):
                # The arguments are pickled through torch.multiprocessing, which has no way to
                # share an fl tensor ("_share_fd_: only available on CPU"): the model travels
                # on the CPU and returns to its device afterwards (rank 0's weights are loaded
                # into it where it is, as for a CUDA model).
                moved = _modules_to_cpu((args, kwargs))
        try:
            return launch(self, function, *args, trainer=trainer, **kwargs)
        finally:
            for module, device in moved:
                module.to(device)

    launcher_cls.launch = _launch
    launcher_cls._torch_fl_wrapped = True


# ---- Tuner.scale_batch_size: recognise fl's out-of-memory error ---------------------------

# The caching allocator's message, raised as torch.OutOfMemoryError: "fl:0: out of memory trying to
# allocate 16.00 MiB (...)". Lightning's is_oom_error looks for "CUDA" and "out of memory".
_FL_OUT_OF_MEMORY = re.compile(r"\bfl:\d+: out of memory")


def _is_fl_out_of_memory(exception: BaseException) -> bool:
    return isinstance(exception, torch.OutOfMemoryError) and bool(_FL_OUT_OF_MEMORY.search(str(exception)))


def _wrap_oom_check() -> None:
    if getattr(_memory.is_oom_error, "_torch_fl_wrapped", False):
        return
    is_oom_error = _memory.is_oom_error

    def _is_oom_error(exception: BaseException) -> bool:
        return is_oom_error(exception) or _is_fl_out_of_memory(exception)

    _is_oom_error._torch_fl_wrapped = True
    _memory.is_oom_error = _is_oom_error  # read by garbage_collection_cuda
    _batch_size_scaling.is_oom_error = _is_oom_error  # imported by name by the batch-size finder


def register() -> None:
    """Registers "fl" with Lightning and "flccl" with torch.distributed (idempotent)."""
    _distributed.register()
    FlAccelerator.register_accelerators(AcceleratorRegistry)
    _wrap_connector()
    _wrap_launcher()
    _wrap_oom_check()


register()
