"""Heterogeneous data parallelism: one model trained on several devices of any mix of plugins
(a CUDA-plugin device beside a CPU-plugin device, say) inside one process.

    hdp = HeteroDataParallel(model, ["fl:0", "fl:1"],
                             optimizer=lambda params: torch.optim.SGD(params, lr=0.1))
    for x, y in loader:
        loss = hdp.train_step(x, y, F.cross_entropy)

Each step:
1. the batch is split along dim 0 into one shard per device, sized by `ThroughputBalancer`
   (torch_fl.balancer; `SplitSchedule` there decides which split each step runs and which
   steps are measured):
   a per-device model of step time, s_i·(a_i + b_i·n) + c_i, calibrated on the first batch
   with timed forward/backward passes on each device alone (a_i fixed cost, b_i cost per
   sample, c_i the gradient/weight transfer), with a slowdown s_i under concurrency learnt
   from real steps (EMA; a master computing alone is timed with events on the step before
   each re-balance, so that its estimate follows it too: its s_i then mixes steps alone and
   steps beside the others, which a split re-measures); the split is recomputed every `rebalance_every` steps and minimises
   the predicted step time. A device whose fixed cost exceeds the step time gets no shard.
   On top of the model, a measured guard: the real time per sample of every device set that
   ran is recorded (the whole train_step call; not the step back from a probe, nor the first
   after a pause in the caller's loop, which pay a switch-in cost: see SplitSchedule), and the balancer runs whichever of {the model's split, each device
   alone} measured fastest, re-running the candidate with the oldest record for one step
   every `probe_every` re-balances — so adding a device costs throughput only during those
   probes, never for long (a step whose device set measures slower than another candidate's
   record makes the next step plan again, without waiting for the re-balance). A candidate
   that loses a probe waits twice as long for the next one; one more than `probe_limit` (2×)
   slower per sample waits the longest (probe_every·64 re-balances). A set that lost its
   place only because its own record rose (a slow spell of the host), or that is known only
   from its calibration, is probed once at the next re-balance. Shard sizes are
   multiples of a granularity (batch/16 rounded down to a power of two); a step that runs a
   shard size new to a device is a warm-up (cuDNN plans, allocator blocks): it is not
   measured and the split runs again, and a probe reuses its device set's last warm split;
2. every replica first pulls the master's latest weights if it is stale (in its own thread,
   so transfers to different devices overlap; a device that sat steps out pays nothing), then
   runs forward and backward on its shard — one Python thread per device;
3. each shard's loss is scaled by its share n_i/N before backward, and each parameter's
   gradient is copied to the reduction device and added there (one foreach add per replica),
   so with a loss that is a mean over the batch the master gradient is the gradient of the
   big-batch loss: grad = Σ_i ∇(n_i/N · loss_i) (when the master ran the whole batch alone its
   gradient is used as it is);
4. one optimizer steps the master copy (the replica that lives on the reduction device);
5. the other replicas receive the master's parameters and buffers before they next compute,
   so every replica that computes holds the master's exact bits: a replica that computed
   this step and shares the master's plugin right away (copies queued on the devices behind
   the optimizer step), the others in their own thread when they next run (with
   `debug=True` they are updated before the step and asserted identical; `broadcast()`
   updates all at once).

Concurrency (measured on torch 2.13 with the CPU plugin, OPENBLAS_NUM_THREADS=1, by counting
how fast a second Python thread runs while one thread works on fl:0):
- an fl operator call releases the GIL (torch's bindings drop it around dispatch) and the
  CPU plugin runs the kernel asynchronously on its stream thread: 3 GEMMs of 1500² are
  enqueued in ~20 ms and run for ~0.5 s while other threads run Python at full speed;
- waiting with `.cpu()`, `torch.Event.synchronize()` or `Stream.synchronize()` releases the GIL;
  `torch.fl.synchronize()` holds it while it waits (the other thread ran ~10–40x slower), so
  this module waits on an event instead (`synchronize_device`);
- the Python between operators (nn.Module.__call__, the forward's glue) holds the GIL, so
  the device threads' per-operator dispatch is serialised while their kernels overlap;
  backward runs in C++ on the autograd engine's per-device worker threads. A model whose step is dominated by dispatch overhead (tiny layers) overlaps less
  than one dominated by kernel time.
- copies between two devices of one plugin are ordered on the devices (the plugin's
  "fl.stream_wait_peer_event" extra), so one device's thread pulling weights from the master
  does not wait on the host for the master's queued work (before this, a replica's weight pull
  waited for the master GPU's forward, and a 2-GPU split gained nothing); a replica of another
  plugin (a CPU device beside a GPU master) pulls on a side stream of the master device,
  ordered behind the optimizer step by an event, with the master's buffers from a snapshot
  taken there, so its pull does not queue behind the master's forward either;
- shards are copied from the host batch by each device's thread (a device whose plugin takes
  host pointers, the CPU plugin, reads its shard in place: `host_zero_copy`); a copy from
  pinned memory with non_blocking stays queued, one from pageable memory is staged by the
  plugin and costs host memory bandwidth, so feed pinned batches (DataLoader(pin_memory=True);
  tensor.pin_memory() pins with torch_fl's pinned cache).
`bench/hetero.py` prints the overlap of two devices' forward/backward (sequential / concurrent
time: 2.0 perfect, 1.0 none).

What it gains, measured on H200 machines (README "Many chips", bench/results/h200*): a
device set is worth running only where each device's step is dominated by per-sample work.
- Two H200s of the CUDA plugin split a compute-bound batch evenly (a convnet at batch 4096,
  pinned: 1.69x one H200's plain loop).
- A CPU-plugin device beside an H200 is 5-340x slower. On the copy-bound wide MLP with pinned
  rows it adds throughput once the batch amortises its fixed cost per step (1-4 ms): at batch
  65536 a split of 4096 / 61440 rows ran 1.04x the H200 alone (fixed split), and the balancer
  chose it itself (0.98-1.02x the H200 alone, 0.91-0.94x the sum, over three example runs: the
  split's ~4% edge is within the host's step-to-step noise). At batch 16384 no split wins and
  the balancer keeps the H200 alone (0.96-1.01x its plain loop). On pageable rows both devices
  draw on the same host memory bandwidth: a split step runs each device slower than alone, and
  the pair stays at 0.73-0.87x the sum of the two alone.
- A launch-bound model (the digits CNN, ~2 ms steps) gains nothing from a split: each
  device's step is mostly fixed cost, and both devices' dispatch shares one interpreter.
On the 2-core development host, shared with other builds, the overlap of two CPU-plugin
devices measured 0.6-1.9 from run to run (native `torch.mm` in two threads: 0.6-0.7 there):
the host, not the binding, bounds it; fl:0 and fl:1 of the CPU plugin are the same cores.

Precision across vendors. Different plugins run different kernels (cuBLAS vs OpenBLAS, fused
vs unfused reductions, different summation orders), so the same shard gives gradients that
differ in the last bits between vendors, and a hetero step's gradient Σ (n_i/N)·grad_i
differs from a single-device big-batch gradient by that rounding (and by the different
reduction order of the split mean). The replicas never drift apart, because before a replica
computes it receives the master's exact bits; what differs from a single-device run is
only the rounding of each step's gradient, of the order of the kernels' own error (float32:
~1e-6 relative per step; float64: ~1e-15). Training is therefore reproducible with a fixed
`split=` on fixed devices (a measured split follows timings, so its rounding varies from run
to run), but not bit-identical to a run on one device. In float16/bfloat16, gradients are
summed in the parameters' dtype: use float32 parameters (mixed
precision) if the split must not change results beyond half-precision rounding.

Not done: buffers (BatchNorm running statistics) are those the master computed on its own
shard, as in torch.nn.DataParallel (on a step that leaves the master out, those of the device
that computed the largest shard); random state (dropout): each device draws from its own
generator, and after torch.manual_seed every fl device's starts from that seed, so shards of one
shape on two devices draw the same masks in a step (as CUDA devices do under DataParallel);
no gradient
bucketing/overlap of communication with backward (the reduction starts after every replica's
backward ends, parameter by parameter); inputs are split on dim 0 only; one process, so
every device's Python dispatch shares one interpreter (launch-bound models do not scale).
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copy
import dataclasses
import inspect
import math
import statistics
import threading
import time
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.nn as nn

from . import _C
from .balancer import SplitSchedule, ThroughputBalancer, _fold_small_shards, device_set

__all__ = ["ThroughputBalancer", "HeteroDataParallel", "synchronize_device", "device_context",
           "step_timeline_summary"]


# ---- device helpers ------------------------------------------------------------------


def synchronize_device(device: torch.device) -> None:
    """Waits for the work queued on `device`'s current stream (fl, cuda, or any accelerator)
    without holding the GIL, so that the other devices' threads keep running Python.

    For fl this records an event and waits on it (torch.Event.synchronize releases the GIL;
    torch.fl.synchronize, which waits for every stream of the device, holds it while it waits
    — measured: a second Python thread runs ~10x slower during it)."""
    if device.type == "cpu":
        return
    if device.type == "fl":
        # Recorded on `device`'s current stream by name: torch.Event.record() without a stream
        # records on the current device's, whichever `device` the event was made for.
        index = device.index if device.index is not None else torch.fl.current_device()
        event = torch.Event(device=device)
        event.record(torch.fl.current_stream(index))
        event.synchronize()
        return
    module = getattr(torch, device.type, None)
    if module is not None and hasattr(module, "synchronize"):
        module.synchronize(device)


def _loss_value(loss: torch.Tensor | float) -> float:
    """A shard's loss as a float: already one when its thread read it, else read back now."""
    return loss if isinstance(loss, float) else float(loss.cpu())


