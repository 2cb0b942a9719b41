"""HeteroDataParallel's backup of a late shard (backup_late_shards): when a replica's shard runs
far longer than its usual time, the master computes that shard in its place, the step still
equals the big batch's, the replica sits the next steps out until its shard ends, and then it
computes again from the master's weights."""
from __future__ import annotations

import collections
import copy
import statistics
import time
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import spectral_norm

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


class StallingBatchNormMLP(StallingMLP):
    """StallingMLP with a BatchNorm1d after its first layer: buffers the forward updates."""

    def __init__(self, dtype: torch.dtype):
        super().__init__(dtype)
        self.net = nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 4)).to(dtype)


class StallingSpectralNormMLP(StallingMLP):
    """StallingMLP whose first layer is spectral-normalised: its forward reads the power
    iteration's vectors (buffers) and updates them."""

    def __init__(self, dtype: torch.dtype):
        super().__init__(dtype)
        torch.manual_seed(0)
        self.net = nn.Sequential(spectral_norm(nn.Linear(12, 16)), nn.Tanh(), nn.Linear(16, 4)).to(dtype)


def _data(steps: int, batch: int):
    g = torch.Generator().manual_seed(1)
    return ([torch.randn(batch, 12, generator=g, dtype=torch.float64) for _ in range(steps)],
            [torch.randint(0, 4, (batch,), generator=g) for _ in range(steps)])


def _optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _big_batch_run(xs, ys, model_type: type[nn.Module] = StallingMLP) -> list[torch.Tensor]:
    model = model_type(torch.float64).to("fl:0")
    opt = _optimizer(model.parameters())
    for x, y in zip(xs, ys):
        opt.zero_grad()
        F.cross_entropy(model(x.to("fl:0")), y.to("fl:0")).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def _hdp(model: type[nn.Module] = StallingMLP, **kwargs) -> HeteroDataParallel:
    hdp = HeteroDataParallel(model(torch.float64), ["fl:0", "fl:1"], _optimizer, split=[1, 1],
                             **{"debug": True, **kwargs})
    # Only the stall below is late on a loaded machine: a shard is late 0.2 s past its usual time.
    hdp.LATE_MARGIN = 0.2
    # The model says the master computes a replica's shard in 20 µs: worth a backup (with its
    # own measured time, as fast as the replica's, it would not be; see the test below).
    hdp.balancer.calibrated = True
    hdp.balancer.per_sample = [1e-6, 1e-6]
    assert hdp.reduce_device == torch.device("fl:0") and hdp._master_times_with_events
    return hdp


def _train_stalling_the_last_step(hdp: HeteroDataParallel, xs, ys, seconds: float = 0.5, loss_fn=F.cross_entropy,
                                  batch_of=lambda k, x: x) -> float:
    """Trains on every batch (`batch_of(k, x)` of step k), fl:1's shard of the last step stalling
    for `seconds`; returns the last step's time."""
    for k, (x, y) in enumerate(zip(xs, ys)):
        if k == len(xs) - 1:
            STALL.update(device=torch.device("fl:1"), seconds=seconds)
        started = time.perf_counter()
        hdp.train_step(batch_of(k, x), y, loss_fn)
    return time.perf_counter() - started


def _assert_equals_the_big_batch(hdp: HeteroDataParallel, expected: list[torch.Tensor]) -> None:
    for got, want in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def _regularised_by(weight: torch.Tensor):
    """cross_entropy plus a regulariser over `weight` (the master's: beyond every replica)."""
    def regularised(out, y):
        return F.cross_entropy(out, y) + 1e-3 * weight.to(out.device).square().sum()
    return regularised


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
                while hdp._late[1][0].running() and time.monotonic() < deadline:
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
        _assert_equals_the_big_batch(hdp, expected)
    finally:
        hdp.close()


def test_a_backup_leaves_the_masters_batchnorm_statistics_as_its_own_shard_made_them():
    """The master's forward on the late shard would update its running statistics a second
    time (and count a second batch); they stay what its own shard made of them, as in a step
    without a backup."""
    xs, ys = _data(steps=5, batch=40)
    hdp = _hdp(StallingBatchNormMLP)
    try:
        for x, y in zip(xs[:-1], ys[:-1]):
            hdp.train_step(x, y, F.cross_entropy)
        own_shard_only = copy.deepcopy(hdp.module).train()
        with torch.no_grad():
            own_shard_only(xs[-1][:20].to("fl:0"))
        _train_stalling_the_last_step(hdp, xs[-1:], ys[-1:], seconds=1.0)
        assert hdp.backups == 1 and hdp.last_shards == [20, 20]
        got, want = dict(hdp.module.named_buffers()), dict(own_shard_only.named_buffers())
        assert int(got["net.1.num_batches_tracked"]) == 5
        for name, value in want.items():
            torch.testing.assert_close(got[name].cpu(), value.cpu(), rtol=0, atol=0, msg=name)
    finally:
        hdp.close()


