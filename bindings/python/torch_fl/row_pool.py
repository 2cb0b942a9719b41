"""The rows of one HeteroDataParallel step that its devices claim while they compute
(`HeteroDataParallel(chunk_rows=...)`), instead of a split fixed before the step starts.

The master (the fastest device, where gradients are summed) takes a first shard from the front
of the batch and then chunks from the front as its queue drains. Every other device claims
chunks from the back, but only a chunk that it expects to finish before the master would
finish every row still unclaimed. So a device that slows down in the middle of a step (a host
device sharing its cores with the driver's threads, a busy machine) claims fewer rows and the
master computes the rest, instead of the whole step waiting for a shard fixed in advance: on the
H200 a CPU-plugin device beside the GPU took 2-2.5x its median time on some steps, and with a
fixed split those steps decided whether the pair beat the GPU alone.

Expected finish times come from per-device seconds per row (`rates`), which the devices'
threads update from what they measure as they go. Nothing here touches a device; the pool can
be driven with synthetic times (tests/python/test_row_pool.py). Every method is thread-safe."""
from __future__ import annotations

import threading
from typing import Sequence

__all__ = ["RowPool", "plan_first_shard"]


def plan_first_shard(batch: int, master: int, rates: Sequence[float], chunk_rows: int,
                     headroom: float = 1.5) -> int:
    """Rows of the master's first shard: the batch less what the others are expected to compute
    while the master computes the rest (equal finish at `rates`, seconds per row), times
    `headroom`, so that a device faster than expected finds rows left to claim. The pool left
    is a whole number of chunks (the last may be short when the batch is), at least one."""
    speeds = [1.0 / max(r, 1e-15) for r in rates]
    others = batch * (1.0 - speeds[master] / sum(speeds))
    chunks = max(1, -int(-(others * headroom) // chunk_rows))  # ceil
    return max(0, batch - chunks * chunk_rows)


class RowPool:
    """Rows [front, back) of a batch not yet claimed by any device.

    Args:
        batch: rows in the batch.
        master: index of the device that takes rows from the front and finishes what no other
            device will take.
        rates: seconds per row of each device (what its last chunks or steps measured).
        now: the time the step starts (time.perf_counter()), from which devices are busy.
    """

    def __init__(self, batch: int, master: int, rates: Sequence[float], now: float):
        self._lock = threading.Lock()
        self.front, self.back = 0, int(batch)
        self.master = master
        self.rates = [float(r) for r in rates]
        self.busy_until = [float(now)] * len(self.rates)  # when each device should finish what it holds
        self.rows = [0] * len(self.rates)  # rows each device claimed this step

    def left(self) -> int:
        with self._lock:
            return self.back - self.front

    def claim_front(self, device: int, rows: int, now: float) -> tuple[int, int] | None:
        """Up to `rows` rows from the front for `device` (the master), whatever any device's
        expected finish; None when none is left."""
        with self._lock:
            n = min(int(rows), self.back - self.front)
            if n <= 0:
                return None
            start = self.front
            self.front += n
            self._hold(device, n, now)
            return start, start + n

    def claim_back(self, device: int, rows: int, now: float) -> tuple[int, int] | None:
        """Up to `rows` rows from the back for `device`, if it expects to finish them before
        the master would finish everything else left (what it holds, then the rest of the pool);
        None when it would not, or none is left. A device refused once may be refused for the
        rest of the step: the master only comes closer to done."""
        with self._lock:
            left = self.back - self.front
            n = min(int(rows), left)
            if n <= 0:
                return None
            finish = max(now, self.busy_until[device]) + n * self.rates[device]
            master_done = max(now, self.busy_until[self.master]) + (left - n) * self.rates[self.master]
            if finish > master_done:
                return None
            self.back -= n
            self._hold(device, n, now)
            return self.back, self.back + n

    def close(self) -> None:
        """Leaves no row to claim (a device's thread failed: the others stop claiming)."""
        with self._lock:
            self.front = self.back

    def measured(self, device: int, rows: int, seconds: float, now: float, still_held: int,
                 weight: float = 0.5) -> None:
        """`device` finished `rows` rows in `seconds` at `now`, and still holds `still_held`
        rows claimed but not finished: its rate moves toward what it measured (by `weight`),
        and its expected finish is now plus those rows at that rate."""
        if rows <= 0 or seconds <= 0:
            return
        with self._lock:
            self.rates[device] = (1.0 - weight) * self.rates[device] + weight * seconds / rows
            self.busy_until[device] = now + still_held * self.rates[device]

    def _hold(self, device: int, rows: int, now: float) -> None:
        self.busy_until[device] = max(now, self.busy_until[device]) + rows * self.rates[device]
        self.rows[device] += rows