def _timing_events(device: torch.device) -> tuple[torch.Event, torch.Event]:
    """Two events of `device` that time the work between them."""
    return torch.Event(device=device, enable_timing=True), torch.Event(device=device, enable_timing=True)


def _times_with_events(device: torch.device) -> bool:
    """True when `device` is an fl device whose plugin times events (a pair of timing events
    recorded and measured once), so that a shard's device time can be read afterwards
    instead of waiting for the device right after queueing it."""
    if device.type != "fl":
        return False
    try:
        stream = torch.fl.current_stream(device.index)
        begin, end = _timing_events(device)
        begin.record(stream)
        end.record(stream)
        end.synchronize()
        begin.elapsed_time(end)
        return True
    except RuntimeError:
        return False


@contextlib.contextmanager
def _current_stream(stream: torch.Stream | None):
    """Makes `stream` its device's current stream in this thread for the block (None: no
    change); the current device stays as it was (torch.accelerator.set_stream moves it)."""
    if stream is None:
        yield
        return
    device = torch.fl.current_device()
    previous = torch.fl.current_stream(stream.device_index)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)
        torch.fl.set_device(device)


class device_context:  # noqa: N801 - used like torch.cuda.device
    """Makes `device` current in this thread (the fl current device is thread-local)."""

    def __init__(self, device: torch.device):
        self.device = device
        self._inner = None

    def __enter__(self):
        if self.device.type == "fl":
            self._inner = torch.fl.device(self.device.index)
        elif self.device.type == "cuda":
            self._inner = torch.cuda.device(self.device)
        if self._inner is not None:
            self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        if self._inner is not None:
            self._inner.__exit__(*exc)
        return False


# ---- step timelines ----------------------------------------------------------------


def step_timeline_summary(timeline: Sequence[dict]) -> dict[str, dict]:
    """Mean of HeteroDataParallel.timeline's marks per split (milliseconds from the step's
    start), with the step count: where a split's steps spend their time."""
    groups: dict[str, list[dict]] = {}
    for rec in timeline:
        groups.setdefault(str(rec["shards"]), []).append(rec)
    out = {}
    for key, recs in groups.items():
        def mean_ms(values):
            return round(1e3 * sum(values) / len(values), 3)
        summary = {"steps": len(recs)}
        for k in ("joined", "reduced", "optimizer", "total"):
            summary[k] = mean_ms([r[k] for r in recs])
        for i in recs[0]["devices"]:
            for k in ("dispatched", "synced", "shipping", "shipped"):
                vals = [r["devices"][i][k] for r in recs if k in r["devices"].get(i, {})]
                if vals:
                    summary[f"dev{i}_{k}"] = mean_ms(vals)
        out[key] = summary
    return out


# ---- the data-parallel wrapper -------------------------------------------------------


def _items(value: Any) -> list[Any] | None:
    """The elements of a container in a batch, in order: a mapping's values, a list's or a
    tuple's elements (subclasses and namedtuples included), a dataclass instance's fields
    (those its constructor takes); None for anything else, a leaf. torch.utils._pytree is
    not used: it treats a subclass of dict or list, and a dataclass, as a leaf."""
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, (list, tuple)):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, f.name) for f in dataclasses.fields(value) if f.init]
    return None


def _rebuild(value: Any, items: list[Any]) -> Any:
    """A container like `value` (its type, its keys) holding `items`. A subclass whose
    constructor does not take them comes back as its base: dict, list or tuple."""
    if isinstance(value, Mapping):
        plain = dict(zip(value.keys(), items))
        if type(value) is dict:
            return plain
        try:
            if isinstance(value, collections.defaultdict):
                return type(value)(value.default_factory, plain)
            return type(value)(plain)
        except Exception:  # noqa: BLE001 - a constructor of its own: the plain mapping
            return plain
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a namedtuple
        return type(value)(*items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value) if f.init]
        try:
            return dataclasses.replace(value, **dict(zip(names, items)))
        except ValueError as error:  # an InitVar without a default: replace() needs its value
            raise TypeError(f"HeteroDataParallel cannot rebuild a {type(value).__name__} per shard ({error}); "
                            "pass its tensors in a dict, a tuple or a dataclass without InitVar fields") from error
    base = tuple if isinstance(value, tuple) else list
    if type(value) is base:
        return base(items)
    try:
        return type(value)(items)
    except Exception:  # noqa: BLE001
        return base(items)


def _tensor_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors in a batch (its containers followed, see _items), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = _items(value)
    return [] if items is None else [t for item in items for t in _tensor_leaves(item)]


def _split_batch(value: Any, sizes: list[int]) -> list[Any]:
    """Splits a batch into `sizes` pieces of the same structure: every tensor with a batch
    dimension along dim 0; a 0-dimensional tensor and any other leaf (a flag, a string) go to
    every piece as they are, as nn.DataParallel's scatter passes non-tensors by reference."""
    if isinstance(value, torch.Tensor):
        return list(torch.split(value, sizes, dim=0)) if value.dim() > 0 else [value] * len(sizes)
    items = _items(value)
    if items is None:
        return [value] * len(sizes)
    parts = [_split_batch(item, sizes) for item in items]
    return [_rebuild(value, [part[k] for part in parts]) for k in range(len(sizes))]


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """`value` with `fn` applied to every tensor in it (its containers followed)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    items = _items(value)
    return value if items is None else _rebuild(value, [_map_tensors(item, fn) for item in items])


def _to(value: Any, device: torch.device, in_place_from_host: bool = False) -> Any:
    """`value` on `device`. Onto an accelerator, with non_blocking: a tensor in pinned host
    memory is copied without waiting (queued on the device's current stream, as
    DataLoader(pin_memory=True) batches are moved with CUDA), one in pageable memory is read
    before returning. Onto the host, blocking: a replica on the native CPU computes at once,
    with nothing to order it after a copy still queued on an fl device. With
    `in_place_from_host` (an fl device whose plugin takes host pointers), a host tensor that
    does not require grad is not copied: the device uses its memory in place."""

    def move(t: torch.Tensor) -> torch.Tensor:
        if (in_place_from_host and t.device.type == "cpu" and not t.requires_grad
                and not t.is_neg() and not t.is_conj()):
            index = device.index if device.index is not None else torch.fl.current_device()
            return _C.device_view_of_host(t, index)
        return t.to(device, non_blocking=device.type != "cpu")

    return _map_tensors(value, move)


def _host_copy(value: Any) -> Any:
    """`value` with every host tensor cloned (its containers followed)."""
    return _map_tensors(value, lambda t: t.clone() if t.device.type == "cpu" else t)


def _with_index(device: str | torch.device) -> torch.device:
    """`device` with an index: a device type given without one ("fl", "cuda") means that type's
    current device, as torch.Tensor.to does; "cpu" stays as it is."""
    device = torch.device(device)
    if device.index is not None or device.type == "cpu":
        return device
    current = getattr(getattr(torch, device.type, None), "current_device", None)
    return device if current is None else torch.device(device.type, current())


def _autocast_state(device_types: Iterable[str]) -> list[tuple[str, bool, torch.dtype]]:
    """The calling thread's autocast settings for each device type (autocast is per thread)."""
    return [(t, torch.is_autocast_enabled(t), torch.get_autocast_dtype(t)) for t in sorted(set(device_types))]


def _takes_host_pointers(device: torch.device) -> bool:
    """Whether `device` is an fl device whose plugin uses host memory as device memory (the
    CPU plugin): it can compute on a host batch in place."""
    return device.type == "fl" and bool(torch.fl.get_device_properties(device).get("host_pointers_usable"))


def _batch_size(value: Any) -> int:
    """The batch size of a batch: the length along dim 0 that every tensor in it with a batch
    dimension shares (0-dimensional tensors go to every shard whole)."""
    tensors = [t for t in _tensor_leaves(value) if t.dim() > 0]
    if not tensors:
        raise TypeError("a batch must hold at least one tensor with a batch dimension (dim 0); "
                        f"got {type(value).__name__} with none")
    size = tensors[0].shape[0]
    if any(t.shape[0] != size for t in tensors):
        raise ValueError("every tensor of a batch is split along dim 0 and must have the batch's size "
                         f"there; got shapes {[tuple(t.shape) for t in tensors]}")
    return size