@pytest.mark.parametrize("pulls_in_its_thread", [False, True])
def test_a_backup_reads_the_buffers_the_replica_read(pulls_in_its_thread):
    """spectral_norm's forward reads its power-iteration vectors and updates them: the
    master's backup of the late shard reads them as they were before the step (as the
    replica did), not as the master's own shard left them, so the step still equals the big
    batch's (before: 9.5e-7 off in float64). Whether the replica received the master's state
    after the last step, or pulls it in its own thread (a replica of another plugin: the
    step's side-pull snapshot of the buffers is what the backup reads then)."""
    xs, ys = _data(steps=6, batch=40)
    expected = _big_batch_run(xs, ys, StallingSpectralNormMLP)
    # debug=True would broadcast to the replica before each step, so that it pulls nothing.
    hdp = _hdp(StallingSpectralNormMLP, debug=not pulls_in_its_thread)
    if pulls_in_its_thread:
        hdp._push_after_step = ()
    try:
        _train_stalling_the_last_step(hdp, xs, ys, seconds=1.0)
        assert hdp.backups == 1
        _assert_equals_the_big_batch(hdp, expected)
    finally:
        hdp.close()


def test_without_backups_a_step_waits_for_its_late_shard():
    xs, ys = _data(steps=5, batch=40)
    hdp = _hdp(backup_late_shards=False)
    try:
        assert _train_stalling_the_last_step(hdp, xs, ys) >= 0.5
        assert hdp.backups == 0 and hdp.last_shards == [20, 20] and hdp.last_device_seconds[1] >= 0.5
    finally:
        hdp.close()


def test_before_a_replica_has_usual_times_the_calibrated_model_tells_a_late_shard():
    """The second step at a shard size stalls: the replica has one time at that size, and
    the calibrated model's time for its shard (1 ms) stands in for the three it needs."""
    xs, ys = _data(steps=4, batch=40)
    expected = _big_batch_run(xs, ys)
    hdp = _hdp()
    hdp.LATE_MARGIN = 0.3
    hdp.balancer.overhead = [1e-5, 1e-3]  # the master's shard of 20 rows 30 µs, the replica's 1 ms
    try:
        hdp.train_step(xs[0], ys[0], F.cross_entropy)
        assert hdp.last_shards == [20, 20] and hdp._loss_stays_in and len(hdp._shard_seconds[(1, 20)]) == 1
        STALL.update(device=torch.device("fl:1"), seconds=1.5)
        started = time.perf_counter()
        hdp.train_step(xs[1], ys[1], F.cross_entropy)
        assert time.perf_counter() - started < 1.0 and hdp.backups == 1 and hdp.last_shards == [20, 20]
        hdp._late[1][0].result(timeout=10)
        for x, y in zip(xs[2:], ys[2:]):
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.last_shards == [20, 20] and hdp.backups == 1
        _assert_equals_the_big_batch(hdp, expected)
    finally:
        hdp.close()


def test_a_replicas_first_shard_of_a_size_is_waited_for():
    """A replica's first shard of a size is a warm-up (on the H200 the CPU device's first one
    touched 133k fresh pages and took 28-75 ms against 7): however late by the model, it is
    not backed up, at the run's first step nor at a new size later."""
    xs, ys = _data(steps=2, batch=40)
    x30, y30 = _data(steps=1, batch=30)
    hdp = _hdp()
    hdp.LATE_MARGIN = 0.05
    hdp.balancer.overhead = [1e-5, 1e-3]
    # The loss's reach decided before the run's first step, as calibration decides it in a
    # measured split (else that step has nothing to back up with or without the rule).
    hdp._follow_master()
    hdp._loss_stays_in, hdp._checked_loss_fn = True, F.cross_entropy
    try:
        for x, y, rows in ((xs[0], ys[0], 20), (x30[0], y30[0], 15)):
            STALL.update(device=torch.device("fl:1"), seconds=0.3)
            hdp.train_step(x, y, F.cross_entropy)
            assert hdp.last_shards == [rows, rows] and hdp.last_device_seconds[1] >= 0.3
        assert hdp.backups == 0
        STALL.update(device=torch.device("fl:1"), seconds=0.3)  # the second at 20 rows is backed up
        hdp.train_step(xs[1], ys[1], F.cross_entropy)
        assert hdp.backups == 1
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
        _train_stalling_the_last_step(hdp, xs, ys)
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
                hdp._late[1][0].exception(timeout=10)  # wait until it has failed
                with pytest.warns(UserWarning, match=r"abandoned shard on fl:1 .* raised afterwards: "
                                                     r"RuntimeError\('the stalled shard failed'\)"):
                    hdp.train_step(x, y, F.cross_entropy)
                continue
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.backups == 1 and not hdp._late and hdp.last_shards == [20, 20]
        _assert_equals_the_big_batch(hdp, expected)
    finally:
        hdp.close()


