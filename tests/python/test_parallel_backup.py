"""HeteroDataParallel's backup of a late shard (backup_late_shards): when a replica's shard runs
far longer than its usual time, the master computes that shard in its place, the step still
equals the big batch's, the replica sits the next steps out until its shard ends, and then it
computes again from the master's weights."""
from __future__ import annotations

import time
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl  # noqa: F401  (the fl devices)

from torch_fl.balancer import SplitSchedule, ThroughputBalancer
from torch_fl.parallel import HeteroDataParallel

# What the next forward on `device` does before computing: sleep `seconds` (a stalled device),
# then raise when `error` is set. Module-level, as each replica is a deep copy of the model.
STALL: dict = {"device": None, "seconds": 0.0, "error": False}


class StallingMLP(nn.Module):
    def __init__(self, dtype: torch.dtype):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 4)).to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if STALL["device"] == x.device:
            STALL["device"] = None
            time.sleep(STALL["seconds"])
            if STALL["error"]:
                raise RuntimeError("the stalled shard failed")
        return self.net(x)


def _data(steps: int, batch: int):
    g = torch.Generator().manual_seed(1)
    return ([torch.randn(batch, 12, generator=g, dtype=torch.float64) for _ in range(steps)],
            [torch.randint(0, 4, (batch,), generator=g) for _ in range(steps)])


def _optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _big_batch_run(xs, ys) -> list[torch.Tensor]:
    model = StallingMLP(torch.float64).to("fl:0")
    opt = _optimizer(model.parameters())
    for x, y in zip(xs, ys):
        opt.zero_grad()
        F.cross_entropy(model(x.to("fl:0")), y.to("fl:0")).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def _hdp(**kwargs) -> HeteroDataParallel:
    hdp = HeteroDataParallel(StallingMLP(torch.float64), ["fl:0", "fl:1"], _optimizer, split=[1, 1],
                             debug=True, **kwargs)
    # Only the stall below is late on a loaded machine: a shard is late 0.2 s past its usual time.
    hdp.LATE_MARGIN = 0.2
    assert hdp.reduce_device == torch.device("fl:0") and hdp._master_times_with_events
    return hdp


@pytest.fixture(autouse=True)
def _no_stall_left():
    yield
    STALL.update(device=None, seconds=0.0, error=False)


def test_a_late_shard_is_computed_by_the_master_and_the_step_equals_the_big_batch():
    xs, ys = _data(steps=9, batch=40)
    expected = _big_batch_run(xs, ys)
    hdp = _hdp()
    try:
        shards, seconds = [], []
        for k, (x, y) in enumerate(zip(xs, ys)):
            if k == 5:  # fl:1's shard of this step stalls for 1.5 s
                STALL.update(device=torch.device("fl:1"), seconds=1.5)
            if k == 7:  # the stalled shard has ended: fl:1 computes again
                deadline = time.monotonic() + 10
                while hdp._late[1].running() and time.monotonic() < deadline:
                    time.sleep(0.05)
            started = time.perf_counter()
            hdp.train_step(x, y, F.cross_entropy)
            seconds.append(time.perf_counter() - started)
            shards.append(list(hdp.last_shards))
            if k == 5:
                assert hdp.last_device_seconds[1] is None  # not measured: the master computed it
        assert hdp.backups == 1
        assert seconds[5] < 1.0, seconds  # the step did not wait for the stall
        # Step 6 came while fl:1 still slept: the master took its rows; from step 7 on it computes.
        assert shards == [[20, 20]] * 6 + [[40, 0]] + [[20, 20]] * 2, shards
        # debug=True asserted before steps 7 and 8 that fl:1 held the master's bits (it pulled
        # them again after its abandoned shard ended).
        for got, want in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_without_backups_a_step_waits_for_its_late_shard():
    xs, ys = _data(steps=5, batch=40)
    hdp = _hdp(backup_late_shards=False)
    try:
        for k, (x, y) in enumerate(zip(xs, ys)):
            if k == 4:
                STALL.update(device=torch.device("fl:1"), seconds=0.5)
            started = time.perf_counter()
            hdp.train_step(x, y, F.cross_entropy)
        assert time.perf_counter() - started >= 0.5
        assert hdp.backups == 0 and hdp.last_shards == [20, 20] and hdp.last_device_seconds[1] >= 0.5
    finally:
        hdp.close()


