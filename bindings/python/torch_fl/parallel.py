"""Heterogeneous data parallelism: one model trained on several devices of any mix of plugins
(a CUDA-plugin device beside a CPU-plugin device, say) inside one process.

    hdp = HeteroDataParallel(model, ["fl:0", "fl:1"],
                             optimizer=lambda params: torch.optim.SGD(params, lr=0.1))
    for x, y in loader:
        loss = hdp.train_step(x, y, F.cross_entropy)

Each step:
1. the batch is split along dim 0 into one shard per device, sized by `ThroughputBalancer`:
   a per-device model of step time, s_i·(a_i + b_i·n) + c_i, calibrated on the first batch
   with timed forward/backward passes on each device alone (a_i fixed cost, b_i cost per
   sample, c_i the gradient/weight transfer), with a slowdown s_i under concurrency learnt
   from real steps (EMA; a master computing alone is timed with events on the step before
   each re-balance, so that its estimate follows it too: its s_i then mixes steps alone and
   steps beside the others, which a split re-measures); the split is recomputed every `rebalance_every` steps and minimises
   the predicted step time. A device whose fixed cost exceeds the step time gets no shard.
   On top of the model, a measured guard: the real time per sample of every device set that
   ran is recorded, and the balancer runs whichever of {the model's split, each device
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
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.nn as nn

from . import _C

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


def fit_line(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """(a, b) of the least-squares line t = a + b·n through (n, t) points (b = 0 when every n
    is the same)."""
    ns = [float(n) for n, _ in points]
    ts = [float(t) for _, t in points]
    mean_n, mean_t = sum(ns) / len(ns), sum(ts) / len(ts)
    var = sum((n - mean_n) ** 2 for n in ns)
    b = sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, ts)) / var if var > 0 else 0.0
    return mean_t - b * mean_n, b


# ---- the balancer --------------------------------------------------------------------


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


def _fold_small_shards(sizes: list[int], min_rows: int) -> list[int]:
    """`sizes` with every shard smaller than `min_rows` moved into the largest one: batch norm in
    training needs more than one value per channel, so a split that hands a device one row (an
    epoch's short last batch, or a granularity's last piece) failed with BatchNorm's "Expected
    more than 1 value per channel"."""
    if min_rows <= 1:
        return sizes
    sizes = list(sizes)
    for i in sorted(range(len(sizes)), key=lambda k: sizes[k]):
        if 0 < sizes[i] < min_rows and sum(n > 0 for n in sizes) > 1:
            largest = max((k for k in range(len(sizes)) if k != i), key=lambda k: sizes[k])
            sizes[largest] += sizes[i]
            sizes[i] = 0
    return sizes