def test_a_step_that_a_busy_device_sits_out_is_not_measured():
    """With a measured split, while a device is busy with an abandoned shard the master runs
    the batch alone, the schedule is not asked for a split and the step is not recorded
    (SplitSchedule.sat_out); then the planned split runs again."""
    xs, ys = _data(steps=9, batch=40)
    expected = _big_batch_run(xs, ys)
    hdp = _hdp()
    hdp.fixed_split = None  # a measured run, whose schedule always hands out [20, 20]
    handed, recorded, sat_out = [], [], []
    hdp.schedule.sizes = lambda batch, step: handed.append(step) or [20, 20]
    hdp.schedule.after_step = lambda batch, sizes, *rest: recorded.append(list(sizes))
    hdp.schedule.sat_out = lambda batch, step, sizes, seconds, idle: sat_out.append((step, list(sizes)))
    try:
        for k, (x, y) in enumerate(zip(xs, ys)):
            if k == 5:
                STALL.update(device=torch.device("fl:1"), seconds=1.0)
            if k == 7:
                hdp._late[1][0].result(timeout=10)
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.backups == 1 and hdp.last_shards == [20, 20]
        assert sat_out == [(6, [40, 0])]  # step 6 came while fl:1 slept
        assert handed == [0, 1, 2, 3, 4, 5, 7, 8] and recorded == [[20, 20]] * 8
        _assert_equals_the_big_batch(hdp, expected)
    finally:
        hdp.close()


def test_a_sat_out_step_keeps_the_schedules_plans_and_counts_as_a_switch():
    """A second look due when a device sat a step out waits past the cold step that follows:
    that step runs it again, unrecorded, and the step after it is the second look."""
    b = ThroughputBalancer(2)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])
    b.calibrate(1, [(16, 0.016), (64, 0.064)])
    schedule = SplitSchedule(b, rebalance_every=2)
    schedule._rerun[64] = ([32, 32], True)  # a second look is due
    schedule._last_set = (0, 1)
    schedule.warm.update({(0, 32), (1, 32), (0, 64)})  # (no warm-up step)
    schedule.sat_out(64, 4, [64, 0], 0.011, 0.001)  # step 4: a re-balance was due
    assert schedule._refresh_pending and schedule._last_set == (0,) and not schedule._last_probed
    assert schedule._last_seconds == 0.011 and list(schedule._idles) == [0.001]
    assert schedule.sizes(64, 5) == [32, 32] and schedule._second_look == [32, 32]
    recorded = b.recorded_steps.get("0,1", 0)
    schedule.after_step(64, [32, 32], 0.020, [0.02, 0.02], 0.001)  # cold: after the master alone
    assert b.recorded_steps.get("0,1", 0) == recorded and schedule._rerun[64] == ([32, 32], True)
    assert schedule.sizes(64, 6) == [32, 32] and schedule._second_look == [32, 32]
    schedule.after_step(64, [32, 32], 0.012, [0.012, 0.012], 0.001)
    assert b.recorded_steps["0,1"] == recorded + 1 and 64 not in schedule._rerun


def test_with_a_fixed_split_the_masters_own_shard_time_decides():
    """Uncalibrated (a fixed split), the master's own shard time stands in for the model: two
    devices of one host are as fast, so a stall is waited for, not backed up. (The replica's
    times are set to the master's before the stall: on a loaded machine its wall times, GIL
    waits included, read more than twice the master's device times in 1 of 12 runs.)"""
    xs, ys = _data(steps=6, batch=40)
    hdp = _hdp()
    hdp.balancer.calibrated = False
    try:
        for x, y in zip(xs[:-1], ys[:-1]):
            hdp.train_step(x, y, F.cross_entropy)
        as_fast = statistics.median(hdp._master_shard_seconds)
        hdp._shard_seconds[(1, 20)] = collections.deque([as_fast] * 5, maxlen=hdp.LATE_HISTORY)
        _train_stalling_the_last_step(hdp, xs[-1:], ys[-1:])
        assert len(hdp._master_shard_seconds) == 6
        assert hdp.backups == 0 and hdp.last_device_seconds[1] >= 0.5
    finally:
        hdp.close()