def test_before_a_replica_has_usual_times_the_calibrated_model_tells_a_late_shard():
    """The first split step stalls: the replica has no times yet at that shard size, and the
    calibrated model's time for its shard (about 1 ms) stands in for them."""
    xs, ys = _data(steps=3, batch=40)
    expected = _big_batch_run(xs, ys)
    hdp = _hdp()
    hdp.LATE_MARGIN = 0.3
    hdp.balancer.calibrated = True
    hdp.balancer.overhead, hdp.balancer.per_sample = [1e-3, 1e-3], [1e-6, 1e-6]
    try:
        STALL.update(device=torch.device("fl:1"), seconds=1.5)
        started = time.perf_counter()
        hdp.train_step(xs[0], ys[0], F.cross_entropy)
        assert time.perf_counter() - started < 1.0 and hdp.backups == 1 and hdp.last_shards == [20, 20]
        hdp._late[1].result(timeout=10)
        for x, y in zip(xs[1:], ys[1:]):
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.last_shards == [20, 20] and hdp.backups == 1
        for got, want in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_a_master_no_faster_than_the_late_replica_waits_for_it():
    """By the calibrated model the master would take as long as the replica for its shard (two
    devices of one host): no backup, the step waits."""
    xs, ys = _data(steps=5, batch=40)
    hdp = _hdp()
    hdp.balancer.calibrated = True
    hdp.balancer.per_sample = [1e-3, 1e-3]  # 20 ms for a shard on either device
    try:
        for k, (x, y) in enumerate(zip(xs, ys)):
            if k == 4:
                STALL.update(device=torch.device("fl:1"), seconds=0.5)
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.backups == 0 and hdp.last_shards == [20, 20] and hdp.last_device_seconds[1] >= 0.5
    finally:
        hdp.close()


def test_an_abandoned_shard_that_fails_afterwards_is_reported_and_training_goes_on():
    xs, ys = _data(steps=7, batch=40)
    expected = _big_batch_run(xs, ys)
    hdp = _hdp()
    try:
        for k, (x, y) in enumerate(zip(xs, ys)):
            if k == 4:
                STALL.update(device=torch.device("fl:1"), seconds=0.6, error=True)
            if k == 5:
                hdp._late[1].exception(timeout=10)  # wait until it has failed
                with pytest.warns(UserWarning, match=r"abandoned shard on fl:1 .* raised afterwards: "
                                                     r"RuntimeError\('the stalled shard failed'\)"):
                    hdp.train_step(x, y, F.cross_entropy)
                continue
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.backups == 1 and not hdp._late and hdp.last_shards == [20, 20]
        for got, want in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_a_step_that_a_busy_device_sits_out_is_not_measured():
    """With a measured split, the step whose rows the master took from a busy device is not
    recorded, and the split the schedule handed out stays due (SplitSchedule.not_run)."""
    xs, ys = _data(steps=8, batch=40)
    hdp = _hdp()
    hdp.fixed_split = None  # a measured run, whose schedule always hands out [20, 20]
    hdp.balancer.calibrated = True
    hdp.balancer.per_sample = [1e-6, 1e-6]  # the master computes a shard in 20 µs by the model
    handed, recorded, not_run = [], [], []
    hdp.schedule.sizes = lambda batch, step: handed.append(step) or [20, 20]
    hdp.schedule.after_step = lambda batch, sizes, *rest: recorded.append(list(sizes))
    hdp.schedule.not_run = lambda: not_run.append(len(handed))
    try:
        for k, (x, y) in enumerate(zip(xs, ys)):
            if k == 5:
                STALL.update(device=torch.device("fl:1"), seconds=1.0)
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.backups == 1
        assert recorded == [[20, 20]] * 6 + [[20, 20]] * (8 - 6 - len(not_run))
        assert not_run and not_run[0] == 7  # step 6 (the 7th handed out) ran without fl:1
    finally:
        hdp.close()


def test_the_schedule_keeps_a_rerun_that_did_not_run():
    schedule = SplitSchedule(ThroughputBalancer(2), rebalance_every=10)
    schedule._rerun[64] = ([32, 32], True)  # a second look is due
    assert schedule.sizes(64, 3) == [32, 32] and schedule._second_look == [32, 32]
    schedule.not_run()
    assert schedule._rerun[64] == ([32, 32], True) and schedule._second_look is None
    assert schedule.sizes(64, 4) == [32, 32] and schedule._second_look == [32, 32]
