"""Coverage pre-flight: which tier each ATen op of a model would take on each fl device."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _C


class _OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: dict[str, set] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        dtypes = self.ops.setdefault(name if "::" in name else f"aten::{name}", set())
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                dtypes.add(a.dtype)
                break
        return func(*args, **kwargs)


def coverage_report(fn, *args, devices=None, **kwargs) -> dict:
    """Runs `fn(*args, **kwargs)` once on CPU (recording its ATen ops) and returns, per op and
    per fl device, the tier it would take: {"aten::addmm": {"fl:0": "native", ...}, ...}.
    Ops are those PyTorch dispatches after autograd, so backward ops appear when `fn` calls
    backward()."""
    recorder = _OpRecorder()
    with recorder:
        fn(*args, **kwargs)
    devices = range(_C.device_count()) if devices is None else devices
    report = {}
    for op, dtypes in sorted(recorder.ops.items()):
        dtype = next(iter(dtypes)) if dtypes else torch.float32
        per_device = {}
        for d in devices:
            try:
                per_device[f"fl:{d}"] = _C.op_support(op, d, dtype)
            except Exception as e:  # an op the dispatcher does not know by that name
                per_device[f"fl:{d}"] = f"unknown ({e})"
        report[op] = per_device
    return report