def test_no_backup_where_the_loss_reaches_beyond_the_replica():
    """A loss that reads the master's parameters (a regulariser over hdp.module), or a batch
    that requires grad: an abandoned backward would still add into those gradients, so the
    stalled shard is waited for, and the step equals the big batch's."""
    xs, ys = _data(steps=6, batch=40)
    hdp = _hdp()
    try:
        _train_stalling_the_last_step(hdp, xs, ys, loss_fn=_regularised_by(hdp.module.net[0].weight))
        assert hdp._loss_stays_in is False and hdp.backups == 0 and hdp.last_device_seconds[1] >= 0.5
    finally:
        hdp.close()
    hdp = _hdp()
    try:
        _train_stalling_the_last_step(hdp, xs, ys, batch_of=lambda k, x: x.clone().requires_grad_(k == 5))
        assert hdp._loss_stays_in is True and hdp.backups == 0 and hdp.last_device_seconds[1] >= 0.5
    finally:
        hdp.close()


def test_the_loss_is_checked_again_for_a_new_loss_or_an_unfrozen_parameter():
    """The check of the loss's reach is made again when train_step gets another loss_fn, and
    when the master's requires_grad flags change (a frozen parameter a regulariser reads)."""
    xs, ys = _data(steps=4, batch=40)
    hdp = _hdp()
    master_weight = hdp.module.net[0].weight
    regularised = _regularised_by(master_weight)
    try:
        hdp.train_step(xs[0], ys[0], F.cross_entropy)
        assert hdp._loss_stays_in is True
        hdp.train_step(xs[1], ys[1], regularised)
        assert hdp._loss_stays_in is False
        hdp.train_step(xs[2], ys[2], F.cross_entropy)
        assert hdp._loss_stays_in is True
        master_weight.requires_grad_(False)
        hdp.train_step(xs[3], ys[3], regularised)
        assert hdp._loss_stays_in is True  # the frozen weight takes no gradient
        master_weight.requires_grad_(True)
        hdp.train_step(xs[3], ys[3], regularised)
        assert hdp._loss_stays_in is False
    finally:
        hdp.close()


def test_a_reentrant_checkpoint_counts_as_reaching_beyond_the_replica():
    from torch.utils.checkpoint import checkpoint
    from torch_fl.parallel import _graph_stays_in
    replica, other = nn.Linear(4, 4), nn.Linear(4, 4)
    x = torch.randn(2, 4)
    assert _graph_stays_in(replica(x).sum(), replica)
    assert not _graph_stays_in((replica(x) + other(x)).sum(), replica)
    assert _graph_stays_in(checkpoint(replica, x, use_reentrant=False).sum(), replica)
    assert not _graph_stays_in(checkpoint(replica, x.requires_grad_(), use_reentrant=True).sum(), replica)


def test_assert_replicas_identical_takes_a_generator():
    hdp = _hdp()
    try:
        with torch.no_grad():
            hdp.replicas[1].net[0].weight.add_(1.0)
        with pytest.raises(AssertionError, match="replica on fl:1 differs"):
            hdp.assert_replicas_identical(i for i in [1])
    finally:
        hdp.close()


def test_a_checkpoint_loaded_while_a_shard_is_abandoned_waits_for_it():
    """load_state_dict (which may move the master) and broadcast first wait for an abandoned
    shard to end: nothing copies into a replica still computing, and no rows are lost."""
    xs, ys = _data(steps=8, batch=40)
    expected = _big_batch_run(xs, ys)
    hdp = _hdp()
    try:
        for k, (x, y) in enumerate(zip(xs, ys)):
            if k == 5:
                STALL.update(device=torch.device("fl:1"), seconds=0.5)
            hdp.train_step(x, y, F.cross_entropy)
            if k == 5:
                assert hdp.backups == 1 and 1 in hdp._late
                hdp.load_state_dict(hdp.state_dict())
                assert not hdp._late
        assert hdp.last_shards == [20, 20]
        _assert_equals_the_big_batch(hdp, expected)
    finally:
        hdp.close()