def _refuse_closure_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """train_step calls `optimizer.step()` with no argument, once per batch: an optimizer whose
    step needs a closure (LBFGS re-evaluates the loss in it) would fail after the backward."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):  # no signature to read: let it run
        return
    if closure is not None and closure.default is inspect.Parameter.empty:
        raise TypeError(f"HeteroDataParallel: {type(optimizer).__name__}.step() needs a closure (it evaluates "
                        "the loss again), and train_step runs one forward and backward per batch; use an "
                        "optimizer whose step takes no closure")


def _plugin_of(device: torch.device) -> str | None:
    """The plugin behind an fl device (None for other device types)."""
    return torch.fl.get_device_properties(device)["plugin"] if device.type == "fl" else None


def _buffer_values(module: nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the module's buffers by name (queued on each buffer's device; none for a
    module without buffers)."""
    with torch.no_grad():
        return {name: b.clone() for name, b in module.named_buffers()}


def _load_buffer_values(module: nn.Module, values: dict[str, torch.Tensor]) -> None:
    """Writes `values` (from _buffer_values) into the module's buffers of those names (in place,
    so into a buffer a forward replaced by one of the same name too)."""
    with torch.no_grad():
        for name, b in module.named_buffers():
            if name in values:
                b.copy_(values[name])


@contextlib.contextmanager
def _buffers_as(module: nn.Module, before: dict[str, torch.Tensor]):
    """Runs the block on the module's buffers as they were before the step (`before`,
    what a replica's forward reads: the master's, pulled), then puts back what the master's
    own shard made of them: the master's backup of a late shard then computes what the
    replica would have (a forward that reads its buffers, spectral_norm's power iteration,
    differs otherwise), and leaves BatchNorm's running statistics and batch count as every
    other step does (counted once). The copies are queued in stream order."""
    kept = _buffer_values(module)
    _load_buffer_values(module, before)
    try:
        yield
    finally:
        _load_buffer_values(module, kept)


def _call(module: nn.Module, inputs: Any) -> Any:
    """The module on a shard of the inputs: a plain tuple is its positional arguments, a dict
    its keyword arguments, anything else (a tensor, a list, a namedtuple) one argument."""
    if type(inputs) is tuple:
        return module(*inputs)
    if isinstance(inputs, dict):
        return module(**inputs)
    return module(inputs)


def _graph_stays_in(loss: torch.Tensor, module: nn.Module) -> bool:
    """Whether the autograd graph behind `loss` reaches no leaf that requires grad but the
    parameters of `module` (a loss that reads another module's parameters, or a batch tensor
    that requires grad, reaches one; so may a reentrant checkpoint, which counts as one).
    Walked on a replica's first shard, again after a new loss_fn or a change of the master's
    requires_grad flags (0.7 ms for a 150-layer MLP)."""
    own = {id(p) for p in module.parameters()}
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) not in own:
            return False
        if type(node).__name__ == "CheckpointFunctionBackward":  # reentrant checkpointing: its graph is
            return False  # built in its backward, so what it reads is not known here
        todo.extend(next_node for next_node, _ in node.next_functions)
    return True


