"""User-facing tools: devices, plugins, op support, fallback statistics and the profiler."""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field

import torch

from . import _C


def list_devices() -> list[dict]:
    """Every fl device: index, vendor, name, stable id, plugin file, memory, capabilities."""
    return list(_C.list_devices())


def devices(plugin: str | None = None) -> list[torch.device]:
    """The fl devices in index order, or only those of one plugin (its name, as in
    list_devices()'s "plugin": "cpu", "cuda", ...; an empty list when it has none), e.g.
    torch_fl.devices("cuda")[0] for the first GPU of a machine whose host is fl:0."""
    return [torch.device(d["device"]) for d in _C.list_devices() if plugin is None or d["plugin"] == plugin]


def loaded_plugins() -> list[dict]:
    return list(_C.loaded_plugins())


def skipped_plugins() -> list[dict]:
    """Plugin files found but not loaded, each with the step that failed and why."""
    return list(_C.skipped_plugins())


def op_support(op: str, device: str | int | torch.device = "fl:0", dtype: torch.dtype = torch.float32) -> str:
    """The tier `op` (e.g. "aten::add.Tensor" or "add.Tensor") takes on `device` for `dtype`:
    "native", "generic", "cpu_fallback" or "error"."""
    if isinstance(device, str):
        device = torch.device(device)
    index = device if isinstance(device, int) else (device.index or 0)
    return _C.op_support(op, index, dtype)


def fallback_stats() -> dict:
    """Per ATen op run on fl so far: calls per tier (native, generic, cpu_fallback)."""
    return dict(_C.fallback_stats())


def reset_fallback_stats() -> None:
    _C.reset_fallback_stats()


def _ratio(stats: dict) -> tuple[int, int, int]:
    native = sum(v["native"] for v in stats.values())
    generic = sum(v["generic"] for v in stats.values())
    cpu = sum(v["cpu_fallback"] for v in stats.values())
    return native, generic, cpu


def fallback_report(stats: dict | None = None) -> str:
    """A table of ops by tier with the fallback ratio, for printing."""
    stats = fallback_stats() if stats is None else stats
    native, generic, cpu = _ratio(stats)
    total = max(native + generic + cpu, 1)
    lines = [f"{'op':48} {'native':>8} {'generic':>8} {'cpu':>8}"]
    for name in sorted(stats, key=lambda n: -(stats[n]["generic"] + stats[n]["cpu_fallback"])):
        s = stats[name]
        lines.append(f"{name:48} {s['native']:>8} {s['generic']:>8} {s['cpu_fallback']:>8}")
    lines.append(
        f"total: {native + generic + cpu} op calls, native {native}, generic {generic}, "
        f"cpu fallback {cpu}; fallback ratio {(generic + cpu) / total:.1%}"
    )
    return "\n".join(lines)


@dataclass
class ProfileResult:
    """What `profile()` measured: per op the tier counts and time, plus totals."""

    ops: dict = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def fallback_ratio(self) -> float:
        native, generic, cpu = _ratio(self.ops)
        total = native + generic + cpu
        return (generic + cpu) / total if total else 0.0

    device_time: bool = False

    def table(self) -> str:
        """Ops by host time (ms), with device time (ms) when profiled with device_time=True.
        Both include the op's nested routed calls and its layout copies."""
        head = f"{'op':48} {'tier':>12} {'calls':>8} {'host ms':>10}"
        lines = [head + (f" {'device ms':>10}" if self.device_time else "")]
        rows = []
        for name, s in self.ops.items():
            for tier in ("native", "generic", "cpu_fallback"):
                if s[tier]:
                    rows.append((s["seconds"], name, tier, s[tier], s.get("device_seconds", 0.0)))
        for seconds, name, tier, calls, device_seconds in sorted(rows, reverse=True):
            line = f"{name:48} {tier:>12} {calls:>8} {seconds * 1e3:>10.3f}"
            lines.append(line + (f" {device_seconds * 1e3:>10.3f}" if self.device_time else ""))
        lines.append(f"fallback ratio {self.fallback_ratio:.1%}; wall {self.wall_seconds:.3f}s")
        return "\n".join(lines)


def _diff(after: dict, before: dict) -> dict:
    out = {}
    for name, a in after.items():
        b = before.get(name, {"native": 0, "generic": 0, "cpu_fallback": 0, "seconds": 0.0})
        d = {k: a.get(k, 0) - b.get(k, 0) for k in ("native", "generic", "cpu_fallback", "seconds", "device_seconds")}
        d["kernel"] = a["kernel"]
        if d["native"] or d["generic"] or d["cpu_fallback"]:
            out[name] = d
    return out


@contextlib.contextmanager
def profile(warn_above: float = 0.10, device_time: bool = False):
    """Profiles the ops run on fl inside the block: per op the tier taken, calls and host time;
    with `device_time=True` also the device time of each op, measured with the plugin's timing
    events around every call (two event records per call while on).

        with torch_fl.profile() as prof:
            train_step()
        print(prof.table())

    Warns when the fallback ratio exceeds `warn_above`."""
    result = ProfileResult(device_time=device_time)
    before = fallback_stats()
    was_on = _C.profiling()
    timing_was_on = _C.device_timing()
    _C.set_profiling(True)
    if device_time:
        _C.flush_device_times()  # pairs recorded before the block stay out of it
        before = fallback_stats()
        _C.set_device_timing(True)
    start = time.perf_counter()
    try:
        yield result
    finally:
        for i in range(_C.device_count()):
            _C.synchronize(i)
        result.wall_seconds = time.perf_counter() - start
        _C.set_profiling(was_on)
        if device_time:
            _C.set_device_timing(timing_was_on)
            _C.flush_device_times()
        result.ops = _diff(fallback_stats(), before)
        if result.fallback_ratio > warn_above:
            warnings.warn(
                f"torch_fl: {result.fallback_ratio:.1%} of op calls left the native tier "
                f"(threshold {warn_above:.0%}); see the profile table",
                stacklevel=3,
            )
