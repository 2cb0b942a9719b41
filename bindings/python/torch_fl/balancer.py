"""The throughput balancer of HeteroDataParallel: how a batch is split over devices of
different speeds (ThroughputBalancer), and which split each step runs (SplitSchedule: warm-up
and return steps, re-balances, re-plans of a beaten split). Neither touches a device: they
see shard sizes and measured seconds only, so their behaviour can be replayed with synthetic
step times (tests/python/test_balancer_replay.py)."""
from __future__ import annotations

import collections
import math
from typing import Iterable, Sequence

__all__ = ["ThroughputBalancer", "SplitSchedule", "device_set", "fit_line"]


def fit_line(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """(a, b) of the least-squares line t = a + b·n through (n, t) points (b = 0 when every n
    is the same)."""
    ns = [float(n) for n, _ in points]
    ts = [float(t) for _, t in points]
    mean_n, mean_t = sum(ns) / len(ns), sum(ts) / len(ts)
    var = sum((n - mean_n) ** 2 for n in ns)
    b = sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, ts)) / var if var > 0 else 0.0
    return mean_t - b * mean_n, b


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


def device_set(sizes: Sequence[int]) -> tuple[int, ...]:
    """The devices that get a shard of a split."""
    return tuple(i for i, n in enumerate(sizes) if n > 0)


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
    one it took the place with. A split's first real step, or its first after steps of
    another set, that lost by less than probe_limit is looked at again at once: SplitSchedule
    runs it once more, and that step's time replaces the first one's (wants_second_look).
    The model's split in another shape than the one its set's record measured is probed once
    in that shape when the model expects it faster (a calibration off by 20% gives a first
    split that loses; the model, corrected by its steps, moves rows, and the record of the old
    shape would otherwise keep the new one out until the probe clock, which then runs the
    set's last warm split).

    Tail: a step lasts as long as its slowest device, so a device whose speed varies from step
    to step (a host device sharing cores with the driver threads, a busy machine) sets the
    step's time whenever it has a slow step, and a split that equalises typical times loses
    more on those steps than it gains on the others. On the H200 (wide MLP, batch 65536, a
    fixed split) the CPU-plugin device's forward/backward took up to 4x its median on some
    steps, and those steps alone made the split slower than the GPU alone in half the runs.
    So once `TAIL_MIN` steps of a device set have measured every device's time, `split` moves
    rows between that set's devices, one granularity piece at a time, while this lowers the
    mean over those steps (those of the last `tail_window` that timed each device) of the slowest
    device's time, each device scaled by what it measured in that step (its ratio measured /
    predicted). Steps are kept whole, so devices that slow down together (the host is busy)
    count as such. Where no device varies, this keeps the equal-finish split; tail_window=0
    turns it off.

    Shard sizes are multiples of `granularity` (one device takes the remainder), so that a
    drifting split reuses a few shapes: each new shape costs a warm-up step on most devices
    (cuDNN plans, allocator blocks)."""

    TAIL_MIN = 8  # steps of a device set with every device timed before its tail shapes the split
    MAX_BACKOFF = 6  # a candidate waits at most probe_every·2^6 plans between probes
    SWITCH_PAYBACK = 20  # steps over which a second look charges the cost of its first step (see record_step)
    HISTORY = 256  # plans and recorded steps kept in `history`

    def __init__(self, num_devices: int, ema: float = 0.3, probe_every: int = 5, probe_limit: float = 2.0,
                 tail_window: int = 32):
        if num_devices < 1:
            raise ValueError("need at least one device")
        if not 0.0 < ema <= 1.0:
            raise ValueError("ema must be in (0, 1]")
        if tail_window < 0:
            raise ValueError("tail_window must be >= 0")
        self.tail_window = int(tail_window)
        # The ratios measured / predicted of the last tail_window steps that timed two devices
        # or more: one tuple per step, None for a device it did not time (tail_steps picks the
        # ones that timed every device of a set).
        self.ratios: collections.deque[tuple[float | None, ...]] = collections.deque(maxlen=max(self.tail_window, 1))
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
        self.recorded_steps: dict[str, int] = {}  # device set -> real steps recorded for it
        self.record_shapes: dict[str, list[int]] = {}  # "device set|batch" -> the split of its last recorded step
        self.reshape_probes: set[str] = set()  # device sets whose model split was probed in a new shape
        self.reshaping = False  # the last plan probes the model's split in a new shape: run that shape
        self._first_looks: dict[str, float] = {}  # device set -> s/sample of the step a second look repeats
        self.second_looks: set[str] = set()  # split sets whose losing first step was looked at again (recorded)
        # The last HISTORY events, oldest first, to see why a split ran: {"plan": n, "chose":
        # device set, "probing": bool, "records": {device set: s/sample}} per counted plan,
        # and {"step": device set, "during_plan": n, "s_per_sample": measured, "record": after}
        # per recorded step.
        self.history: collections.deque[dict] = collections.deque(maxlen=self.HISTORY)

    # -- model updates

    def calibrate(self, device: int, points: Sequence[tuple[int, float]], transfer_s: float = 0.0) -> None:
        """Fits a_i and b_i to (shard size, seconds) measurements of device `device` alone,
        through the fastest pass of each size: a stall or a cold cache only ever adds time, and
        one slow pass in a fit of all of them read as a fixed cost (on the H200 a CPU-plugin
        device was fitted 20 ms per step, about 20 times its real one, and the model then never
        gave it rows)."""
        fastest: dict[float, float] = {}
        for n, t in points:
            fastest[float(n)] = min(float(t), fastest.get(float(n), math.inf))
        ns = list(fastest)
        ts = [fastest[n] for n in ns]
        a, b = fit_line(list(fastest.items()))
        if b <= 0:  # the time did not grow with the shard: it is (nearly) all fixed cost
            mean_n, mean_t = sum(ns) / len(ns), sum(ts) / len(ts)
            b = 0.01 * mean_t / max(mean_n, 1.0)
            a = mean_t - b * mean_n
        else:
            a = max(a, 0.0)
        self.overhead[device] = a
        self.per_sample[device] = max(b, 1e-12)
        self.ratios.clear()  # measured against the old fit
        self.transfer[device] = max(float(transfer_s), 0.0)
        self.slowdown[device] = 1.0
        largest = max(ns)
        alone = [float(t) for n, t in points if float(n) == largest]
        key = self._key([device])
        if key not in self.measured:  # the device alone, as calibrated, until real steps say more
            self.measured[key] = (sorted(alone)[len(alone) // 2] + self.transfer[device]) / largest
        self.calibrated = True

    def observe(self, shard_sizes: Sequence[int], seconds: Sequence[float | None]) -> None:
        """Folds the measured compute time of one step on each device into its slowdown s_i,
        and keeps the step's ratios measured / predicted for the tail (see the class)."""
        ratios: list[float | None] = [None] * self.num_devices
        for i, (n, t) in enumerate(zip(shard_sizes, seconds)):
            if n <= 0 or t is None:
                continue
            ratio = t / max(self.overhead[i] + self.per_sample[i] * n, 1e-12)
            self.slowdown[i] = (1.0 - self.ema) * self.slowdown[i] + self.ema * ratio
            ratios[i] = ratio
        if self.tail_window > 0 and sum(r is not None for r in ratios) > 1:
            self.ratios.append(tuple(ratios))
        self.observations += 1

    def record_step(self, shard_sizes: Sequence[int], seconds: float, second_look: bool = False) -> None:
        """Folds the wall time of one whole step (weight pulls, forward/backward on every
        device, gradient reduction, optimizer step, loss read-back) into its device set's
        record. Before a device has run alone for real, its record is its calibrated
        forward/backward time plus transfers (no optimizer step); the first real step of that
        mode replaces it when faster, and is averaged in when slower. A `second_look` step
        (see wants_second_look) replaces the set's record, charged with 1/SWITCH_PAYBACK of
        what the step it looks again at took beyond it: moving to a split costs that cold step
        again at each move, so a split no faster than the incumbent (what it gains in
        SWITCH_PAYBACK steps below that cost) stays out. Replayed with synthetic step times
        (equal speeds, 16 seeds), second looks without the charge cost 2.7% of the run's time
        against 1.4% with none, and 1.6% with it."""
        batch = sum(shard_sizes)
        if batch <= 0:
            return
        key = self._key(device_set(shard_sizes))
        now = seconds / batch
        self.recorded_steps[key] = self.recorded_steps.get(key, 0) + 1
        self.record_shapes[f"{key}|{batch}"] = [int(n) for n in shard_sizes]
        if not second_look:
            self._first_looks.pop(key, None)  # a second look granted and not run (see SplitSchedule)
        else:
            self.second_looks.add(key)
            first = self._first_looks.pop(key, now)
            record = now + max(first - now, 0.0) / self.SWITCH_PAYBACK
            won = record <= min(self._other_records(key), default=math.inf)
            if won:
                self.losses[key] = 0
            self.measured[key] = record
            if key == self.incumbent:  # it took the place with its cold first step's record
                self._incumbent_record = record
            self.last_seen[key] = self.plans
            self.history.append({"step": key, "during_plan": self.plans, "s_per_sample": now, "record": record,
                                 "second_look": True, "won": won})
            return
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
        if key == self.incumbent and self._incumbent_record is None:
            # The record a split that took the place unmeasured took it with: its first. (Set
            # here, not at the next plan: on the H200 a split's third step, 2.4 ms slow, lost
            # the place before any plan came, and without that record no recheck was due; the
            # GPU alone ran the next 36 steps.)
            self._incumbent_record = self.measured[key]
        self.history.append({"step": key, "during_plan": self.plans, "s_per_sample": now,
                             "record": self.measured[key]})

    def wants_second_look(self, shard_sizes: Sequence[int], seconds: float, switched_in: bool = False) -> bool:
        """Whether the step just recorded for this split (`seconds` of wall time) should run
        again at once, its time replacing this one's (record_step(second_look=True)): the split
        has two devices or more, the step lost to another candidate of the last plan by less
        than probe_limit, and it was either the split's first real step (once per set) or its
        first after steps of another set (`switched_in`: a probe, a recheck).

        Both kinds of step run cold. On the H200 a CPU + GPU split's first measured step took
        18.1 ms (the CPU device's shard 15.7 ms) against 10.9-11.1 for its later steps, lost to
        the GPU alone (11.3 ms), and the split, 3% faster, did not run again in the 36 steps
        left. Its first step after steps of the GPU alone took 11.6-13.4 ms, so that once two
        slow steps of the CPU device had moved the run to the GPU alone, every recheck and
        probe of the split lost, and it ran on 16 of 96 steps. A second step tells the split's
        speed from the cost of moving to it; the probe clock bounds how often that is paid."""
        key = self._key(device_set(shard_sizes))
        others = self._other_records(key)
        batch = sum(shard_sizes)
        if len(device_set(shard_sizes)) < 2 or not others or batch <= 0:
            return False
        first = self.recorded_steps.get(key) == 1 and key not in self.second_looks
        if not (first or switched_in):
            return False
        now, best = seconds / batch, min(others)
        if not best < now <= self.probe_limit * best:
            return False
        self._first_looks[key] = now
        return True

    def beaten(self, shard_sizes: Sequence[int]) -> bool:
        """Whether the device set of this split now has a worse record (time per sample) than
        another candidate of the last plan: the plan that chose it is out of date."""
        key = self._key(device_set(shard_sizes))
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
        return _fold_small_shards(self._shift_for_tail(sizes, q), self.min_rows)

    def tail_steps(self, devices: Sequence[int]) -> list[tuple[float | None, ...]]:
        """The kept steps that timed every device of `devices`."""
        return [r for r in self.ratios if all(r[i] is not None for i in devices)]

    def expected_seconds(self, shard_sizes: Sequence[int], steps: Sequence[Sequence[float | None]]) -> float:
        """The mean over `steps` (ratios measured / predicted per device) of the split's
        slowest device: its expected step time if those steps are what the devices do."""
        active = device_set(shard_sizes)
        return sum(max(r[i] * (self.overhead[i] + self.per_sample[i] * shard_sizes[i]) + self.transfer[i]
                       for i in active) for r in steps) / len(steps)

    def _shift_for_tail(self, sizes: list[int], q: int) -> list[int]:
        """`sizes` with rows moved between its devices while that lowers the expected step
        time over the measured steps (see the class). Moves are multiples of q, coarse first
        (q·2^k rows, halving down to q), so a fine granularity costs a few more rounds rather
        than one round per row; every device keeps at least one piece (q rows, and min_rows),
        as dropping a device is the choice between candidate sets."""
        active = device_set(sizes)
        steps = self.tail_steps(active) if self.tail_window > 0 and len(active) > 1 else []
        if len(steps) < self.TAIL_MIN:
            return sizes
        keep = max(q, self.min_rows)
        best = self.expected_seconds(sizes, steps)
        move = q
        while move * 2 <= sum(sizes) // 8:
            move *= 2
        while move >= q:
            improved = True
            while improved:
                improved = False
                for i in active:
                    if sizes[i] - move < keep:
                        continue
                    for j in active:
                        if i == j:
                            continue
                        trial = list(sizes)
                        trial[i] -= move
                        trial[j] += move
                        cost = self.expected_seconds(trial, steps)
                        if cost < best * (1.0 - 1e-9):
                            best, sizes, improved = cost, trial, True
                            break
                    if improved:
                        break
            move //= 2
        return sizes

    def _with_every_device(self, sizes: list[int], granularity: int) -> list[int] | None:
        """`sizes` with one granularity piece (and min_rows) for each device it leaves out,
        taken from the largest shard; None when it has every device, or a shard would keep
        less than a piece."""
        missing = [i for i, n in enumerate(sizes) if n <= 0]
        if not missing:
            return None
        batch = sum(sizes)
        piece = max(1, min(int(granularity), batch), self.min_rows)
        trial = list(sizes)
        for i in missing:
            largest = max(range(self.num_devices), key=lambda k: trial[k])
            if trial[largest] - piece < piece:  # every shard keeps a piece, and so min_rows
                return None
            trial[largest] -= piece
            trial[i] = piece
        return trial

    def fastest_alone(self) -> int | None:
        """The device with the lowest measured time per sample alone (None before calibration)."""
        alone = [(self.measured[self._key([i])], i) for i in range(self.num_devices)
                 if self._key([i]) in self.measured]
        return min(alone)[1] if alone else None

    def plan(self, batch_size: int, granularity: int = 1, count: bool = True) -> list[int]:
        """The split to run next (see _choose); a counted plan is logged in `history`."""
        sizes = self._choose(batch_size, granularity, count)
        if count:
            self.history.append({"plan": self.plans, "chose": self._key(device_set(sizes)),
                                 "probing": self.probing, "recheck": self.rechecking,
                                 "records": {k: self.measured[k] for k in self._candidates if k in self.measured}})
        return sizes

    def _choose(self, batch_size: int, granularity: int = 1, count: bool = True) -> list[int]:
        """The split to run next. Candidates: the model's split, each device alone, and every
        device together when the model's split leaves one out (the smallest such split,
        _with_every_device: the model is fitted to calibrated passes, and a real step is what
        says whether a device adds throughput).
        Normally the candidate whose device set measured the lowest time per sample (the
        model's split is tried as soon as its set has no record); every `probe_every`-th plan
        instead runs, for one step, the candidate whose record is oldest, so that every
        record follows the machine as it changes. A plan with `count=False` (a re-plan
        between re-balances) neither advances the probe clock nor probes."""
        if count:
            self.plans += 1
        self.probing = self.rechecking = self.reshaping = False
        model = self.split(batch_size, granularity)
        candidates = {self._key(device_set(model)): model}
        for i in range(self.num_devices):
            alone = [0] * self.num_devices
            alone[i] = batch_size
            candidates.setdefault(self._key([i]), alone)
        everyone = self._with_every_device(model, granularity)
        if everyone is not None:
            candidates.setdefault(self._key(range(self.num_devices)), everyone)
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
            # The model's split in a shape other than the one its set's record measured, when
            # the model expects the new shape to be faster: the record says how the old shape
            # ran (on the H200 a calibration that read the CPU device 20% fast gave it 8192
            # rows, which took 12-13 ms beside the GPU's 9.6, and the corrected model's 4096
            # rows waited for the probe clock behind that record). Once per device set.
            model_key = next(iter(candidates))
            shape = self.record_shapes.get(f"{model_key}|{batch_size}")
            reshaped = (best_ran and shape is not None and sum(shape) == batch_size and shape != model
                        and model_key in self.measured and self.measured[model_key] != best_seen
                        and not far(model_key) and model_key not in self.reshape_probes
                        and self.predicted_seconds(model) < self.predicted_seconds(shape))
            due = [k for k in candidates
                   if (k in self.recheck or k in calibrated_only or (reshaped and k == model_key))
                   and self.measured.get(k) != best_seen]
            self.recheck.clear()
            if due:
                key = min(due, key=self.measured.__getitem__)
                self.probing = self.rechecking = True
                self.last_probe[key] = self.plans
                if reshaped and key == model_key:
                    self.reshaping = True
                    self.reshape_probes.add(model_key)
                return candidates[key]
            # A candidate that never ran and has no record (every device together, when the
            # model leaves one out) is tried once, at the first counted plan after the best has
            # run with no recheck due; after that the probe clock paces it, and a loss counts
            # towards its backoff.
            untried = [k for k in candidates
                       if best_ran and k not in self.measured and k not in self.last_probe and k != next(iter(candidates))]
            if untried:
                key = untried[0]
                self.probing = True
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
                "probe_limit": self.probe_limit, "tail_window": self.tail_window,
                "ratios": [list(r) for r in self.ratios],
                "last_seen": dict(self.last_seen), "losses": dict(self.losses),
                "last_probe": dict(self.last_probe),
                "incumbent": self.incumbent, "incumbent_record": self._incumbent_record,
                "recheck": sorted(self.recheck),
                "recorded_steps": dict(self.recorded_steps), "second_looks": sorted(self.second_looks),
                "record_shapes": {k: list(v) for k, v in self.record_shapes.items()},
                "reshape_probes": sorted(self.reshape_probes),
                "calibrated": self.calibrated, "observations": self.observations, "plans": self.plans}

    def load_state_dict(self, state: dict) -> None:
        if len(state["per_sample"]) != self.num_devices:
            raise ValueError(f"balancer state is for {len(state['per_sample'])} devices, "
                             f"this one has {self.num_devices}")
        self.ema = float(state["ema"])
        self.probe_every = int(state["probe_every"])
        self.probe_limit = float(state.get("probe_limit", self.probe_limit))
        # tail_window stays this balancer's (it is the switch HeteroDataParallel(tail_window=0)
        # sets); the steps it keeps are the checkpoint's latest.
        self.ratios = collections.deque(
            (tuple(None if v is None else float(v) for v in r) for r in state.get("ratios", [])),
            maxlen=max(self.tail_window, 1))
        self.probing = self.rechecking = False
        self.incumbent = state.get("incumbent")
        record = state.get("incumbent_record")
        self._incumbent_record = None if record is None else float(record)
        self.recheck = {str(k) for k in state.get("recheck", [])}
        # A checkpoint from before recorded_steps: a set that ran counts as past its first step.
        self.recorded_steps = {str(k): int(v) for k, v in
                               state.get("recorded_steps", dict.fromkeys(state["last_seen"], 2)).items()}
        self.second_looks = {str(k) for k in state.get("second_looks", [])}
        self.record_shapes = {str(k): [int(n) for n in v] for k, v in state.get("record_shapes", {}).items()}
        self.reshape_probes = {str(k) for k in state.get("reshape_probes", [])}
        self.reshaping = False
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