class HeteroDataParallel:
    """Data parallelism over devices of different speeds (and vendors) in one process.

    Args:
        module: the model; it becomes the master copy, moved to `reduce_device`.
        devices: the devices to train on (e.g. ["fl:0", "fl:1"]; any torch device type works).
        optimizer: a callable that builds the optimizer from the master's parameters, e.g.
            `lambda p: torch.optim.AdamW(p, lr=1e-3)`.
        reduce_device: where gradients are summed and the optimizer runs. Default: the device
            that calibration measures fastest per sample (devices[0] until then, and with a
            fixed `split`), so the fast device neither waits for transfers nor leaves the
            optimizer step to a slow one.
        rebalance_every: recompute the split every K steps from measured times (0: never).
        ema: weight of the newest measurement in the per-device cost estimate.
        probe_every: every this many re-balances, re-measure for one step the split whose
            record is oldest (the model's split or a device alone); a split that keeps
            losing is re-measured ever more rarely.
        probe_limit: a split or device measured more than this many times slower per sample
            than the best is re-measured only every probe_every·64 re-balances.
        tail_window: how many recent steps with every device timed shape the split when a
            device's speed varies from step to step: rows move off it while that lowers the
            mean time of those steps' slowest device (see ThroughputBalancer); 0: off.
        granularity: shard sizes are multiples of this (default: the largest power of two
            that is at most batch/16), so that a drifting split reuses a few shapes. A step
            that runs a shard size a device has not run before is a warm-up (cuDNN plans,
            allocator blocks): it is not measured, and the same split runs again.
        split: fixed shard proportions (e.g. [3, 1]) instead of measuring; no calibration.
        calibration_reps: timed forward/backward passes per device and shard size at the start.
        debug: before every step, assert that every replica computing it is bit-identical to the
            master (the check's time is left out of the balancer's records).
        backup_late_shards: when a replica's shard is still running LATE_FACTOR times its
            usual time (the median of its last steps at that shard size, or until there are 3
            the calibrated model's time; never its first shard of a size, which touches fresh memory)
            after the step began, plus LATE_MARGIN, and the master's own shard is done, the master computes that shard
            itself (with its weight, so the step still equals the big batch's) and the step
            goes on; the replica's result is dropped, and its device sits the next steps out
            until it is done. On the H200 the CPU device's shard (7 ms beside the GPU's 10)
            stalled for 20-60 ms in about one split step of 100, when the hypervisor took a
            CPU from one of its BLAS threads, and one such step cost more than the split gained
            in a run. Not when the master would need half the replica's usual time or more for
            the shard (by the calibrated model, or with a fixed split by the master's own
            measured shard time; with neither, never), nor for a replica whose loss's graph
            reaches tensors outside the replica (a loss reading hdp.module's parameters, a batch
            tensor that requires grad: its abandoned backward would still add into them; this is
            checked again for each new loss_fn and after requires_grad flags change, so a loss
            whose reach changes otherwise, with the step or the data, needs
            backup_late_shards=False). The backup reads the master's buffers as they were
            before the step, as the replica did, and leaves them as the master's own shard made
            them (BatchNorm statistics counted once, as in any other step); for that, a split
            step of a model with buffers clones them before the master's shard. An abandoned
            backward still runs the replica's hooks.
        host_zero_copy: a device whose plugin takes host memory as device memory (the CPU
            plugin) computes on its shard of a host batch in place instead of a copy of it —
            as nn.DataParallel leaves the shard that is already on its device. A model or loss
            that writes its inputs in place then writes the caller's batch: the step notices
            (the inputs' version counters), warns, and copies for that device from then on.
            Calibration works on a copy. False copies from the start.

    The master copy is `hdp.module`. Before each step the replicas take its train/eval modes
    and requires_grad flags, and pull its tensors again when one was written in place since
    they last received them (e.g. weight clipping under torch.no_grad()); a write through
    `.data` bumps no version counter, so call `broadcast()` after one. Changes of structure
    after wrapping are not followed (new or replaced submodules, parameters or buffers, hooks,
    parametrizations): the replicas are copies made here, so build a new HeteroDataParallel
    after one (DistributedDataParallel asks the same). Each shard runs under
    the caller's autocast. A leaf batch tensor that requires grad gets the big batch's
    gradient; one produced by a graph that requires grad is refused.

    Attributes:
        timeline: set it to a list to record, per step of more than one device, where the
            step's time went, in seconds from the step's start: per device "dispatched" (its
            pull, copy, forward and backward queued) and "synced" (its device finished), and
            for a replica that sends its gradients to the master itself "shipping" (it starts,
            once the master's shard is queued) and "shipped" (the copies are queued);
            then "joined" (every shard waited for is done), "reduced" (gradients summed, or
            their sums queued), "optimizer" (the step queued) and "total" (loss read back).
            The master's shard is not waited for when its device times events: its "synced"
            is its start plus its device time, and may come after "joined". `step_timeline_summary(timeline)`
            averages them per split.
    """

    LATE_FACTOR = 1.5  # backup_late_shards: a shard is late after this many times its usual time,
    LATE_MARGIN = 0.002  # plus this many seconds,
    LATE_HISTORY = 8  # its usual time being the median of its last this many (at least 3)

    def __init__(self, module: nn.Module, devices: Sequence[str | torch.device],
                 optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
                 reduce_device: str | torch.device | None = None, rebalance_every: int = 10,
                 ema: float = 0.3, split: Sequence[float] | None = None, calibration_reps: int = 2,
                 probe_every: int = 5, probe_limit: float = 2.0, granularity: int | None = None,
                 debug: bool = False, host_zero_copy: bool = True, tail_window: int = 32,
                 backup_late_shards: bool = True):
        self.devices = [_with_index(d) for d in devices]
        if not self.devices:
            raise ValueError("HeteroDataParallel needs at least one device")
        # Per device: its shards of a host batch are used in place (see host_zero_copy).
        self._in_place_from_host = [bool(host_zero_copy) and _takes_host_pointers(d) for d in self.devices]
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices must be distinct, got {self.devices}")
        self._auto_reduce = reduce_device is None
        self.reduce_device = _with_index(reduce_device) if reduce_device is not None else self.devices[0]
        self.calibration_reps = max(int(calibration_reps), 1)
        self.calibration_points: dict[str, list[tuple[int, float]]] = {}  # device -> (shard, s)
        self.debug = debug
        self.fixed_split = list(split) if split is not None else None
        if self.fixed_split is not None:
            if len(self.fixed_split) != len(self.devices):
                raise ValueError("split needs one proportion per device")
            if not all(math.isfinite(w) and w >= 0 for w in self.fixed_split) or sum(self.fixed_split) <= 0:
                raise ValueError(f"split needs finite proportions >= 0 with a positive sum, got {self.fixed_split}")
        self.schedule = SplitSchedule(
            ThroughputBalancer(len(self.devices), ema=ema, probe_every=probe_every, probe_limit=probe_limit,
                               tail_window=tail_window),
            rebalance_every, granularity)
        self.steps = 0
        self.last_shards: list[int] = []
        self._returned_at: float | None = None  # when the last train_step returned
        self.last_device_seconds: list[float | None] = []
        self._stale: set[int] = set()  # replicas that have not yet received the master's last update
        self.timeline: list[dict] | None = None
        self._checked_seconds = 0.0  # time spent in assert_replicas_identical (debug), not recorded as steps
        self._marks: dict[int, dict[str, float]] = {}  # this step's per-device marks (timeline)
        self._trainable: list[int] = []  # this step's trainable parameter indices
        self._shipped: dict[int, list[torch.Tensor | None]] = {}  # replica -> its gradients on the master
        self._master_queued = threading.Event()  # set once this step's master shard is queued
        self._closed = False
        self._autocast: list[tuple[str, bool, torch.dtype]] = []  # the caller's, for the pool's threads
        self._scaler: torch.amp.GradScaler | None = None  # this step's (train_step), for every shard
        self.backup_late_shards = bool(backup_late_shards)
        self.backups = 0  # shards the master computed in a late replica's place (backup_late_shards)
        # replica -> (its abandoned shard, still running or not yet reaped; that shard's size)
        self._late: dict[int, tuple[concurrent.futures.Future, int]] = {}
        # (replica, shard size) -> its last LATE_HISTORY shard times (waited or abandoned shards)
        self._shard_seconds: dict[tuple[int, int], collections.deque[float]] = {}
        # the master's own shard times in split steps (timed by events), for a fixed split
        self._master_shard_seconds: collections.deque[float] = collections.deque(maxlen=self.LATE_HISTORY)
        # Whether a replica's loss reaches no leaf but the replica's own parameters (checked on
        # the first shard of a replica, in calibration as a rule; None until then): only then
        # is a shard backed up, as an abandoned backward would otherwise still add into the
        # master's gradients (a loss reading hdp.module) or a batch tensor's.
        self._loss_stays_in: bool | None = None
        self._checked_loss_fn: Callable | None = None  # the loss_fn it was decided for (a new one decides again)

        # Replicas are copied before the master moves, so that deepcopy sees host tensors when
        # the caller passed a CPU module.
        try:
            copies = {d: copy.deepcopy(module) for d in self.devices if d != self.reduce_device}
        except RuntimeError as error:
            if "deepcopy protocol" not in str(error):
                raise
            # torch.nn.utils.weight_norm (the old hook) keeps a computed weight that cannot be
            # copied; its parametrization can.
            raise TypeError("HeteroDataParallel copies the module to each device, and this module cannot be "
                            f"deep-copied ({error}). A module using torch.nn.utils.weight_norm can use "
                            "torch.nn.utils.parametrizations.weight_norm instead") from error
        self.module = module.to(self.reduce_device)
        self.replicas: list[nn.Module] = []
        for d in self.devices:
            self.replicas.append(self.module if d == self.reduce_device else copies[d].to(d))
        self._note_master()
        # A list, not the generator: an optimizer factory that groups the parameters (decay and
        # no decay) walks them twice, and a generator's second walk is empty.
        self.optimizer = optimizer(list(self.module.parameters()))
        _refuse_closure_optimizer(self.optimizer)
        self._pool = ThreadPoolExecutor(max_workers=len(self.devices), thread_name_prefix="hetero-dp")
        self._watch_structure()
        self.broadcast()

    # -- the balancer's settings (kept by the schedule)

    @property
    def balancer(self) -> ThroughputBalancer:
        return self.schedule.balancer

    @balancer.setter
    def balancer(self, balancer: ThroughputBalancer) -> None:
        self.schedule.balancer = balancer

    @property
    def rebalance_every(self) -> int:
        return self.schedule.rebalance_every

    @rebalance_every.setter
    def rebalance_every(self, steps: int) -> None:
        self.schedule.rebalance_every = int(steps)

    @property
    def granularity(self) -> int | None:
        return self.schedule.granularity

    @granularity.setter
    def granularity(self, rows: int | None) -> None:
        self.schedule.granularity = rows

    # -- parameters

    def parameters(self) -> Iterable[nn.Parameter]:
        return self.module.parameters()

    def __call__(self, *args, **kwargs):
        """Forward on the master copy (for evaluation)."""
        return self.module(*args, **kwargs)

    def _state_tensors(self, module: nn.Module) -> list[torch.Tensor]:
        return [p.data for p in module.parameters()] + [b for b in module.buffers()]

    def _versions(self) -> list[int]:
        """The version counters of the master's parameters and buffers (an in-place write bumps
        them; one through `.data` does not)."""
        return [t._version for t in self._master_tensors]

    def _follow_master(self) -> None:
        """Before a step: the replicas take the master's train/eval modes and requires_grad
        flags (set on `hdp.module` after wrapping), and when a tensor of the master was written
        in place since the replicas last received it (weight clipping under torch.no_grad(),
        say), every replica pulls it again before it next computes. The master's flags are read in
        one pass each and the replicas walked only when they changed (walking every module
        pair each step cost ~2 ms for 150 modules here)."""
        flags = [p.requires_grad for p in self._master_params]
        modes = [m.training for m in self._master_modules]
        if flags != self._seen_flags or modes != self._seen_modes:
            for modules, params in self._mirrors:
                for theirs, mine in modules:
                    if mine.training != theirs.training:
                        mine.training = theirs.training
                for theirs, mine in params:
                    if mine.requires_grad != theirs.requires_grad:
                        mine.requires_grad_(theirs.requires_grad)
            self._seen_flags, self._seen_modes = flags, modes
            self._loss_stays_in = None  # (an unfrozen parameter may now take a loss's gradient)
        if self._non_master and self._master_versions and self._versions() != self._master_versions:
            self._stale = set(self._non_master)

    @torch.no_grad()
    def broadcast(self, replicas: Iterable[int] | None = None) -> None:
        """Copies the master's parameters and buffers into the other replicas (all by default),
        so that they hold exactly the master's bits."""
        indices = range(len(self.replicas)) if replicas is None else list(replicas)
        self._drain_late(indices)
        for i in indices:
            self._copy_from_master(i)
        if replicas is None:
            self._master_versions = self._versions()
        if self.debug:
            self.assert_replicas_identical(indices)

    @torch.no_grad()
    def _prepare_side_pulls(self) -> None:
        """Before stale replicas pull in their own thread (one of another plugin, or one of
        the master's plugin that sat the last step out): snapshots the master's buffers and
        records the event their side streams wait for, on the master's stream, behind the last
        optimizer step and ahead of the forward the master's thread is about to queue (which
        updates the buffers in place). Only on steps where such a pull runs, so that steps of
        the master alone pay nothing."""
        if self._weights_ready is None:
            self._weights_ready = torch.Event(device=self.reduce_device)
        self._buffer_snapshot = [b.clone() for b in self.module.buffers()]
        self._weights_ready.record(torch.fl.current_stream(self.reduce_device.index))
        self._side_pulls_ready = True

    def _buffers_before_shard(self) -> dict[str, torch.Tensor]:
        """The master's buffers by name as they are before its shard queues (what a replica's
        forward reads, for a backup to read the same): this step's side-pull snapshot when
        one was taken (_prepare_side_pulls), else clones (none for a model without buffers)."""
        if self._side_pulls_ready:
            return {name: b for (name, _), b in zip(self.module.named_buffers(), self._buffer_snapshot)}
        return _buffer_values(self.module)

    def _copy_from_master(self, index: int, side_stream: bool = False) -> None:
        """Copies the master's state into replica `index`; with `side_stream`, on that
        replica's side stream of the master device, ordered after the last optimizer step."""
        replica = self.replicas[index]
        if replica is not self.module:
            stream = None
            if side_stream and self._side_pulls_ready:
                stream = self._pull_streams.get(index)
                if stream is None:
                    stream = self._pull_streams[index] = torch.Stream(device=self.reduce_device)
                stream.wait_event(self._weights_ready)
            sources = self._state_tensors(self.module)
            if stream is not None:
                sources = [p.data for p in self.module.parameters()] + self._buffer_snapshot
            with torch.no_grad(), _current_stream(stream):
                for target, source in zip(self._state_tensors(replica), sources):
                    target.copy_(source)
        self._stale.discard(index)

    def assert_replicas_identical(self, replicas: Iterable[int] | None = None) -> None:
        """Raises AssertionError naming the first replica (all by default) and state tensor
        that differ from the master's. A replica that has not yet received the master's last
        update (one of another plugin than the master's receives it when it next computes, and
        so does one that sat the last step out) receives it first: what is checked is the
        state it computes from, so a change made to such a replica by hand is overwritten
        rather than reported (it would be before the replica computed again)."""
        start = time.perf_counter()
        replicas = None if replicas is None else list(replicas)
        self._drain_late(replicas)
        try:
            master = [t.detach().cpu() for t in self._state_tensors(self.module)]
            for i in (range(len(self.replicas)) if replicas is None else replicas):
                if self.replicas[i] is self.module:
                    continue
                if i in self._stale:
                    self._copy_from_master(i)
                for k, t in enumerate(self._state_tensors(self.replicas[i])):
                    if not torch.equal(t.detach().cpu(), master[k]):
                        raise AssertionError(f"replica on {self.devices[i]} differs from the master in tensor {k}")
        finally:
            self._checked_seconds += time.perf_counter() - start

    # -- one step

    def _queue_shard(self, index: int, inputs: Any, targets: Any, loss_fn: Callable,
                     weight: float = 1.0) -> torch.Tensor:
        """Queues forward and backward of one shard on device `index` (the current device must
        be it) and returns the shard's loss. The gradients come out scaled by `weight` (the
        shard's share of the batch), so that the reduction only adds them up."""
        replica = self.replicas[index]
        device = self.devices[index]
        if index in self._stale:  # the last update, pulled on a side stream of the master
            self._copy_from_master(index, side_stream=True)
        in_place = self._in_place_from_host[index]
        x, y = _to(inputs, device, in_place), _to(targets, device, in_place)
        if replica is not self.module:  # the master's are cleared before any shard starts
            for p in replica.parameters():
                p.grad = None
        loss = loss_fn(_call(replica, x), y)
        scaled = loss * weight if weight != 1.0 else loss
        if self._loss_stays_in is None and replica is not self.module:
            self._loss_stays_in = _graph_stays_in(scaled, replica)
        (self._scaler.scale(scaled) if self._scaler is not None else scaled).backward()
        if in_place and any(t._version != 0 for t in _tensor_leaves((x, y)) if t.device == device):
            # The module or the loss wrote its inputs in place, and so the caller's batch: from
            # the next step on this device gets copies, as the others do.
            self._in_place_from_host[index] = False
            warnings.warn(f"HeteroDataParallel: the model or loss wrote its inputs in place on {device}, "
                          "which reads host batches in place (host_zero_copy), so a host batch it read "
                          "was changed (the caller's in a training step, a copy in calibration). This "
                          "device gets copies from now on; host_zero_copy=False copies from the start.",
                          stacklevel=3)
        return loss.detach()

    def _run_shard(self, index: int, inputs: Any, targets: Any, loss_fn: Callable,
                   wait: bool = True, weight: float = 1.0, ship_on: torch.Stream | None = None,
                   abandoned: threading.Event | None = None) -> tuple[torch.Tensor | float, float | None]:
        """Forward and backward of one shard on device `index`; returns (loss, seconds until
        the device finished, or None when not `wait`ing for it). With `ship_on` (the stream of
        the reduction device that the step's thread reduces on), a waited shard then sends its
        gradients there itself (_ship_gradients) and returns its loss as a float, so that the
        step's thread finds both ready when it joins; unless `abandoned` is set by then (the
        master computed the shard in its place: backup_late_shards)."""
        device = self.devices[index]
        with device_context(device), contextlib.ExitStack() as autocast:
            for device_type, enabled, dtype in self._autocast:
                if enabled:
                    autocast.enter_context(torch.autocast(device_type, dtype=dtype))
            start = time.perf_counter()
            if abandoned is not None and abandoned.is_set():  # it had not started when the master took it
                return 0.0, None
            loss = self._queue_shard(index, inputs, targets, loss_fn, weight)
            if not wait:
                return loss, None
            dispatched = time.perf_counter()
            synchronize_device(device)
            end = time.perf_counter()
            if self.timeline is not None:
                self._marks[index] = {"dispatched": dispatched, "synced": end}
            if ship_on is not None:
                self._master_queued.wait()
                if abandoned is not None and abandoned.is_set():
                    return float(loss), end - start
                shipping = time.perf_counter()
                self._shipped[index] = self._ship_gradients(index, ship_on)
                if self.timeline is not None:
                    self._marks.setdefault(index, {}).update(shipping=shipping, shipped=time.perf_counter())
                return float(loss), end - start
            return loss, end - start

    @torch.no_grad()
    def _ship_gradients(self, index: int, stream: torch.Stream) -> list[torch.Tensor | None]:
        """Replica `index`'s gradients (of the master's trainable parameters, in order) copied
        to the fl reduction device on its `stream`, from the replica's own thread once its
        device is done. The copies stay queued there (a pinned block carries them from a
        host-memory device), so the step's thread only adds them up, on that stream."""
        with _current_stream(stream):
            return self._gradients_on_master(index, non_blocking=True)

    def _gradients_on_master(self, index: int, non_blocking: bool) -> list[torch.Tensor | None]:
        """Replica `index`'s gradients of this step's trainable parameters (`_trainable`, in
        the master's order) copied to the reduction device; None where it has none."""
        params = list(self.replicas[index].parameters())
        grads = [params[k].grad for k in self._trainable]
        return [None if g is None else g.to(self.reduce_device, non_blocking=non_blocking) for g in grads]

    def _queue_timed_shard(self, index: int, inputs: Any, targets: Any, loss_fn: Callable,
                           weight: float) -> tuple[torch.Tensor, tuple[torch.Event, torch.Event, float]]:
        """The master's shard in a step of several devices (or, on the step before a
        re-balance, of the master alone), queued from the step's own thread without waiting
        for the device, so that the reduction and the optimizer step queue behind its backward
        as in a plain loop; returns (loss, (begin, end, when)): two timing
        events around the shard, read once the step has synchronized, and the host's
        perf_counter when `begin` was recorded."""
        device = self.devices[index]
        stream = torch.fl.current_stream(device.index)
        begin, end = _timing_events(device)
        when = time.perf_counter()
        begin.record(stream)
        try:
            loss = self._queue_shard(index, inputs, targets, loss_fn, weight)
            end.record(stream)
        finally:
            # The other replicas queue their gradients on this stream only now, behind `end`:
            # inside the window they would count as the master's time.
            self._master_queued.set()
        if self.timeline is not None:
            self._marks[index] = {"dispatched": time.perf_counter()}
        return loss, (begin, end, when)

    def _shard_sizes(self, batch_size: int) -> list[int]:
        if self.fixed_split is not None:
            total = float(sum(self.fixed_split))
            sizes = [int(batch_size * w / total) for w in self.fixed_split]
            order = sorted(range(len(sizes)), key=lambda i: -self.fixed_split[i])
            for k in range(batch_size - sum(sizes)):
                sizes[order[k % len(order)]] += 1
            return _fold_small_shards(sizes, self._min_shard_rows)
        return self.schedule.sizes(batch_size, self.steps)

    def train_step(self, inputs: Any, targets: Any, loss_fn: Callable[[Any, Any], torch.Tensor],
                   before_step: Callable[[nn.Module], Any] | None = None,
                   scaler: torch.amp.GradScaler | None = None) -> float:
        """One optimizer step on a batch; `loss_fn(output, target)` must return the mean loss
        over its shard's rows. Returns the batch's mean loss (Σ n_i/N · loss_i).

        A loss normalised otherwise differs from the big batch's: cross_entropy with
        `ignore_index` or class `weight` divides by the shard's own count or weight sum (as
        would the shards of DistributedDataParallel; nn.DataParallel computes the loss on the
        gathered output). For those, return the shard's sum divided by a normaliser of the whole
        batch, computed by the caller. A loss may also read the master's parameters (a
        regulariser over `hdp.module`): their gradients add up over the shards.

        `before_step(module)`, when given, runs once the gradients of the whole batch are on
        the master (`module`, whose `.grad`s they are) and before `optimizer.step()`: the place
        for `torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm)`, or to read them.

        `scaler` (a torch.amp.GradScaler, for float16 autocast) scales every shard's loss
        before its backward, then unscales the summed gradients (before `before_step`, so
        that clipping sees true values), steps through `scaler.step(optimizer)` (skipped when
        a gradient is inf or NaN) and updates the scale, as a loop with one GradScaler does.

        `inputs` and `targets` are tensors or nests of them (tuples, lists, mappings,
        namedtuples, and their subclasses; dataclass instances); every tensor in them is split along dim 0 and
        must have the batch's size there, 0-dimensional tensors and other leaves go to every
        shard as they are (`targets` may be None). A plain tuple of inputs is the module's positional
        arguments, a dict its keyword arguments, anything else one argument."""
        self._check_open()
        self._reap_late()
        # The balancer records the whole call, as the caller's loop sees it: inside the window
        # from `start` below, steps of the H200 alone measured 1.4-1.7% and CPU + H200 split
        # steps 2.1-2.8% faster than the example's timing of train_step.
        called = time.perf_counter()
        idle = None if self._returned_at is None else called - self._returned_at
        batch = _batch_size(inputs)
        if batch == 0:
            raise ValueError("HeteroDataParallel: the batch has 0 rows (a split step needs at least one); "
                             "skip empty batches")
        if any(t.dim() > 0 for t in _tensor_leaves(targets)):
            target_batch = _batch_size(targets)
            if target_batch != batch:
                raise ValueError(f"the targets' batch size ({target_batch}) differs from the inputs' ({batch})")
        if any(t.requires_grad and t.grad_fn is not None for t in _tensor_leaves((inputs, targets))):
            raise ValueError("HeteroDataParallel: an input or target tensor is the output of a graph that requires "
                             "grad. Each shard runs its own backward, so a graph upstream of the batch would be "
                             "walked once per shard: pass detached tensors (leaf tensors that require grad are "
                             "fine), or compute that part inside the module")
        if loss_fn is not self._checked_loss_fn:  # another loss may reach other tensors: check again
            self._loss_stays_in, self._checked_loss_fn = None, loss_fn
        # The pool's threads run each shard under the caller's autocast (it is per thread).
        self._autocast = _autocast_state(d.type for d in self.devices)
        self._follow_master()
        if self.fixed_split is None and not self.balancer.calibrated:
            self.calibrate(inputs, targets, loss_fn)
            called, idle = time.perf_counter(), None
        # Before any shard starts (a replica's loss may add into them; see _reduce_gradients).
        self._clear_master_grads()
        self._scaler = scaler if scaler is not None and scaler.is_enabled() else None
        if self._scaler is not None and getattr(self._scaler, "_scale", None) is None:
            # GradScaler creates its scale on first use: here, not in several shards' threads at once.
            self._scaler.scale(torch.ones((), device=self.reduce_device))
        # A device still busy with an abandoned shard sits this step out, which is not measured:
        # with a fixed split the master takes its rows; else the master runs the batch alone and
        # the schedule plans nothing for this step (SplitSchedule.sat_out).
        busy = bool(self._late) and self._master_index is not None
        if busy and self.fixed_split is None:
            sizes = [batch if i == self._master_index else 0 for i in range(len(self.devices))]
        else:
            sizes = self._shard_sizes(batch)
            if busy:
                for i in self._late:
                    sizes[self._master_index] += sizes[i]
                    sizes[i] = 0
        active = device_set(sizes)
        if len(active) == 1:
            in_parts, tgt_parts = [inputs], [targets]
        else:
            in_parts = _split_batch(inputs, [sizes[i] for i in active])
            tgt_parts = _split_batch(targets, [sizes[i] for i in active])
        if self.debug:  # update the computing replicas here, and check them, before the step
            checked = self._checked_seconds
            self.broadcast([i for i in active if i in self._stale])
            self.assert_replicas_identical(active)
            # The checks (copies of every tensor to the host) are not the step's: the balancer's
            # record of this split leaves them out, so that debug mode splits as it would without.
            # The broadcast's copies stay in: without debug, the step pulls those weights.
            called += self._checked_seconds - checked
        start = time.perf_counter()
        # The step runs with the master's device current, as a plain loop on it would: the
        # optimizer's operators and the loss read-back then need no device switch each.
        timed = None
        self._shipped = {}  # nothing left from a step that failed
        with device_context(self.reduce_device):
            if len(active) == 1 and self.replicas[active[0]] is self.module:
                # The master alone: run it on this thread and do not wait for the device before
                # the optimizer step, so that the step's dispatch overlaps the backward kernels,
                # as in a plain training loop. The step before each re-balance times its shard
                # with events (read once the loss is back), so that the master's slowdown
                # follows its real steps as the others' does in split steps: else it stays as
                # calibrated, and a calibration that was off plans every split from it.
                if self._master_times_with_events and self._times_master_alone():
                    timed = active[0]
                    results = {timed: self._queue_timed_shard(timed, in_parts[0], tgt_parts[0], loss_fn, 1.0)}
                else:
                    results = {active[0]: self._run_shard(active[0], in_parts[0], tgt_parts[0], loss_fn,
                                                          wait=False)}
            else:
                if self._side_pulls and any(i in self._stale for i in active):
                    self._prepare_side_pulls()
                weights = {i: sizes[i] / batch for i in active}
                parts = {i: (x, y) for i, x, y in zip(active, in_parts, tgt_parts)}
                # The master's shard is queued from this thread and not waited for (its time
                # comes from events), when its device can time them; the others run in the
                # pool, each waiting for its device.
                timed = self._master_index if self._master_times_with_events and self._master_index in parts else None
                # Replicas send their gradients from their own threads onto the stream this
                # thread reduces on (an fl master; others are reduced here as before).
                ship_on = torch.fl.current_stream(self.reduce_device.index) if self.reduce_device.type == "fl" else None
                self._trainable = [k for k, p in enumerate(self._master_params) if p.requires_grad]
                # Replicas ship once the master's shard is queued (_queue_timed_shard sets it).
                (self._master_queued.clear if timed is not None else self._master_queued.set)()
                futures, results, late = {}, {}, set()
                abandoned = {i: threading.Event() for i in parts if i != timed}
                try:
                    for i, (x, y) in parts.items():
                        if i != timed:
                            futures[i] = self._pool.submit(self._run_shard, i, x, y, loss_fn, True, weights[i],
                                                           ship_on if self.replicas[i] is not self.module else None,
                                                           abandoned[i])
                    if timed is not None:
                        buffers_before = (self._buffers_before_shard()
                                          if self.backup_late_shards and self._loss_stays_in is not False else {})
                        results[timed] = self._queue_timed_shard(timed, *parts[timed], loss_fn, weights[timed])
                        if not any(t.requires_grad for t in _tensor_leaves((inputs, targets))):
                            late = self._late_shards(futures, sizes, start, results[timed][1][1])
                        for i in late:  # the master computes it in the late replica's place
                            abandoned[i].set()
                            self._late[i] = (futures.pop(i), sizes[i])
                            with _buffers_as(self.module, buffers_before):
                                results[i] = (self._queue_shard(timed, *parts[i], loss_fn, weights[i]), None)
                            self.backups += 1
                finally:
                    # Every shard ends (also when one raised) before the snapshot is dropped and
                    # the caller sees an error: no thread of this step outlives it, but an
                    # abandoned one (its device sits out until it ends: _reap_late).
                    self._master_queued.set()
                    concurrent.futures.wait(futures.values())
                    self._side_pulls_ready = False  # the snapshot is this step's only
                results.update({i: f.result() for i, f in futures.items()})
                for i in futures:
                    self._note_shard_seconds(i, sizes[i], results[i][1])
                joined = time.perf_counter()
                self._reduce_gradients([i for i in active if i not in late])
                if self._master_index not in active:
                    self._take_buffers(max(active, key=lambda i: sizes[i]))
                reduced = time.perf_counter()

            if self._scaler is not None:
                self._scaler.unscale_(self.optimizer)
            if before_step is not None:
                before_step(self.module)
            if self._scaler is not None:
                self._scaler.step(self.optimizer)
                self._scaler.update()
            else:
                self.optimizer.step()
            stepped = time.perf_counter()
            # A replica that computed this step and shares the master's plugin receives the
            # new weights now: the copies are queued on the devices right behind the optimizer
            # step (ordered by events), so the next step's pull cannot end up behind the
            # forward the master's thread queues by then. The others receive them when they
            # next run, in their own thread, so a device that sits a step out costs nothing.
            self._stale = set(self._non_master)
            for i in self._push_after_step:
                if sizes[i] > 0 and i not in self._late:
                    self._copy_from_master(i)
            self._master_versions = self._versions()
            # Summed on the host: a scalar per device, and no same-device dtype conversion on fl.
            # Reading the master's loss back also waits for the optimizer step queued behind
            # it on the same stream; when the master computed nothing, wait for the step.
            loss = sum(_loss_value(results[i][0]) * (sizes[i] / batch) for i in active)
            if self._master_index not in results:
                synchronize_device(self.reduce_device)
        step_seconds = time.perf_counter() - start
        if timed is not None:
            begin, end, when = results[timed][1]
            end.synchronize()  # done already when the master's loss was read back
            # The device's time from the shard's first operator to its last.
            device_seconds = begin.elapsed_time(end) / 1e3
            results[timed] = (results[timed][0], device_seconds)
            if len(active) > 1:
                self._master_shard_seconds.append(device_seconds)
            if self.timeline is not None:  # not before its last operator was queued
                self._marks[timed]["synced"] = max(self._marks[timed]["dispatched"], when + device_seconds)
        if self.timeline is not None and len(active) > 1:
            self.timeline.append({
                "shards": list(sizes), "total": step_seconds, "joined": joined - start,
                "reduced": reduced - start, "optimizer": stepped - start,
                "devices": {i: {k: t - start for k, t in self._marks.get(i, {}).items()} for i in active}})
        self._marks = {}

        seconds: list[float | None] = [results[i][1] if i in results else None for i in range(len(sizes))]
        if self.fixed_split is None:
            if busy:
                self.schedule.sat_out(batch, self.steps, sizes, time.perf_counter() - called, idle)
            else:
                self.schedule.after_step(batch, sizes, time.perf_counter() - called, seconds, idle)
        self.last_shards, self.last_device_seconds = list(sizes), seconds
        self.steps += 1
        self._returned_at = time.perf_counter()
        return loss

    def _late_shards(self, futures: dict[int, concurrent.futures.Future], sizes: Sequence[int], start: float,
                     master_done: torch.Event) -> set[int]:
        """The replicas whose shard is late (backup_late_shards): still running LATE_FACTOR x
        the median of their last shard times at that size, plus LATE_MARGIN, after `start`,
        and once the master's shard (`master_done`, its end event) is done too; a step cannot
        end before the master's shard, so waiting that long costs nothing. A replica's first
        shard of a size is waited for: it touches fresh memory (on the H200 the CPU device's
        first shard of the run took 28-75 ms against 7, with 133k page faults, and its first
        at a new size 18-21 ms: 15 of the 16 backups in 13 runs were these). From its
        second until it has 3 times, its usual time is the calibrated model's (a split's first
        steps: on the H200 a stall in the first steps of a split, 41-88 ms against 11, kept the
        split out for the rest of the run); without either it is waited for. So is one whose shard would take
        the master half the replica's usual time or more: by the calibrated model (a pass of
        that many rows, fixed cost included), or uncalibrated (a fixed split) by the master's
        own shard time, scaled up for a larger shard. There a backup saves little, and on a
        host shared by both devices it slows the replica it stands in for (two CPU-plugin
        devices on 2 cores backed up 1 step in 4 and ran 10% slower with a per-row estimate)."""
        late = set()
        if not (self.backup_late_shards and self._loss_stays_in):
            return late
        calibrated = self.balancer.calibrated

        def modelled(device: int, rows: int) -> float:  # the calibrated model's pass of `rows` on `device`
            return self.balancer.predicted_seconds([rows if k == device else 0 for k in range(len(sizes))])

        for i, future in futures.items():
            history = self._shard_seconds.get((i, sizes[i]))
            if history is None:  # its first shard of this size pays first-touch costs: waited for
                continue
            if len(history) >= 3:
                usual = statistics.median(history)
            elif calibrated:
                usual = modelled(i, sizes[i])
            else:
                continue
            if calibrated:  # a pass of the shard on the master, fixed cost included
                master_seconds = modelled(self._master_index, sizes[i])
            elif len(self._master_shard_seconds) >= 3:  # at most its own shard's time, if no larger
                master_seconds = statistics.median(self._master_shard_seconds) * max(
                    1.0, sizes[i] / sizes[self._master_index])
            else:
                continue
            if master_seconds >= 0.5 * usual:
                continue
            limit = self.LATE_FACTOR * usual + self.LATE_MARGIN
            if concurrent.futures.wait([future], timeout=max(start + limit - time.perf_counter(), 0.0)).done:
                continue
            master_done.synchronize()
            if not future.done():
                late.add(i)
        return late

    def _reap_late(self) -> None:
        """Replicas whose abandoned shard has ended compute again: each pulls the master's
        state before it does (its shard may have pulled while the optimizer wrote it). An
        error of such a shard is reported, as its result no longer counts."""
        for i, (future, size) in list(self._late.items()):
            if not future.done():
                continue
            del self._late[i]
            self._stale.add(i)
            error = future.exception()
            if error is not None:
                warnings.warn(f"HeteroDataParallel: the abandoned shard on {self.devices[i]} (the master computed it "
                              f"in its place) raised afterwards: {error!r}", stacklevel=3)
            elif future.result()[1] is not None:
                # Its time counts towards the replica's usual one: a replica that is slow every
                # step, not stalled once, stops being backed up.
                self._note_shard_seconds(i, size, future.result()[1])

    def _note_shard_seconds(self, index: int, size: int, seconds: float) -> None:
        """Keeps replica `index`'s time for a shard of `size` rows (its last LATE_HISTORY)."""
        self._shard_seconds.setdefault((index, size), collections.deque(maxlen=self.LATE_HISTORY)).append(seconds)

    def _drain_late(self, replicas: Iterable[int] | None = None) -> None:
        """Waits for the abandoned shards of `replicas` (all by default) to end, then reaps
        them: before anything copies into those replicas or moves the master."""
        indices = set(self._late) if replicas is None else set(replicas) & set(self._late)
        concurrent.futures.wait([self._late[i][0] for i in indices])
        self._reap_late()

    def _times_master_alone(self) -> bool:
        """Whether a step of the master alone is timed: the last before a re-balance (so each
        re-balance sees a fresh measurement of it) when the split is measured."""
        return (self.fixed_split is None and self.rebalance_every > 0
                and (self.steps + 1) % self.rebalance_every == 0)

    @torch.no_grad()
    def _take_buffers(self, index: int) -> None:
        """The master computed no shard this step: its buffers (BatchNorm statistics) take those
        of replica `index`, which computed the largest shard, so that they follow the training
        as on a step the master computes (else they never moved while the split left the master
        out, and evaluation ran on the initial statistics). The replica's thread has waited for
        its device, so its buffers are final."""
        # Listed afresh: a forward may have replaced a buffer (self.n = self.n + 1).
        for target, source in zip(self.module.buffers(), self.replicas[index].buffers()):
            target.copy_(source)

    @torch.no_grad()
    def _reduce_gradients(self, active: Sequence[int]) -> None:
        """master.grad += Σ_i replica_i.grad over the devices that computed a shard; each shard's
        gradients already carry its weight n_i/N (its loss was scaled before backward). Every
        gradient is copied once to the reduction device and added with one foreach call per
        replica; no flattening, which would need `cat`."""
        if len(active) == 1 and self.replicas[active[0]] is self.module:
            return  # the master alone computed the whole batch: its gradients are the result
        params = self._master_params
        ks = self._trainable  # taken by train_step for this step, as the shipped gradients were
        # The master's gradients are the sums' start, in place: its own shard's when it computed
        # one, and what a loss that reads the master's parameters (a regulariser) added from
        # any shard; None where there is neither (cleared before the step's shards started).
        totals: list[torch.Tensor | None] = [params[k].grad for k in ks]
        queued = self.reduce_device.type != "cpu"
        for i in active:
            if self.replicas[i] is self.module:
                continue
            shipped = self._shipped.get(i)
            if shipped is None:  # a replica not reduced onto an fl master: copied here
                shipped = self._gradients_on_master(i, non_blocking=queued)
            sums, addends = [], []
            for j, g in enumerate(shipped):
                if g is None:
                    continue
                if totals[j] is None:
                    totals[j] = g
                else:
                    sums.append(totals[j])
                    addends.append(g)
            if sums:
                torch._foreach_add_(sums, addends)
        self._shipped = {}
        for k, total in zip(ks, totals):
            params[k].grad = total

    # -- calibration

    def calibrate(self, inputs: Any, targets: Any, loss_fn: Callable) -> None:
        """Times forward/backward on each device alone at two shard sizes (the whole batch and a
        quarter of it), makes the fastest device the reduction device (unless one was given),
        times the gradient round trip of every other device to it, and fits the balancer.
        Parameters and buffers are restored afterwards, also when a pass raises (and then no
        replica keeps a gradient of it); no optimizer step is taken."""
        self._drain_late()
        saved = [t.detach().clone() for t in self._state_tensors(self.module)]
        self._scaler = None  # timed passes only: a step's scaler is taken after calibration
        # The timed passes must not add into the gradient of a batch that requires grad.
        inputs, targets = _map_tensors(inputs, torch.Tensor.detach), _map_tensors(targets, torch.Tensor.detach)
        calibrated = False
        try:
            # Calibration runs the batch several times on every device; a device that would
            # compute on the caller's memory (an fl device that uses host batches in place, the
            # native CPU, whose .to() does not copy) gets a copy, so that a module writing its
            # inputs in place leaves the caller's batch as a copying device would (the timed
            # passes still run in place). The devices that copy read the caller's batch itself: a
            # clone of a pinned batch is pageable, and a GPU timed on pageable uploads measured
            # twice its real step (H200, wide MLP).
            aliases = [self._in_place_from_host[i] or d.type == "cpu" for i, d in enumerate(self.devices)]
            copies = (_host_copy(inputs), _host_copy(targets)) if any(aliases) else None
            batch = _batch_size(inputs)
            # A quarter of the batch, but rows enough for batch norm (_fold_small_shards).
            sizes = sorted({batch, min(batch, max(batch // 4, self._min_shard_rows))})
            points_by_device = []
            for i, device in enumerate(self.devices):
                points = []
                xs, ys = copies if aliases[i] else (inputs, targets)
                for n in sizes:
                    x = _split_batch(xs, [n, batch - n])[0] if n < batch else xs
                    y = _split_batch(ys, [n, batch - n])[0] if n < batch else ys
                    self._clear_master_grads()  # each pass writes fresh gradients, as in a step
                    self._run_shard(i, x, y, loss_fn)  # warm-up: caches, allocator, lazy init
                    for _ in range(self.calibration_reps):
                        self._clear_master_grads()
                        points.append((n, self._run_shard(i, x, y, loss_fn)[1]))
                points_by_device.append(points)
                self.schedule.warm.update((i, n) for n in sizes)
            if self._auto_reduce:
                def whole_batch_seconds(points):
                    times = sorted(t for n, t in points if n == batch)
                    return times[len(times) // 2]
                fastest = min(range(len(self.devices)), key=lambda i: whole_batch_seconds(points_by_device[i]))
                self._move_master(fastest)
            calibrated = True
        finally:
            with torch.no_grad():
                for t, s in zip(self._state_tensors(self.module), saved):
                    t.copy_(s)
            if not calibrated:  # a pass raised: no gradient or statistic of it stays behind
                for replica in self.replicas:
                    for p in replica.parameters():
                        p.grad = None
                self.broadcast()
            self._clear_master_grads()  # also of a loss reading the master's parameters
        self.calibration_points = {str(d): list(points) for d, points in zip(self.devices, points_by_device)}
        for i, points in enumerate(points_by_device):
            self.balancer.calibrate(i, points, self._time_transfer(i))
        self.broadcast()
        self.schedule.forget()

    def _move_master(self, index: int) -> None:
        """Makes devices[index] the reduction device: the master module moves there (its
        Parameter objects stay, so the optimizer keeps them; optimizer state on the old device
        follows), and the replica that was there moves to the old master's device."""
        new, old = self.devices[index], self.reduce_device
        if new == old:
            return
        self._drain_late()  # no abandoned shard may still use the module that moves
        # What was learnt per device index about the replicas' shards is of the old arrangement.
        self._shard_seconds.clear()
        self._master_shard_seconds.clear()
        displaced = self.replicas[index]
        with torch.no_grad():
            self.module.to(new)
            for state in self.optimizer.state.values():
                for k, v in list(state.items()):
                    if isinstance(v, torch.Tensor) and v.device == old:
                        state[k] = v.to(new)
        if old in self.devices:
            self.replicas[self.devices.index(old)] = displaced.to(old)
        self.replicas[index] = self.module
        self.reduce_device = new
        self._note_master()
        self._stale = set(self._non_master)

    def _note_master(self) -> None:
        """Which replica is the master, and which are not (read on every step)."""
        # None when the reduction device is not one of the training devices.
        self._master_index = next((i for i, r in enumerate(self.replicas) if r is self.module), None)
        self._non_master = tuple(i for i, r in enumerate(self.replicas) if r is not self.module)
        # Listed once per master (module.to() replaces buffers, so after every move): the
        # master's parameters (also read by every split step) and tensors, and per other
        # replica its modules and parameters paired with the master's (_follow_master).
        self._master_params = list(self.module.parameters())
        self._master_modules = list(self.module.modules())
        self._master_module_ids = {id(m) for m in self._master_modules}
        # Batch norm in training needs two rows of a shard (of 2-d inputs; _fold_small_shards).
        self._min_shard_rows = 2 if any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                                        for m in self._master_modules) else 1
        self.balancer.min_rows = self._min_shard_rows
        self._seen_flags: list[bool] | None = None  # the flags the replicas last took (None: walk)
        self._seen_modes: list[bool] | None = None
        self._master_tensors = self._master_params + list(self.module.buffers())
        self._master_versions = []
        self._mirrors = [(list(zip(self._master_modules, self.replicas[i].modules())),
                          list(zip(self._master_params, self.replicas[i].parameters())))
                         for i in self._non_master]
        plugin = _plugin_of(self.reduce_device)
        self._push_after_step = tuple(i for i in self._non_master
                                      if plugin is not None and _plugin_of(self.devices[i]) == plugin)
        # Stale replicas pull the master's state in their own thread, on a side stream of the
        # master device (one per replica) that waits for _weights_ready (see
        # _prepare_side_pulls): on the master's own stream the pull would queue behind the
        # forward that the master's thread queues at the same time. An fl master only; the
        # event and streams of a previous master device are dropped.
        self._side_pulls = plugin is not None and bool(self._non_master)
        self._master_times_with_events = _times_with_events(self.reduce_device)
        self._weights_ready: torch.Event | None = None
        self._pull_streams: dict[int, torch.Stream] = {}
        # The master's buffers as the last step left them (the master's forward updates its
        # buffers, BatchNorm statistics, in place while a side-stream pull may be reading).
        self._buffer_snapshot: list[torch.Tensor] = []
        self._side_pulls_ready = False  # the event and snapshot were taken for this step's pulls

    def _time_transfer(self, index: int) -> float:
        """Seconds for the gradients to reach the reduction device and the weights to come back
        (one copy of every parameter each way), the fastest of calibration_reps + 1 round trips:
        the first pays for allocations and cold paths (on the H200 a single round trip of the
        wide MLP's weights once measured 4.3 ms, ten times its usual, and the model then gave
        the CPU-plugin device no rows)."""
        device = self.devices[index]
        if device == self.reduce_device:
            return 0.0
        params = [p.detach() for p in self.replicas[index].parameters()]
        fastest = math.inf
        with torch.no_grad(), device_context(device):
            for _ in range(self.calibration_reps + 1):
                start = time.perf_counter()
                there = [p.to(self.reduce_device) for p in params]
                back = [t.to(device) for t in there]
                synchronize_device(self.reduce_device)
                synchronize_device(device)
                fastest = min(fastest, time.perf_counter() - start)
                del there, back
        return fastest

    # -- checkpointing

    def state_dict(self) -> dict:
        return {"module": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "balancer": self.balancer.state_dict(), "steps": self.steps,
                "devices": [str(d) for d in self.devices], "reduce_device": str(self.reduce_device)}

    def load_state_dict(self, state: dict) -> None:
        """Resumes from `state_dict()`. A checkpoint of other devices (another list, order or
        count) restores the module, the optimizer and the step count; its balancer measurements
        are dropped (with a warning) and the next step calibrates on these devices."""
        self._drain_late()  # an abandoned shard may not compute on what is loaded, nor on a moved master
        saved_devices = state.get("devices")
        same_devices = saved_devices is None or list(saved_devices) == [str(d) for d in self.devices]
        saved_reduce = state.get("reduce_device")
        if self._auto_reduce and saved_reduce is not None and torch.device(saved_reduce) in self.devices:
            self._move_master(self.devices.index(torch.device(saved_reduce)))
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        if same_devices:
            self.balancer.load_state_dict(state["balancer"])
        else:
            warnings.warn(f"HeteroDataParallel: the checkpoint was made on {list(saved_devices)}, this instance "
                          f"trains on {[str(d) for d in self.devices]}: its balancer measurements are dropped "
                          "and the next step calibrates", stacklevel=2)
            b = self.balancer
            self.balancer = ThroughputBalancer(len(self.devices), ema=b.ema, probe_every=b.probe_every,
                                               probe_limit=b.probe_limit, tail_window=b.tail_window)
        self.steps = int(state["steps"])
        self.schedule.forget()
        self.broadcast()

    def close(self) -> None:
        """Stops the worker threads. Evaluation through the master (`hdp(x)`) still works;
        training steps raise."""
        self._closed = True
        self._unwatch_structure()
        self._drain_late()  # (reports an abandoned shard's error)
        self._pool.shutdown(wait=True)

    def _watch_structure(self) -> None:
        """Notes a submodule or parameter assigned to the master after wrapping, or a buffer of a
        new name (torch's global registration hooks; nothing is done per step). The replicas
        are copies made at wrapping and the optimizer holds the parameters of that time, so
        such a model would train as something else on the other devices: the next train_step
        raises instead. A forward that assigns a new tensor to an existing buffer (a counter
        kept out of place) is followed as before."""
        self._structure_changed: str | None = None
        this = weakref.ref(self)

        def on_registration(kind: str):
            def hook(module, name, value):
                hdp = this()
                if hdp is None or hdp._structure_changed is not None or id(module) not in hdp._master_module_ids:
                    return
                if kind == "buffer" and name in module._buffers:
                    return
                hdp._structure_changed = f"{type(module).__name__}.{name}"
            return hook

        registration = nn.modules.module
        self._structure_hooks = [registration.register_module_module_registration_hook(on_registration("module")),
                                 registration.register_module_parameter_registration_hook(on_registration("parameter")),
                                 registration.register_module_buffer_registration_hook(on_registration("buffer"))]

    def _unwatch_structure(self) -> None:
        for handle in getattr(self, "_structure_hooks", []):
            handle.remove()
        self._structure_hooks = []

    def _clear_master_grads(self) -> None:
        """As zero_grad(set_to_none=True) on the master, frozen parameters included (a parameter
        frozen after wrapping keeps no stale gradient that the optimizer would apply)."""
        for p in self._master_params:
            p.grad = None

    def _check_open(self) -> None:
        if self._structure_changed is not None:
            raise RuntimeError(f"HeteroDataParallel: {self._structure_changed} was assigned on the master module after "
                               "wrapping. The replicas on the other devices are copies made at wrapping, and the "
                               "optimizer holds the parameters of that time, so they would train another model: "
                               "wrap the changed module again (HeteroDataParallel(module, devices, optimizer)). "
                               "Changing values in place (weight clipping, load_state_dict) is followed")
        if self._closed:
            raise RuntimeError("HeteroDataParallel is closed: its worker threads have stopped "
                               "(train with a new HeteroDataParallel)")

    def __del__(self):
        self._unwatch_structure()
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