class ThroughputBalancer:
    """Splits a batch over devices from a per-device step-time model, and keeps a device set
    only while it measures faster than the fastest device alone.

    Model: device i takes s_i·(a_i + b_i·n) + c_i seconds for a shard of n samples. a_i (fixed
    cost: per-operator launch overhead) and b_i (cost per sample) are fitted by `calibrate` to
    timed passes of the device alone; c_i is its gradient/parameter transfer to and from the
    reduction device. s_i, the slowdown while the devices run together (shared host cores,
    GIL contention, a busy machine), starts at 1 and follows the ratio measured/predicted of
    real steps as an exponential moving average (`observe`, weight `ema` for the newest step).
    Scaling a_i and b_i together keeps a small shard's fixed cost from being read as a high
    per-sample cost, which would starve the device.

    Guard: `record_step` keeps the measured wall time per sample of each device *set* that ran
    (EMA; a device alone starts from its calibrated time). `plan` runs whichever of {the
    model's split, each device alone} measured fastest, and every `probe_every`-th plan
    re-runs for one step the candidate with the oldest record — so a device set that is
    slower than one device alone runs only during those probes. A candidate that lost its last
    probe waits twice as long for the next (probe_every·2^k plans after k losses in a row, k at
    most MAX_BACKOFF = 6), so probing a split that keeps losing (a CPU beside an H200) costs
    ever less; a win resets k. One measured more than `probe_limit` times slower per sample
    than the best waits the longest interval from when it last ran.

    Recheck: a set that loses its place as the best because its own record rose (a slow spell
    of a shared host inflates the record of whatever runs) is probed once at the next counted
    plan, whatever the probe clock says, even when that record is now far slower than the
    best (one step of a device 80x slower than normal would otherwise exile the fastest device
    for probe_every·64 plans). The record that displaced it was measured in other conditions
    (plans ago), so one step answers which is faster now; a recheck that loses is averaged
    in, without the backoff. So is a set whose
    record is still its calibration's (a device alone that never ran a real step; calibrated
    passes can be far off, cold caches and no optimizer step) once the best set has run,
    unless it is more than probe_limit² times slower; a first real step faster than the
    calibrated record replaces it (a slower one is averaged in: it may carry one-off costs).
    A model split that took the place before it had a record counts its first record as the
    one it took the place with.

    Shard sizes are multiples of `granularity` (one device takes the remainder), so that a
    drifting split reuses a few shapes: each new shape costs a warm-up step on most devices
    (cuDNN plans, allocator blocks)."""

    MAX_BACKOFF = 6  # a candidate waits at most probe_every·2^6 plans between probes
    HISTORY = 256  # plans and recorded steps kept in `history`

    def __init__(self, num_devices: int, ema: float = 0.3, probe_every: int = 5, probe_limit: float = 2.0):
        if num_devices < 1:
            raise ValueError("need at least one device")
        if not 0.0 < ema <= 1.0:
            raise ValueError("ema must be in (0, 1]")
        self.num_devices = num_devices
        self.ema = ema
        self.probe_every = max(int(probe_every), 1)
        self.probe_limit = float(probe_limit)
        # The fewest rows a shard may have (2 for a model with batch norm, set by
        # HeteroDataParallel): split() folds smaller ones into the largest, so that the plan's
        # device set is the one that runs and is recorded.
        self.min_rows = 1
        self.overhead = [0.0] * num_devices       # a_i, seconds
        self.per_sample = [1.0] * num_devices     # b_i, seconds per sample
        self.transfer = [0.0] * num_devices       # c_i, seconds
        self.slowdown = [1.0] * num_devices       # s_i
        self.measured: dict[str, float] = {}      # device set "0,1" -> seconds per sample (EMA)
        self.last_seen: dict[str, int] = {}       # device set -> the plan during which it last ran
        self.losses: dict[str, int] = {}          # device set -> probes lost in a row
        self.last_probe: dict[str, int] = {}      # device set -> the plan that last probed it
        self._candidates: list[str] = []          # the device sets the last plan chose among
        self.calibrated = False
        self.observations = 0
        self.plans = 0
        self.probing = False  # the last plan re-tries a set that measured slower: run it once
        self.rechecking = False  # ...and that probe is a recheck of a set that lost its place
        self.incumbent: str | None = None  # the set the last unprobed plan ran...
        self._incumbent_record: float | None = None  # ...and its record when it took the place
        self.recheck: set[str] = set()     # sets that lost their place, probed at the next counted plan
        # The last HISTORY events, oldest first, to see why a split ran: {"plan": n, "chose":
        # device set, "probing": bool, "records": {device set: s/sample}} per counted plan,
        # and {"step": device set, "during_plan": n, "s_per_sample": measured, "record": after}
        # per recorded step.
        self.history: collections.deque[dict] = collections.deque(maxlen=self.HISTORY)

    # -- model updates

    def calibrate(self, device: int, points: Sequence[tuple[int, float]], transfer_s: float = 0.0) -> None:
        """Fits a_i and b_i to (shard size, seconds) measurements of device `device` alone."""
        ns = [float(n) for n, _ in points]
        ts = [float(t) for _, t in points]
        a, b = fit_line(points)
        if b <= 0:  # the time did not grow with the shard: it is (nearly) all fixed cost
            mean_n, mean_t = sum(ns) / len(ns), sum(ts) / len(ts)
            b = 0.01 * mean_t / max(mean_n, 1.0)
            a = mean_t - b * mean_n
        else:
            a = max(a, 0.0)
        self.overhead[device] = a
        self.per_sample[device] = max(b, 1e-12)
        self.transfer[device] = max(float(transfer_s), 0.0)
        self.slowdown[device] = 1.0
        largest = max(ns)
        alone = [t for n, t in zip(ns, ts) if n == largest]
        key = self._key([device])
        if key not in self.measured:  # the device alone, as calibrated, until real steps say more
            self.measured[key] = (sorted(alone)[len(alone) // 2] + self.transfer[device]) / largest
        self.calibrated = True

    def observe(self, shard_sizes: Sequence[int], seconds: Sequence[float | None]) -> None:
        """Folds the measured compute time of one step on each device into its slowdown s_i."""
        for i, (n, t) in enumerate(zip(shard_sizes, seconds)):
            if n <= 0 or t is None:
                continue
            ratio = t / max(self.overhead[i] + self.per_sample[i] * n, 1e-12)
            self.slowdown[i] = (1.0 - self.ema) * self.slowdown[i] + self.ema * ratio
        self.observations += 1

    def record_step(self, shard_sizes: Sequence[int], seconds: float) -> None:
        """Folds the wall time of one whole step (weight pulls, forward/backward on every
        device, gradient reduction, optimizer step, loss read-back) into its device set's
        record. Before a device has run alone for real, its record is its calibrated
        forward/backward time plus transfers (no optimizer step); the first real step of that
        mode replaces it when faster, and is averaged in when slower."""
        batch = sum(shard_sizes)
        if batch <= 0:
            return
        key = self._key([i for i, n in enumerate(shard_sizes) if n > 0])
        now = seconds / batch
        old = self.measured.get(key)
        if key not in self.last_seen and old is not None and now < old:
            # A calibration's record that the first real step beats is replaced: calibrated
            # passes run cold and can be several times slow. One that it does not beat is
            # averaged, as a first step may carry one-off costs (the first optimizer step).
            old = None
        self.last_seen[key] = self.plans
        if self.probing:
            # A probe's step is its verdict: is the set now faster than the other candidates of
            # this plan on record? A win replaces the set's record (which may be many plans
            # old), so the next plan runs it; a loss is averaged in, so that one bad step does
            # not spoil the record.
            won = now <= min(self._other_records(key), default=math.inf)
            if won:
                self.losses[key] = 0
            elif not self.rechecking:  # a recheck that loses does not lengthen the wait
                self.losses[key] = min(self.losses.get(key, 0) + 1, self.MAX_BACKOFF)
            if won or old is None:
                self.measured[key] = now
                self.history.append({"step": key, "during_plan": self.plans, "s_per_sample": now, "record": now,
                                     "probe_won": won})
                return
        self.measured[key] = now if old is None else (1.0 - self.ema) * old + self.ema * now
        self.history.append({"step": key, "during_plan": self.plans, "s_per_sample": now,
                             "record": self.measured[key]})

    def beaten(self, shard_sizes: Sequence[int]) -> bool:
        """Whether the device set of this split now has a worse record (time per sample) than
        another candidate of the last plan: the plan that chose it is out of date."""
        key = self._key(i for i, n in enumerate(shard_sizes) if n > 0)
        mine, others = self.measured.get(key), self._other_records(key)
        return mine is not None and bool(others) and mine > min(others)

    def _other_records(self, key: str) -> list[float]:
        """The records of the last plan's candidates other than `key`."""
        return [self.measured[k] for k in self._candidates if k != key and k in self.measured]

    # -- the split

    @staticmethod
    def _key(devices: Iterable[int]) -> str:
        return ",".join(str(i) for i in sorted(devices))

    def _fixed(self, i: int) -> float:
        return self.slowdown[i] * self.overhead[i] + self.transfer[i]

    def _rate(self, i: int) -> float:
        return self.slowdown[i] * self.per_sample[i]

    def predicted_seconds(self, shard_sizes: Sequence[int]) -> float:
        """The model's step time for a split: the slowest participating device."""
        return max((self._fixed(i) + self._rate(i) * n for i, n in enumerate(shard_sizes) if n > 0),
                   default=0.0)

    def split(self, batch_size: int, granularity: int = 1) -> list[int]:
        """Shard sizes (summing to `batch_size`, each a multiple of `granularity` but for one
        that takes the remainder) that minimise the predicted step time.

        Water-filling: with devices sorted by fixed cost, the k cheapest share the batch so that
        all finish at the same time T_k = (N + Σ a_i/b_i) / Σ 1/b_i; devices are added while the
        next one's fixed cost is below T_k (adding it then shortens the step)."""
        if batch_size <= 0:
            return [0] * self.num_devices
        order = sorted(range(self.num_devices), key=lambda i: (self._fixed(i), self._rate(i)))
        chosen: list[int] = []
        finish = math.inf
        for i in order:
            if chosen and self._fixed(i) >= finish:
                break
            trial = chosen + [i]
            t = (batch_size + sum(self._fixed(j) / self._rate(j) for j in trial)) / sum(
                1.0 / self._rate(j) for j in trial)
            if t > finish:
                break
            chosen, finish = trial, t
        ideal = {i: max((finish - self._fixed(i)) / self._rate(i), 0.0) for i in chosen}
        total = sum(ideal.values()) or 1.0
        q = max(1, min(int(granularity), batch_size))
        sizes = [0] * self.num_devices
        for i, v in ideal.items():
            sizes[i] = q * int(math.floor(v * batch_size / total / q))
        # Hand out the rounding remainder, q samples at a time (the last piece may be smaller),
        # to the device that finishes earliest with it.
        left = batch_size - sum(sizes)
        while left > 0:
            piece = min(q, left)
            j = min(chosen, key=lambda i: self._fixed(i) + self._rate(i) * (sizes[i] + piece))
            sizes[j] += piece
            left -= piece
        return _fold_small_shards(sizes, self.min_rows)

    def fastest_alone(self) -> int | None:
        """The device with the lowest measured time per sample alone (None before calibration)."""
        alone = [(self.measured[self._key([i])], i) for i in range(self.num_devices)
                 if self._key([i]) in self.measured]
        return min(alone)[1] if alone else None

    def plan(self, batch_size: int, granularity: int = 1, count: bool = True) -> list[int]:
        """The split to run next (see _choose); a counted plan is logged in `history`."""
        sizes = self._choose(batch_size, granularity, count)
        if count:
            self.history.append({"plan": self.plans, "chose": self._key(i for i, n in enumerate(sizes) if n > 0),
                                 "probing": self.probing, "recheck": self.rechecking,
                                 "records": {k: self.measured[k] for k in self._candidates if k in self.measured}})
        return sizes

    def _choose(self, batch_size: int, granularity: int = 1, count: bool = True) -> list[int]:
        """The split to run next. Candidates: the model's split, and each device alone.
        Normally the candidate whose device set measured the lowest time per sample (the
        model's split is tried as soon as its set has no record); every `probe_every`-th plan
        instead runs, for one step, the candidate whose record is oldest, so that every
        record follows the machine as it changes. A plan with `count=False` (a re-plan
        between re-balances) neither advances the probe clock nor probes."""
        if count:
            self.plans += 1
        self.probing = self.rechecking = False
        model = self.split(batch_size, granularity)
        candidates = {self._key(i for i, n in enumerate(model) if n > 0): model}
        for i in range(self.num_devices):
            alone = [0] * self.num_devices
            alone[i] = batch_size
            candidates.setdefault(self._key([i]), alone)
        self._candidates = list(candidates)
        if len(candidates) == 1:
            return model
        best_seen = min((self.measured[k] for k in candidates if k in self.measured), default=None)

        def far(k: str) -> bool:  # more than probe_limit times slower per sample than the best
            return best_seen is not None and k in self.measured and self.measured[k] > self.probe_limit * best_seen

        if count:
            # A set that lost its place since the last counted plan, or one whose record is
            # still only its calibration's (which may be far off: cold caches, no optimizer
            # step) while the best has run for real: one step says which is faster now.
            # A calibration can be off by 2x: such a record counts as far only beyond
            # probe_limit² times the best (a CPU alone beside an H200 still is).
            best_ran = any(k in self.last_seen and self.measured.get(k) == best_seen for k in candidates)
            calibrated_only = [k for k in candidates if best_ran and k in self.measured and k not in self.last_seen
                               and k not in self.last_probe  # once (a probe at a new shape is unrecorded)
                               and self.measured[k] <= self.probe_limit ** 2 * best_seen]
            # A recheck is due even when the set's record is now far slower than the best: it
            # was the best when it took its place, so a step or two slower than that by orders
            # of magnitude (a page-in, a driver hiccup) is what made it far, and one step
            # costs less than the longest wait would lose.
            due = [k for k in candidates
                   if (k in self.recheck or k in calibrated_only) and self.measured.get(k) != best_seen]
            self.recheck.clear()
            if due:
                key = min(due, key=self.measured.__getitem__)
                self.probing = self.rechecking = True
                self.last_probe[key] = self.plans
                return candidates[key]
        if count and self.plans % self.probe_every == 0:

            def is_due(k: str) -> bool:
                # A candidate that lost its last k probes waits probe_every·2^k plans. One far
                # slower than the best (a CPU beside an H200, alone) waits the longest, counted
                # from when it last ran: a step of it costs more than probes can win back, but
                # a record spoiled by one bad step is not final.
                if far(k):
                    since = self.last_probe.get(k, self.last_seen.get(k, 0))
                    return self.plans - since >= self.probe_every * 2 ** self.MAX_BACKOFF
                since = self.last_probe.get(k)
                return since is None or self.plans - since >= self.probe_every * 2 ** self.losses.get(k, 0)

            # The best runs anyway; the others are probed when due, the oldest record first.
            due = [k for k in candidates if (best_seen is None or self.measured.get(k) != best_seen) and is_due(k)]
            if due:
                key = min(due, key=lambda k: self.last_seen.get(k, -1))
                self.probing = True
                self.last_probe[key] = self.plans
                return candidates[key]
        model_key = next(iter(candidates))
        best = model_key if model_key not in self.measured else min(
            (k for k in candidates if k in self.measured), key=self.measured.__getitem__)
        if (best != self.incumbent and self.incumbent in candidates and self._incumbent_record is not None
                and best in self.measured and self._incumbent_record <= self.measured[best]):
            # It lost its place only because its own record rose: with the record it had when
            # it took the place, it would still be the best.
            self.recheck.add(self.incumbent)
        if best != self.incumbent or self._incumbent_record is None:
            # A model split without a record counts its first one as the record it took the
            # place with. (A calibrated record counts as it is: when the first real steps then
            # lose the place, one recheck tells a one-off slow first step from the real speed.)
            self.incumbent, self._incumbent_record = best, self.measured.get(best)
        return candidates[best]

    # -- checkpointing

    def state_dict(self) -> dict:
        return {"ema": self.ema, "probe_every": self.probe_every, "overhead": list(self.overhead),
                "per_sample": list(self.per_sample), "transfer": list(self.transfer),
                "slowdown": list(self.slowdown), "measured": dict(self.measured),
                "probe_limit": self.probe_limit,
                "last_seen": dict(self.last_seen), "losses": dict(self.losses),
                "last_probe": dict(self.last_probe),
                "incumbent": self.incumbent, "incumbent_record": self._incumbent_record,
                "recheck": sorted(self.recheck),
                "calibrated": self.calibrated, "observations": self.observations, "plans": self.plans}

    def load_state_dict(self, state: dict) -> None:
        if len(state["per_sample"]) != self.num_devices:
            raise ValueError(f"balancer state is for {len(state['per_sample'])} devices, "
                             f"this one has {self.num_devices}")
        self.ema = float(state["ema"])
        self.probe_every = int(state["probe_every"])
        self.probe_limit = float(state.get("probe_limit", self.probe_limit))
        self.probing = self.rechecking = False
        self.incumbent = state.get("incumbent")
        record = state.get("incumbent_record")
        self._incumbent_record = None if record is None else float(record)
        self.recheck = {str(k) for k in state.get("recheck", [])}
        self.overhead = [float(v) for v in state["overhead"]]
        self.per_sample = [float(v) for v in state["per_sample"]]
        self.transfer = [float(v) for v in state["transfer"]]
        self.slowdown = [float(v) for v in state["slowdown"]]
        self.measured = {str(k): float(v) for k, v in state["measured"].items()}
        self.last_seen = {str(k): int(v) for k, v in state["last_seen"].items()}
        self.losses = {str(k): int(v) for k, v in state.get("losses", {}).items()}
        self.last_probe = {str(k): int(v) for k, v in state.get("last_probe", {}).items()}
        self.calibrated = bool(state["calibrated"])
        self.observations = int(state["observations"])
        self.plans = int(state["plans"])


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


def _call(module: nn.Module, inputs: Any) -> Any:
    """The module on a shard of the inputs: a plain tuple is its positional arguments, a dict
    its keyword arguments, anything else (a tensor, a list, a namedtuple) one argument."""
    if type(inputs) is tuple:
        return module(*inputs)
    if isinstance(inputs, dict):
        return module(**inputs)
    return module(inputs)


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
        granularity: shard sizes are multiples of this (default: the largest power of two
            that is at most batch/16), so that a drifting split reuses a few shapes. A step
            that runs a shard size a device has not run before is a warm-up (cuDNN plans,
            allocator blocks): it is not measured, and the same split runs again.
        split: fixed shard proportions (e.g. [3, 1]) instead of measuring; no calibration.
        calibration_reps: timed forward/backward passes per device and shard size at the start.
        debug: after every step, assert that every replica is bit-identical to the master.
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

    def __init__(self, module: nn.Module, devices: Sequence[str | torch.device],
                 optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
                 reduce_device: str | torch.device | None = None, rebalance_every: int = 10,
                 ema: float = 0.3, split: Sequence[float] | None = None, calibration_reps: int = 2,
                 probe_every: int = 5, probe_limit: float = 2.0, granularity: int | None = None,
                 debug: bool = False, host_zero_copy: bool = True):
        self.devices = [_with_index(d) for d in devices]
        if not self.devices:
            raise ValueError("HeteroDataParallel needs at least one device")
        # Per device: its shards of a host batch are used in place (see host_zero_copy).
        self._in_place_from_host = [bool(host_zero_copy) and _takes_host_pointers(d) for d in self.devices]
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices must be distinct, got {self.devices}")
        self._auto_reduce = reduce_device is None
        self.reduce_device = _with_index(reduce_device) if reduce_device is not None else self.devices[0]
        self.rebalance_every = int(rebalance_every)
        self.calibration_reps = max(int(calibration_reps), 1)
        self.calibration_points: dict[str, list[tuple[int, float]]] = {}  # device -> (shard, s)
        self.debug = debug
        self.fixed_split = list(split) if split is not None else None
        if self.fixed_split is not None:
            if len(self.fixed_split) != len(self.devices):
                raise ValueError("split needs one proportion per device")
            if not all(math.isfinite(w) and w >= 0 for w in self.fixed_split) or sum(self.fixed_split) <= 0:
                raise ValueError(f"split needs finite proportions >= 0 with a positive sum, got {self.fixed_split}")
        self.balancer = ThroughputBalancer(len(self.devices), ema=ema, probe_every=probe_every, probe_limit=probe_limit)
        self.steps = 0
        self.last_shards: list[int] = []
        self.last_device_seconds: list[float | None] = []
        self._shards_for: dict[int, list[int]] = {}
        self.granularity = granularity
        self._warm: set[tuple[int, int]] = set()        # (device index, shard size) that ran before
        self._rerun: tuple[int, list[int]] | None = None  # (batch, sizes) to measure again, warm
        self._warm_split: dict[tuple, list[int]] = {}     # (batch, device set) -> last split run warm
        self._refresh_pending = False
        self._replan_for: int | None = None  # a batch size whose split measured beaten: plan it again
        self._last_batch: int | None = None
        self._stale: set[int] = set()  # replicas that have not yet received the master's last update
        self.timeline: list[dict] | None = None
        self._marks: dict[int, dict[str, float]] = {}  # this step's per-device marks (timeline)
        self._trainable: list[int] = []  # this step's trainable parameter indices
        self._shipped: dict[int, list[torch.Tensor | None]] = {}  # replica -> its gradients on the master
        self._master_queued = threading.Event()  # set once this step's master shard is queued
        self._closed = False
        self._autocast: list[tuple[str, bool, torch.dtype]] = []  # the caller's, for the pool's threads
        self._scaler: torch.amp.GradScaler | None = None  # this step's (train_step), for every shard

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
        self.broadcast()

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
        if self._non_master and self._master_versions and self._versions() != self._master_versions:
            self._stale = set(self._non_master)

    @torch.no_grad()
    def broadcast(self, replicas: Iterable[int] | None = None) -> None:
        """Copies the master's parameters and buffers into the other replicas (all by default),
        so that they hold exactly the master's bits."""
        indices = range(len(self.replicas)) if replicas is None else replicas
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
        master = [t.detach().cpu() for t in self._state_tensors(self.module)]
        for i in (range(len(self.replicas)) if replicas is None else replicas):
            if self.replicas[i] is self.module:
                continue
            if i in self._stale:
                self._copy_from_master(i)
            for k, t in enumerate(self._state_tensors(self.replicas[i])):
                if not torch.equal(t.detach().cpu(), master[k]):
                    raise AssertionError(f"replica on {self.devices[i]} differs from the master in tensor {k}")

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
                   wait: bool = True, weight: float = 1.0,
                   ship_on: torch.Stream | None = None) -> tuple[torch.Tensor | float, float | None]:
        """Forward and backward of one shard on device `index`; returns (loss, seconds until
        the device finished, or None when not `wait`ing for it). With `ship_on` (the stream of
        the reduction device that the step's thread reduces on), a waited shard then sends its
        gradients there itself (_ship_gradients) and returns its loss as a float, so that the
        step's thread finds both ready when it joins."""
        device = self.devices[index]
        with device_context(device), contextlib.ExitStack() as autocast:
            for device_type, enabled, dtype in self._autocast:
                if enabled:
                    autocast.enter_context(torch.autocast(device_type, dtype=dtype))
            start = time.perf_counter()
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
                shipping = time.perf_counter()
                self._shipped[index] = self._ship_gradients(index, ship_on)
                if self.timeline is not None:
                    self._marks[index].update(shipping=shipping, shipped=time.perf_counter())
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
        due = self.rebalance_every > 0 and self.steps % self.rebalance_every == 0
        if self._rerun is not None and self._rerun[0] == batch_size:
            sizes, self._rerun = self._rerun[1], None
            self._refresh_pending |= due  # a re-balance due now happens on the next step
            return sizes
        refresh = due or self.balancer.probing or self._refresh_pending
        self._refresh_pending = False
        replan = self._replan_for == batch_size
        if replan:
            self._replan_for = None
        if batch_size not in self._shards_for or refresh or replan:
            # A re-plan alone does not advance the probe clock (probes stay paced by re-balances).
            sizes = self.balancer.plan(batch_size, self._granularity(batch_size), count=refresh or not replan)
            if self.balancer.probing:
                # A probe asks whether a device set is competitive; a split of that set that
                # already ran answers it without a warm-up step (new cuDNN plans cost more
                # than a few samples' difference in the split).
                warm = self._warm_split.get((batch_size, self._device_set(sizes)))
                if warm is not None and self._cold_shards(sizes):
                    sizes = list(warm)
            self._shards_for[batch_size] = sizes
        return self._shards_for[batch_size]

    @staticmethod
    def _device_set(sizes: Sequence[int]) -> tuple[int, ...]:
        """The devices that get a shard."""
        return tuple(i for i, n in enumerate(sizes) if n > 0)

    def _cold_shards(self, sizes: Sequence[int]) -> list[tuple[int, int]]:
        """(device, shard size) pairs of a split that no step has run yet."""
        return [(i, sizes[i]) for i in self._device_set(sizes) if (i, sizes[i]) not in self._warm]

    def _granularity(self, batch_size: int) -> int:
        if self.granularity is not None:
            return max(int(self.granularity), 1)
        return 1 << max((batch_size // 16).bit_length() - 1, 0)

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
        # The pool's threads run each shard under the caller's autocast (it is per thread).
        self._autocast = _autocast_state(d.type for d in self.devices)
        self._follow_master()
        if self.fixed_split is None and not self.balancer.calibrated:
            self.calibrate(inputs, targets, loss_fn)
        # Before any shard starts (a replica's loss may add into them; see _reduce_gradients).
        self._clear_master_grads()
        self._scaler = scaler if scaler is not None and scaler.is_enabled() else None
        if self._scaler is not None and getattr(self._scaler, "_scale", None) is None:
            # GradScaler creates its scale on first use: here, not in several shards' threads at once.
            self._scaler.scale(torch.ones((), device=self.reduce_device))
        sizes = self._shard_sizes(batch)
        active = self._device_set(sizes)
        if len(active) == 1:
            in_parts, tgt_parts = [inputs], [targets]
        else:
            in_parts = _split_batch(inputs, [sizes[i] for i in active])
            tgt_parts = _split_batch(targets, [sizes[i] for i in active])
        if self.debug:  # update the computing replicas here, and check them, before the step
            self.broadcast([i for i in active if i in self._stale])
            self.assert_replicas_identical(active)
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
                futures, results = {}, {}
                try:
                    for i, (x, y) in parts.items():
                        if i != timed:
                            futures[i] = self._pool.submit(self._run_shard, i, x, y, loss_fn, True, weights[i],
                                                           ship_on if self.replicas[i] is not self.module else None)
                    if timed is not None:
                        results[timed] = self._queue_timed_shard(timed, *parts[timed], loss_fn, weights[timed])
                finally:
                    # Every shard ends (also when one raised) before the snapshot is dropped and
                    # the caller sees an error: no thread of this step outlives it.
                    self._master_queued.set()
                    concurrent.futures.wait(futures.values())
                    self._side_pulls_ready = False  # the snapshot is this step's only
                results.update({i: f.result() for i, f in futures.items()})
                joined = time.perf_counter()
                self._reduce_gradients(active)
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
                if sizes[i] > 0:
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
            if self.timeline is not None:  # not before its last operator was queued
                self._marks[timed]["synced"] = max(self._marks[timed]["dispatched"], when + device_seconds)
        if self.timeline is not None and len(active) > 1:
            self.timeline.append({
                "shards": list(sizes), "total": step_seconds, "joined": joined - start,
                "reduced": reduced - start, "optimizer": stepped - start,
                "devices": {i: {k: t - start for k, t in self._marks.get(i, {}).items()} for i in active}})
        self._marks = {}

        seconds: list[float | None] = [results[i][1] if i in results else None for i in range(len(sizes))]
        cold = self._cold_shards(sizes)
        self._warm.update(cold)
        self._warm_split[(batch, active)] = list(sizes)
        if self.fixed_split is None:
            if cold:
                self._rerun = (batch, list(sizes))  # a warm-up: measure this split on the next step
            else:
                self.balancer.observe(sizes, seconds)
                self.balancer.record_step(sizes, step_seconds)
                # A split that just measured slower than another candidate's record is not kept
                # until the next re-balance: the next step of this batch size plans again (when
                # re-balancing is on; not on a batch of another size than the step before, such
                # as an epoch's short last batch, whose time per sample is not comparable).
                if (self.rebalance_every > 0 and not self.balancer.probing and batch == self._last_batch
                        and self.balancer.beaten(sizes)):
                    self._replan_for = batch
        self.last_shards, self.last_device_seconds = list(sizes), seconds
        self._last_batch = batch
        self.steps += 1
        return loss

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
                self._warm.update((i, n) for n in sizes)
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
        self._forget_plans()

    def _forget_plans(self) -> None:
        """Drops the splits planned so far (after calibration or a resume)."""
        self._shards_for.clear()
        self._rerun = None
        self._replan_for = None

    def _move_master(self, index: int) -> None:
        """Makes devices[index] the reduction device: the master module moves there (its
        Parameter objects stay, so the optimizer keeps them; optimizer state on the old device
        follows), and the replica that was there moves to the old master's device."""
        new, old = self.devices[index], self.reduce_device
        if new == old:
            return
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
        (timed as one copy of every parameter each way)."""
        device = self.devices[index]
        if device == self.reduce_device:
            return 0.0
        params = [p.detach() for p in self.replicas[index].parameters()]
        with torch.no_grad(), device_context(device):
            start = time.perf_counter()
            there = [p.to(self.reduce_device) for p in params]
            back = [t.to(device) for t in there]
            synchronize_device(self.reduce_device)
            synchronize_device(device)
            del there, back
            return time.perf_counter() - start

    # -- checkpointing

    def state_dict(self) -> dict:
        return {"module": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "balancer": self.balancer.state_dict(), "steps": self.steps,
                "devices": [str(d) for d in self.devices], "reduce_device": str(self.reduce_device)}

    def load_state_dict(self, state: dict) -> None:
        """Resumes from `state_dict()`. A checkpoint of other devices (another list, order or
        count) restores the module, the optimizer and the step count; its balancer measurements
        are dropped (with a warning) and the next step calibrates on these devices."""
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
                                               probe_limit=b.probe_limit)
        self.steps = int(state["steps"])
        self._forget_plans()
        self.broadcast()

    def close(self) -> None:
        """Stops the worker threads. Evaluation through the master (`hdp(x)`) still works;
        training steps raise."""
        self._closed = True
        self._pool.shutdown(wait=True)

    def _clear_master_grads(self) -> None:
        """As zero_grad(set_to_none=True) on the master, frozen parameters included (a parameter
        frozen after wrapping keeps no stale gradient that the optimizer would apply)."""
        for p in self._master_params:
            p.grad = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("HeteroDataParallel is closed: its worker threads have stopped "
                               "(train with a new HeteroDataParallel)")

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