class SplitSchedule:
    """Which split each step runs: the balancer's plan, re-made every `rebalance_every` steps
    (and after a probe, or when the split that ran measured beaten), and what each step's
    measurement counts for. Two kinds of step are run but not measured:

    - a warm-up: a shard size new to a device (cuDNN plans, allocator blocks). The same split
      runs again on the next step and that one is measured; a probe reuses its device set's
      last warm split instead of warming up a new one (but a probe of the model's split in a
      new shape, which runs that shape).
    - a return: the step after a probe that runs another device set than the probe did (the
      set the probe interrupted, as a rule; a probe that follows a probe is measured), and
      the first step after a pause (the caller spent longer between two steps than the step
      before took, and PAUSE times longer than the median of its last IDLE_WINDOW times
      between steps: an evaluation, a checkpoint, the example's timing windows between
      epochs; a loop whose batches take longer to load than a step is paused only until
      its waits fill half the window). Such a step pays a switch-in
      cost: on the H200 (wide MLP, batch 65536) a CPU + GPU split's first step after steps of
      the GPU alone took 0.17-0.31 µs/sample, median 0.19, where its steady steps took
      0.161-0.169 (the host device's threads and caches had gone cold). Recorded, the step
      that returned to the split after a one-step probe of the GPU alone raised the split's
      record above the GPU's and exiled a split 3% faster for the rest of the run. A probe's
      own step is measured as it is: its switch-in cost is what moving to that set costs, and
      it keeps a challenger no faster than the incumbent from taking its place back and
      forth (a replay with synthetic step times lost throughput when probes were judged on
      a second step instead).

    One step is measured and then replaced: a split's first recorded step, or its first after
    steps of another set, when it lost to another candidate by less than probe_limit, runs
    again at once and the second step's time becomes the split's record, charged a share of
    the first's excess (ThroughputBalancer.wants_second_look). A probe's step after a pause is
    not recorded either: the probe runs again on the next step; nor is a second look that came
    right after steps of another set (HeteroDataParallel ran the master alone while a device
    was busy: sat_out), which would be cold itself: it runs again on the next step.

    Shard sizes are multiples of the granularity (`granularity`, or batch/16 rounded down to a
    power of two), so that a drifting split reuses a few shapes."""

    PAUSE = 4.0  # a pause: longer between steps than the step before, and PAUSE x the usual time between steps
    IDLE_WINDOW = 16  # the usual time between steps: the median of the last IDLE_WINDOW (pauses included)

    def __init__(self, balancer: ThroughputBalancer, rebalance_every: int = 10, granularity: int | None = None):
        self.balancer = balancer
        self.rebalance_every = int(rebalance_every)
        self.granularity = granularity
        self.planned: dict[int, list[int]] = {}  # batch size -> the split its steps run
        self.warm: set[tuple[int, int]] = set()  # (device index, shard size) that ran before
        # (batch, sizes, second look) to run again, measured; a second look's step replaces the
        # split's first record (ThroughputBalancer.wants_second_look).
        self._rerun: dict[int, tuple[list[int], bool]] = {}
        self._second_look: list[int] | None = None  # the sizes of the second look sizes() handed out
        self._warm_split: dict[tuple, list[int]] = {}  # (batch, device set) -> its last split that ran
        self._refresh_pending = False
        self._replan_for: int | None = None  # a batch size whose split measured beaten: plan it again
        self._last_batch: int | None = None
        self._last_set: tuple[int, ...] | None = None  # the device set of the last step,
        self._last_probed = False  # whether the balancer had planned it as a probe,
        self._last_seconds: float | None = None  # and its wall time
        self._idles: collections.deque[float] = collections.deque(maxlen=self.IDLE_WINDOW)  # caller's waits

    def granularity_for(self, batch_size: int) -> int:
        if self.granularity is not None:
            return max(int(self.granularity), 1)
        return 1 << max((batch_size // 16).bit_length() - 1, 0)

    def cold_shards(self, sizes: Sequence[int]) -> list[tuple[int, int]]:
        """(device, shard size) pairs of a split that no step has run yet."""
        return [(i, sizes[i]) for i in device_set(sizes) if (i, sizes[i]) not in self.warm]

    def forget(self) -> None:
        """Drops the splits planned so far (after calibration or a resume), and what the
        last step was: the next one is neither a return nor after a pause."""
        self.planned.clear()
        self._rerun.clear()
        self._second_look = None
        self._replan_for = None
        self._last_set, self._last_probed, self._last_seconds = None, False, None

    def sizes(self, batch_size: int, step: int) -> list[int]:
        """The split of step number `step` (counted from 0) for a batch of `batch_size` rows."""
        due = self.rebalance_every > 0 and step % self.rebalance_every == 0
        self._second_look = None
        if batch_size in self._rerun:
            sizes, second_look = self._rerun.pop(batch_size)
            if second_look:
                self._second_look = list(sizes)
            self._refresh_pending |= due  # a re-balance due now happens on the next step
            return sizes
        refresh = due or self.balancer.probing or self._refresh_pending
        self._refresh_pending = False
        replan = self._replan_for == batch_size
        if replan:
            self._replan_for = None
        if batch_size not in self.planned or refresh or replan:
            # A re-plan alone does not advance the probe clock (probes stay paced by re-balances).
            sizes = self.balancer.plan(batch_size, self.granularity_for(batch_size), count=refresh or not replan)
            if self.balancer.probing and not self.balancer.reshaping:
                # A probe asks whether a device set is competitive; a split of that set that
                # already ran answers it without a warm-up step (new cuDNN plans cost more
                # than a few samples' difference in the split). A probe of a new shape runs it.
                warm = self._warm_split.get((batch_size, device_set(sizes)))
                if warm is not None and self.cold_shards(sizes):
                    sizes = list(warm)
            self.planned[batch_size] = sizes
        return self.planned[batch_size]

    def sat_out(self, batch_size: int, step: int, sizes: Sequence[int], step_seconds: float,
                idle_seconds: float | None = None) -> None:
        """Step number `step` ran `sizes` in `step_seconds` without asking sizes()
        (HeteroDataParallel: a device still busy with an abandoned shard sat it out, the master
        ran the batch alone) and is not measured. A re-balance due at it happens on the next
        step; the next step of another device set counts as a switch to it (a second look
        waits past it: after_step), and the steps before this one no longer make the next one
        a return."""
        self._refresh_pending |= self.rebalance_every > 0 and step % self.rebalance_every == 0
        if idle_seconds is not None:
            self._idles.append(idle_seconds)
        self._last_set, self._last_probed, self._last_seconds = device_set(sizes), False, step_seconds
        self._last_batch = batch_size
        self._second_look = None

    def after_step(self, batch_size: int, sizes: Sequence[int], step_seconds: float,
                   device_seconds: Sequence[float | None], idle_seconds: float | None = None) -> None:
        """Counts a step that ran `sizes` in `step_seconds` (wall time of the whole step), each
        device computing its shard in `device_seconds` (None where not measured), after the
        caller spent `idle_seconds` since the step before returned (None: not known)."""
        active = device_set(sizes)
        cold = self.cold_shards(sizes)
        self.warm.update(cold)
        self._warm_split[(batch_size, active)] = list(sizes)
        returned = (self._last_probed and not self.balancer.probing and self._last_set is not None
                    and active != self._last_set)
        paused = False
        if idle_seconds is not None:
            if self._last_seconds is not None and len(self._idles) >= 3:
                usual = sorted(self._idles)[len(self._idles) // 2]
                paused = idle_seconds > max(self._last_seconds, self.PAUSE * usual)
            self._idles.append(idle_seconds)
        switched_in = self._last_set is not None and active != self._last_set
        self._last_set, self._last_probed, self._last_seconds = active, self.balancer.probing, step_seconds
        second_look = self._second_look == list(sizes)
        self._second_look = None
        if cold:
            self._rerun[batch_size] = (list(sizes), False)  # a warm-up: measure this split on the next step
        elif second_look and switched_in:
            # A second look is what a split's cold step is looked past with; one that comes
            # right after steps of another set (a sat-out step of HeteroDataParallel's) is cold
            # itself: it runs again on the next step instead.
            self._rerun[batch_size] = (list(sizes), True)
        elif paused and not returned and (self.balancer.probing or second_look):
            # A probe's step (or a second look) after a pause measures the pause's cold caches,
            # and is not recorded: it runs again on the next step (on the H200 a recheck of
            # the split fell on an epoch's first step and the split waited for the probe clock
            # until the run ended).
            self._rerun[batch_size] = (list(sizes), second_look)
        elif not (returned or paused):  # (see the class's docstring)
            self.balancer.observe(sizes, device_seconds)
            self.balancer.record_step(sizes, step_seconds, second_look=second_look)
            comparable = batch_size == self._last_batch or self._last_batch is None
            if comparable and not second_look and self.balancer.wants_second_look(sizes, step_seconds, switched_in):
                # A split's first step, or its first after another set, lost: it runs again at
                # once, and that step's time is its record (see wants_second_look).
                self._rerun[batch_size] = (list(sizes), True)
            # A split that just measured slower than another candidate's record is not kept
            # until the next re-balance: the next step of this batch size plans again (when
            # re-balancing is on; not on a batch of another size than the step before, such
            # as an epoch's short last batch, whose time per sample is not comparable).
            elif (self.rebalance_every > 0 and not self.balancer.probing and batch_size == self._last_batch
                    and self.balancer.beaten(sizes)):
                self._replan_for = batch_size
        self._last_batch = batch_size
