"""torch.fl — the device module, mirroring torch.cuda's API for fl devices."""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from . import _C


def is_available() -> bool:
    return _C.device_count() > 0


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    _C.init()


def _is_in_bad_fork() -> bool:
    """Whether this process was forked after its parent used fl (then fl raises here)."""
    return _C.in_bad_fork()


def device_count() -> int:
    return _C.device_count()


def _index(device: Any = None) -> int:
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "fl":
            raise ValueError(f"expected an fl device, got {device}")
        return _C.current_device() if device.index is None else device.index
    raise TypeError(f"cannot interpret {device!r} as an fl device")


def current_device() -> int:
    return _C.current_device()


def set_device(device: Any) -> None:
    _C.set_device(_index(device))


class device:  # noqa: N801 - mirrors torch.cuda.device
    """Context manager that makes `device` the current fl device."""

    def __init__(self, device: Any):
        self.idx = _index(device)
        self.prev = -1

    def __enter__(self):
        self.prev = _C.current_device()
        _C.set_device(self.idx)

    def __exit__(self, *exc):
        _C.set_device(self.prev)
        return False


def _listed(device: Any = None) -> dict:
    """The list_devices() entry of `device`; a clear error for an index with no device."""
    index, devices = _index(device), _C.list_devices()
    if not 0 <= index < len(devices):
        raise ValueError(f"fl:{index} does not exist: this process has {len(devices)} fl device(s)"
                         + (f" (fl:0..fl:{len(devices) - 1})" if devices else ""))
    return devices[index]


def get_device_name(device: Any = None) -> str:
    return _listed(device)["name"]


def get_device_properties(device: Any = None) -> dict:
    return _listed(device)


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (0, 0)


def synchronize(device: Any = None) -> None:
    _C.synchronize(_index(device))


# ---- streams and events --------------------------------------------------------------


class Stream(torch.Stream):
    """An fl stream (torch.Stream on device 'fl')."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("fl", _index(device)), priority=priority)


class _EventMeta(type):
    """torch.Event's C methods take only exact torch.Event arguments (elapsed_time rejects a
    subclass), so torch.fl.Event(...) builds a plain torch.Event on fl, and isinstance(e,
    torch.fl.Event) is true for every torch.Event on an fl device."""

    def __call__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return torch.Event(device="fl", enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "fl"


class Event(metaclass=_EventMeta):
    """An fl event (a torch.Event on device 'fl'); see _EventMeta."""


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(torch.device("fl", _index(device)))


def default_stream(device: Any = None) -> torch.Stream:
    idx = _index(device)
    # torch.Stream wants the c10 DeviceType number; any fl stream carries it.
    device_type = current_stream(idx).device_type
    return torch.Stream(stream_id=0, device_index=idx, device_type=device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(s: torch.Stream | None):
    if s is None:
        yield
        return
    prev = current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)


# ---- random numbers ------------------------------------------------------------------


def _generator(device: Any = None) -> torch.Generator:
    return torch.Generator(device=torch.device("fl", _index(device)))


default_generators: tuple = ()


def _default_generators() -> tuple:
    global default_generators
    if not default_generators:
        default_generators = tuple(_C.default_generator(i) for i in range(device_count()))
    return default_generators


def manual_seed(seed: int) -> None:
    gens = _default_generators()
    if gens:
        gens[_C.current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in _default_generators():
        g.manual_seed(int(seed))


def seed() -> None:
    gens = _default_generators()
    if gens:
        gens[_C.current_device()].seed()


def seed_all() -> None:
    for g in _default_generators():
        g.seed()


def initial_seed() -> int:
    return _default_generators()[_C.current_device()].initial_seed()


def get_rng_state(device: Any = "fl") -> torch.Tensor:
    return _default_generators()[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "fl") -> None:
    _default_generators()[_index(device)].set_state(new_state)


def get_rng_state_all() -> list:
    return [g.get_state() for g in _default_generators()]


def set_rng_state_all(states) -> None:
    for g, s in zip(_default_generators(), states):
        g.set_state(s)


# ---- memory --------------------------------------------------------------------------


def memory_stats(device: Any = None) -> dict:
    return dict(_C.memory_stats(_index(device)))


def memory_allocated(device: Any = None) -> int:
    return _C.memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    return _C.memory_stats(_index(device))["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    return _C.memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    return _C.memory_stats(_index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    _C.reset_peak_memory_stats(_index(device))


def empty_cache() -> None:
    _C.empty_cache()


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    _C.set_memory_fraction(float(fraction), _index(device))


def get_per_process_memory_fraction(device: Any = None) -> float:
    return _C.memory_fraction(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    return tuple(_C.mem_get_info(_index(device)))


# ---- autocast ------------------------------------------------------------------------


def get_amp_supported_dtype() -> list:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True
