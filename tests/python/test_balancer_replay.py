"""torch_fl.balancer.SplitSchedule driven with synthetic step times: which steps count, and which
split a whole run keeps, for step-time patterns measured on the H200 (a CPU-plugin device beside
the GPU, wide MLP at batch 65536: the GPU alone ~0.1725 µs/sample, a CPU + GPU split a few
percent faster in steady state, its first step after steps of the GPU alone 10-80% slower).
No device is touched: the schedule sees shard sizes and seconds only."""
from __future__ import annotations

import random

import pytest

from torch_fl.balancer import SplitSchedule, ThroughputBalancer, device_set

BATCH = 65536
ALONE = 0.1725e-6  # s/sample of the GPU alone
# What a split slower than the GPU alone may cost a replayed run. _replay's split takes the same
# time in every shape, and a new shape's warm-up step twice a step, so the one probe of the
# model's split in a new shape (test_a_calibration_that_read_the_cpu_fast_gets_its_corrected_split_probed) is pure
# cost here: with it these replays took up to 1.012x the GPU alone's time, 1.009x before.
SLOWER_SPLIT_BOUND = 1.015


def _h200_like_balancer(ema: float = 0.3, cpu_fixed_s: float = 0.004) -> ThroughputBalancer:
    """A balancer calibrated as on the H200 machine: device 0 the CPU plugin (4 ms + 1.48 µs
    per sample, 0.4 ms of transfers; `cpu_fixed_s` for a calibration that read another fixed
    cost), device 1 the GPU (0.1 ms + 0.176 µs per sample)."""
    b = ThroughputBalancer(2, ema=ema)
    b.calibrate(0, [(16384, cpu_fixed_s + 1.48e-6 * 16384), (65536, cpu_fixed_s + 1.48e-6 * 65536)] * 2, 0.0004)
    b.calibrate(1, [(16384, 0.0001 + 1.76e-7 * 16384), (65536, 0.0001 + 1.76e-7 * 65536)] * 2, 0.0)
    return b


def _replay(split_gain: float, seed: int, steps: int = 144, switch_in=(1.0, 1.6), ema: float = 0.3,
            cpu_fixed_s: float = 0.004, cold_first: float = 1.0, slow_split_steps: frozenset = frozenset()):
    """Runs a schedule for `steps` steps whose times are drawn as described in the module's
    docstring; returns (the share of steps that ran the split, the mean step time per sample
    after the first 12 steps relative to the GPU alone). `cpu_fixed_s` is the CPU device's
    fixed cost as calibrated; its steps take 4 ms + 1.48 µs per sample whatever it is. The
    split's first step after its warm-up takes `cold_first` times its usual time; a split step
    whose number is in `slow_split_steps` takes 1.2x (the CPU device's shard 1.4x)."""
    rng = random.Random(seed)
    first_warm_split = True
    schedule = SplitSchedule(_h200_like_balancer(ema, cpu_fixed_s), rebalance_every=10, granularity=1024)
    schedule.warm.update({(0, 16384), (0, BATCH), (1, 16384), (1, BATCH)})  # as calibration leaves it
    last, split_steps, spent, counted = None, 0, 0.0, 0
    for step in range(steps):
        sizes = schedule.sizes(BATCH, step)
        active = device_set(sizes)
        if active == (1,):
            per_sample = ALONE + rng.gauss(0, 0.0015e-6)
        elif active == (0, 1):
            split_steps += 1
            per_sample = ALONE * (1 - split_gain) + rng.gauss(0, 0.0015e-6)
            if last is not None and last != active:
                per_sample *= rng.uniform(*switch_in)
        else:  # the CPU alone
            per_sample = 1.6e-6
        if schedule.cold_shards(sizes):
            per_sample *= 2  # a new shape's warm-up
        elif active == (0, 1) and first_warm_split:
            per_sample *= cold_first
            first_warm_split = False
        slow = active == (0, 1) and step in slow_split_steps
        if slow:
            per_sample *= 1.2
        device_seconds = [None, None]
        if sizes[0]:
            device_seconds[0] = (0.004 + 1.48e-6 * sizes[0]) * rng.uniform(0.95, 1.2) * (1.4 if slow else 1.0)
        if sizes[1] and active != (1,):
            device_seconds[1] = (0.0001 + 1.76e-7 * sizes[1]) * rng.uniform(0.98, 1.05)
        schedule.after_step(BATCH, sizes, per_sample * BATCH, device_seconds, 0.0)
        last = active
        if step >= 12:
            spent, counted = spent + per_sample, counted + 1
    return split_steps / steps, spent / counted / ALONE


@pytest.mark.parametrize("seed", range(8))
def test_a_split_faster_in_steady_state_keeps_its_place_through_probes(seed):
    """A split 3.5% faster per step than the GPU alone, whose first step after a probe of the
    GPU alone pays a switch-in cost: it runs nearly all steps. Before the return rule (the step
    back from a probe was recorded) the same eight replays kept the split on 9-56% of steps."""
    share, relative_time = _replay(split_gain=0.035, seed=seed)
    assert share >= 0.9
    assert relative_time < 0.985


@pytest.mark.parametrize("seed", range(8))
def test_a_split_whose_first_measured_step_ran_cold_gets_a_second_look_and_keeps_its_place(seed):
    """The H200's call 4 of the seventeenth session: the split's first step after its warm-up
    took 1.6x its usual time (18.1 ms against 10.9-11.1) and lost to the GPU alone (11.3 ms).
    The step runs again at once and that one is the split's record. Without the second look
    the same eight replays kept the split on 3% of the steps."""
    share, relative_time = _replay(split_gain=0.035, seed=seed, cold_first=1.6)
    assert share >= 0.9
    assert relative_time < 0.985


@pytest.mark.parametrize("seed", range(8))
def test_a_faster_split_that_two_slow_steps_moved_out_comes_back(seed):
    """The H200's call 1 of the seventeenth session: two slow steps of the CPU device (steps 24
    and 25) moved the run to the GPU alone, and every later step of the split was its first
    after steps of the GPU alone, paying the switch-in cost, so each recheck and probe lost and
    the split ran 16 of 96 steps. A second step of the split after a switch decides. Without
    it the same eight replays kept the split on 18-68% of the steps, at 0.982-1.006x the GPU's
    time."""
    share, relative_time = _replay(split_gain=0.035, seed=seed, slow_split_steps=frozenset({24, 25}))
    assert share >= 0.65
    assert relative_time < 0.985


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cold_first", [1.0, 1.3])  # 1.3: its first step cold, and a second look
def test_a_split_slower_than_the_gpu_alone_runs_only_when_probed(seed, cold_first):
    share, relative_time = _replay(split_gain=-0.03, seed=seed, cold_first=cold_first)
    assert share <= 0.1
    assert relative_time < SLOWER_SPLIT_BOUND


@pytest.mark.parametrize("seed", range(8))
def test_a_split_the_calibrated_model_leaves_out_is_tried_and_kept_when_faster(seed):
    """The calibration read the CPU device's fixed cost as 20 ms (a stall in its passes; the
    H200's twelfth session), so the model never gives it rows: every device together is still a
    candidate, tried once the GPU alone has run, and kept when a real step is faster."""
    assert ThroughputBalancer.split(_h200_like_balancer(cpu_fixed_s=0.020), BATCH, 1024)[0] == 0
    share, relative_time = _replay(split_gain=0.035, seed=seed, cpu_fixed_s=0.020)
    assert share >= 0.85
    # Faster than the GPU alone, though less so than with a true calibration (< 0.985 above):
    # the model, corrected step by step, moves between shapes, each new one a warm-up step.
    assert relative_time < 1.0


@pytest.mark.parametrize("seed", range(8))
def test_a_left_out_device_that_is_slower_together_stays_out(seed):
    share, relative_time = _replay(split_gain=-0.03, seed=seed, cpu_fixed_s=0.020)
    assert share <= 0.1
    assert relative_time < SLOWER_SPLIT_BOUND


def _physical_replay(seed: int, cpu_rate_calibrated: float, cpu_rate: float = 1.42e-6, steps: int = 96):
    """A run whose step times follow the shards: the CPU device 0.2 ms + `cpu_rate` per row
    (x0.95-1.2 per step, x1.0-1.6 on its first step after another set), the GPU 0.1 ms +
    0.165 µs per row, a split step the slower of the two + 0.6 ms, the GPU alone's + 0.3 ms, a
    new shape 2 ms more (the H200's wide MLP at batch 65536, the seventeenth and eighteenth
    sessions). The calibration read the CPU device at `cpu_rate_calibrated` per row. Returns
    (share of split steps, run time relative to the GPU alone's)."""
    rng = random.Random(seed)
    b = ThroughputBalancer(2)
    b.calibrate(0, [(16384, cpu_rate_calibrated * 16384), (BATCH, cpu_rate_calibrated * BATCH)] * 2, 0.0002)
    b.calibrate(1, [(16384, 0.0001 + 1.65e-7 * 16384), (BATCH, 0.0001 + 1.65e-7 * BATCH)] * 2, 0.0)
    schedule = SplitSchedule(b, rebalance_every=10)
    schedule.warm.update({(0, 16384), (0, BATCH), (1, 16384), (1, BATCH)})
    last, total, split_steps = None, 0.0, 0
    for step in range(steps):
        sizes = schedule.sizes(BATCH, step)
        active = device_set(sizes)
        cpu = gpu = None
        if sizes[0]:
            cpu = 0.0002 + cpu_rate * sizes[0] * rng.uniform(0.95, 1.2)
            if last is not None and last != active:
                cpu *= rng.uniform(1.0, 1.6)
        if sizes[1]:
            gpu = 0.0001 + 1.65e-7 * sizes[1] * rng.uniform(0.99, 1.02)
        seconds = max(t for t in (cpu, gpu) if t is not None) + (0.0006 if len(active) > 1 else 0.0003)
        if schedule.cold_shards(sizes):
            seconds += 0.002
        schedule.after_step(BATCH, sizes, seconds, [cpu, gpu if len(active) > 1 else None], 0.0)
        last, total, split_steps = active, total + seconds, split_steps + (len(active) > 1)
    return split_steps / steps, total / ((0.0001 + 1.65e-7 * BATCH * 1.005 + 0.0003) * steps)


@pytest.mark.parametrize("seed", range(8))
def test_a_calibration_that_read_the_cpu_fast_gets_its_corrected_split_probed(seed):
    """The H200's eighteenth session, call 2, run 5: the calibration read the CPU device at
    1.17 µs per row against 1.42 in steps, so the model's first split gave it 8192 rows, which
    took 12-13 ms beside the GPU's 9.6, and lost. The model, corrected by those steps, then
    split 4096 / 61440, but the set's record was the 8192 split's, and it ran 2 of 96 steps.
    The model's split in a new shape that the model expects faster is probed once. Without
    that the same eight replays ran the split on 4-5% of the steps at 1.011-1.020x the GPU's
    time."""
    share, relative_time = _physical_replay(seed, cpu_rate_calibrated=1.17e-6)
    assert share >= 0.85
    assert relative_time < 0.99


def test_calibration_fits_the_fastest_pass_of_each_size():
    """One stalled pass (the second at 16384 rows) moves nothing: the fit goes through the
    fastest pass of each size."""
    clean = ThroughputBalancer(1)
    clean.calibrate(0, [(16384, 0.030), (65536, 0.100)])
    stalled = ThroughputBalancer(1)
    stalled.calibrate(0, [(16384, 0.030), (16384, 0.075), (65536, 0.100), (65536, 0.101)])
    assert stalled.overhead[0] == pytest.approx(clean.overhead[0])
    assert stalled.per_sample[0] == pytest.approx(clean.per_sample[0])
    assert clean.overhead[0] == pytest.approx(0.030 - 16384 * 0.070 / 49152)


def test_the_every_device_candidate_gives_each_left_out_device_one_piece():
    b = ThroughputBalancer(3)
    for i, fixed in enumerate((0.0001, 0.5, 0.6)):  # devices 1 and 2: far too slow to get rows
        b.calibrate(i, [(1024, fixed + 1e-7 * 1024), (4096, fixed + 1e-7 * 4096)])
    assert b.split(4096, 256) == [4096, 0, 0]
    assert b._with_every_device([4096, 0, 0], 256) == [3584, 256, 256]
    assert b._with_every_device([4096, 0, 0], 4096) is None  # too few rows for a piece each
    assert b._with_every_device([2048, 1024, 1024], 256) is None  # nobody left out
    b.min_rows = 2  # batch norm: no shard of one row (the donor keeps a piece too)
    assert b._with_every_device([3, 3, 0], 1) is None
    assert b._with_every_device([6, 3, 0], 1) == [4, 3, 2]


def test_a_recheck_due_goes_before_the_first_try_of_every_device_together():
    """Rechecks come first (a set that lost its place to its own rising record, a set whose
    record is still its calibration's); the untried every-device split waits for the next
    counted plan after them."""
    b = ThroughputBalancer(2, probe_every=100)
    b.calibrate(0, [(16, 0.0016), (64, 0.0064)])  # device 0: 0.1 ms / sample
    b.calibrate(1, [(16, 0.01), (64, 0.01)])      # device 1: a 10 ms fixed cost, no share
    assert b.plan(64, 16) == [64, 0]
    b.record_step([64, 0], 0.0064)
    b.record_step([64, 0], 0.0064 * 50)  # a slow spell: device 0's record rises past device 1's
    assert b.plan(64, 16, count=False) == [0, 64]  # a re-plan moves to device 1 and notes the recheck
    assert b.recheck == {"0"}
    assert b.plan(64, 16) == [64, 0] and b.rechecking  # the recheck first...
    b.record_step([64, 0], 0.0064)
    assert b.plan(64, 16) == [0, 64] and b.rechecking  # ...then device 1's first real step...
    b.record_step([0, 64], 0.05)
    assert b.plan(64, 16) == [48, 16] and b.probing and not b.rechecking  # ...then every device


def _two_device_schedule() -> SplitSchedule:
    b = ThroughputBalancer(2, probe_every=1)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])
    b.calibrate(1, [(16, 0.0016), (64, 0.0064)])
    schedule = SplitSchedule(b, rebalance_every=1, granularity=1)
    schedule.warm.update((i, n) for i in (0, 1) for n in range(65))
    return schedule


def test_the_step_back_from_a_probe_is_not_recorded_the_probe_is():
    schedule = _two_device_schedule()
    b = schedule.balancer
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064])          # the incumbent, recorded
    recorded = b.measured["1"]
    b.probing = True                                                   # as plan() leaves it for a probe
    schedule.after_step(64, [8, 56], 0.0070, [0.008, 0.0056])          # the probe: recorded as it is
    assert b.measured["0,1"] == pytest.approx(0.0070 / 64)
    b.probing = False
    schedule.after_step(64, [0, 64], 0.0200, [None, 0.02])             # back, with a switch-in cost
    assert b.measured["1"] == recorded
    schedule.after_step(64, [0, 64], 0.0066, [None, 0.0066])           # the next one counts
    assert b.measured["1"] == pytest.approx(0.7 * recorded + 0.3 * 0.0066 / 64)


def test_a_set_change_that_is_not_the_end_of_a_probe_is_recorded():
    """A set change that no probe caused (a re-plan after a beaten split, a re-balance) is
    measured: it is what the choice costs."""
    schedule = _two_device_schedule()
    b = schedule.balancer
    schedule.after_step(64, [8, 56], 0.0070, [0.008, 0.0056])
    schedule.after_step(64, [0, 64], 0.0060, [None, 0.0060])
    assert b.observations == 2
    assert b.measured["1"] == pytest.approx(0.0060 / 64)  # a first real step faster than calibrated


def test_a_probe_right_after_a_probe_of_another_set_is_measured():
    """Back-to-back probes (three devices' calibrated-only sets, probe_every=1): each probe's
    step gives its verdict, none is taken for a return."""
    schedule = _two_device_schedule()
    b = schedule.balancer
    b.probing = True
    schedule.after_step(64, [8, 56], 0.0070, [0.008, 0.0056])
    schedule.after_step(64, [64, 0], 0.0640, [0.064, None])
    assert b.observations == 2 and b.measured["0"] == pytest.approx(0.0640 / 64)


def test_a_step_after_a_pause_longer_than_the_step_before_is_not_recorded():
    schedule = _two_device_schedule()
    b = schedule.balancer
    for _ in range(3):  # a pause is judged against the usual wait, once three are known
        schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.0001)
    recorded, observations = b.measured["1"], b.observations
    schedule.after_step(64, [0, 64], 0.0300, [None, 0.03], idle_seconds=0.5)   # after an evaluation
    assert (b.measured["1"], b.observations) == (recorded, observations)
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.0064)  # not longer: counts
    assert b.observations == observations + 1


def test_a_loop_that_waits_longer_for_each_batch_than_a_step_takes_is_still_recorded():
    """Data-bound: every step follows 2x its own time of waiting for the next batch (the first,
    as train_step gives it, with no wait known). Only a wait PAUSE times the usual one is a
    pause."""
    schedule = _two_device_schedule()
    b = schedule.balancer
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=None)
    for _ in range(5):
        schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.0128)
    assert b.observations == 6
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.2)  # an evaluation
    assert b.observations == 6
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.0128)
    assert b.observations == 7


def test_a_loop_that_turns_data_bound_is_recorded_again_once_its_waits_are_usual():
    """Prefetched batches first (no wait), then each wait 2x a step: those waits count as
    pauses only until they are the median of the recent ones."""
    schedule = _two_device_schedule()
    b = schedule.balancer
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=None)
    for _ in range(SplitSchedule.IDLE_WINDOW):
        schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.00005)
    before = b.observations
    for _ in range(50):
        schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.0128)
    skipped = 50 - (b.observations - before)
    assert 0 < skipped <= SplitSchedule.IDLE_WINDOW // 2 + 1


def test_a_warm_up_runs_again_and_is_not_recorded():
    schedule = _two_device_schedule()
    b = schedule.balancer
    schedule.warm.discard((0, 9))
    schedule.after_step(64, [9, 55], 0.05, [0.05, 0.006])
    assert "0,1" not in b.measured
    assert schedule.sizes(64, 1) == [9, 55]  # the same split again, measured this time


def test_a_lost_first_step_of_a_split_runs_again_and_the_second_is_its_record():
    schedule = _two_device_schedule()
    b = schedule.balancer
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064])   # device 1 alone, recorded
    b.plan(64, 1)                                              # (the plan's candidates)
    schedule.after_step(64, [8, 56], 0.0090, [0.009, 0.0056])  # the split's first step loses...
    assert b.measured["0,1"] == pytest.approx(0.0090 / 64)
    assert schedule.sizes(64, 2) == [8, 56]                    # ...and runs again at once,
    schedule.after_step(64, [8, 56], 0.0060, [0.006, 0.0056])
    charged = (0.0060 + (0.0090 - 0.0060) / b.SWITCH_PAYBACK) / 64
    assert b.measured["0,1"] == pytest.approx(charged)          # its time replaces the first's,
    assert b.history[-1]["second_look"] and b.history[-1]["won"]  # charged a share of it
    assert b.recorded_steps["0,1"] == 2 and b.second_looks == {"0,1"}
    schedule.after_step(64, [8, 56], 0.0064, [0.0064, 0.0056])  # later steps are averaged in
    assert b.measured["0,1"] == pytest.approx(0.7 * charged + 0.3 * 0.0064 / 64)


def test_a_split_that_switched_in_after_steps_of_another_set_gets_a_second_look():
    schedule = _two_device_schedule()
    b = schedule.balancer
    b.recorded_steps["0,1"] = 5                                # a split that ran before
    b.measured["0,1"] = 0.0070 / 64                            # (a slow spell in its record)
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064])  # steps of device 1 alone...
    b.plan(64, 1)
    schedule.after_step(64, [8, 56], 0.0080, [0.008, 0.0056])  # ...then the split, cold, loses
    assert schedule.sizes(64, 2) == [8, 56]                    # and runs again
    schedule.after_step(64, [8, 56], 0.0060, [0.006, 0.0056])
    assert b.history[-1]["second_look"] and b.history[-1]["won"]
    schedule.after_step(64, [8, 56], 0.0066, [0.0066, 0.0056])  # a loss not after a switch:
    assert not schedule._rerun                                     # no second look


def test_a_second_look_is_once_per_set_and_not_for_a_far_slower_split_or_one_device():
    schedule = _two_device_schedule()
    b = schedule.balancer
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064])
    b.plan(64, 1)
    assert not b.wants_second_look([0, 64], 0.009)                # one device: no second look
    schedule.after_step(64, [8, 56], 0.0064 * 2.5, [0.016, 0.0056])  # 2.5x the best: far
    assert b.second_looks == set() and not schedule._rerun  # nothing runs again
    b2 = _two_device_schedule()
    b2.after_step(64, [0, 64], 0.0064, [None, 0.0064])
    b2.balancer.plan(64, 1)
    b2.after_step(64, [8, 56], 0.0080, [0.008, 0.0056])
    assert b2.sizes(64, 2) == [8, 56]
    b2.after_step(64, [8, 56], 0.0080, [0.008, 0.0056])  # the second look loses too...
    assert not b2.balancer.history[-1]["won"]
    assert not b2.balancer.wants_second_look([8, 56], 0.008)    # ...and there is no third
    state = b2.balancer.state_dict()
    resumed = ThroughputBalancer(2)
    resumed.load_state_dict(state)
    assert resumed.second_looks == {"0,1"} and resumed.recorded_steps == b2.balancer.recorded_steps


def test_a_checkpoint_from_before_second_looks_counts_sets_that_ran_as_past_their_first_step():
    b = ThroughputBalancer(2)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])
    b.calibrate(1, [(16, 0.0016), (64, 0.0064)])
    b.plan(64, 1)
    b.record_step([8, 56], 0.009)
    state = b.state_dict()
    del state["recorded_steps"], state["second_looks"]
    resumed = ThroughputBalancer(2)
    resumed.load_state_dict(state)
    resumed.plan(64, 1)
    resumed.record_step([8, 56], 0.009)
    assert not resumed.wants_second_look([8, 56], 0.009)


def test_a_split_that_loses_its_place_before_the_next_plan_is_rechecked_at_it():
    """The H200's eighteenth session, call 2, run 2: the model's split ran from the first plan,
    its third step took 13.4 ms against 11.0, and the re-plan moved to the GPU alone before
    any counted plan had seen the split's record; no recheck was due and the GPU alone ran the
    next 36 steps. The split's first record is the one it took the place with."""
    b = _h200_like_balancer()
    b.last_seen["1"] = 0                          # the GPU alone ran (its record is real)
    model = b.plan(BATCH, 4096)
    assert device_set(model) == (0, 1) and not b.probing
    gpu = b.measured["1"] * BATCH
    b.record_step(model, gpu * 0.975)
    b.record_step(model, gpu * 0.975)
    b.record_step(model, gpu * 1.2)               # one slow step: the split is beaten...
    assert b.beaten(model)
    assert b.plan(BATCH, 4096, count=False) == [0, BATCH]  # ...and the re-plan runs the GPU alone
    assert b.recheck == {"0,1"}
    assert device_set(b.plan(BATCH, 4096)) == (0, 1) and b.rechecking  # rechecked at the next plan


def test_a_second_look_that_replaces_a_cold_first_step_is_the_record_the_split_took_its_place_with():
    b = _h200_like_balancer()
    b.last_seen["1"] = 0
    model = b.plan(BATCH, 4096)
    gpu = b.measured["1"] * BATCH
    b.record_step(model, gpu * 1.3)               # the first step, cold, loses...
    assert b.wants_second_look(model, gpu * 1.3)
    b.record_step(model, gpu * 0.97, second_look=True)  # ...the second look wins
    b.record_step(model, gpu * 1.2)               # a slow step: beaten, the re-plan moves away
    assert b.plan(BATCH, 4096, count=False) == [0, BATCH] and b.recheck == {"0,1"}


def test_a_second_look_survives_a_pause_and_a_batch_of_another_size_in_between():
    schedule = _two_device_schedule()
    b = schedule.balancer
    for _ in range(3):
        schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.0001)
    b.plan(64, 1)
    schedule.after_step(64, [8, 56], 0.0080, [0.008, 0.0056], idle_seconds=0.0001)  # loses: a second look
    schedule.warm.discard((0, 2))
    assert schedule.sizes(32, 4) != [8, 56]
    schedule.after_step(32, [2, 30], 0.004, [0.002, 0.003], idle_seconds=0.0001)  # another size, a warm-up
    assert schedule.sizes(64, 5) == [8, 56]                                      # the second look still runs...
    schedule.after_step(64, [8, 56], 0.0300, [0.03, 0.0056], idle_seconds=0.5)  # ...after a pause: not recorded
    assert "0,1" not in b.second_looks and b.measured["0,1"] == pytest.approx(0.0080 / 64)
    assert schedule.sizes(64, 6) == [8, 56]                                      # so it runs once more
    schedule.after_step(64, [8, 56], 0.0060, [0.006, 0.0056], idle_seconds=0.0001)
    assert b.history[-1]["second_look"] and b.second_looks == {"0,1"}
    assert schedule.sizes(32, 7) == [2, 30]                                      # (the other size's rerun)


def test_a_probe_whose_step_follows_a_pause_runs_again_and_is_measured_then():
    schedule = _two_device_schedule()
    b = schedule.balancer
    for _ in range(3):
        schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064], idle_seconds=0.0001)
    observations = b.observations
    b.probing = True                                                  # as plan() leaves it
    schedule.after_step(64, [8, 56], 0.0300, [0.03, 0.0056], idle_seconds=0.5)  # after an evaluation
    assert b.observations == observations and "0,1" not in b.measured
    assert schedule.sizes(64, 5) == [8, 56] and b.probing             # the probe again, measured
    schedule.after_step(64, [8, 56], 0.0070, [0.007, 0.0056], idle_seconds=0.0001)
    assert b.measured["0,1"] == pytest.approx(0.0070 / 64)


def test_the_models_split_in_a_new_shape_is_probed_once_in_that_shape():
    schedule = _two_device_schedule()
    b = schedule.balancer
    schedule.after_step(64, [0, 64], 0.0064, [None, 0.0064])         # device 1 alone ran
    model = b.split(64, 1)
    assert model[0] > 0
    old_shape = [model[0] + 8, model[1] - 8]                          # the set's record: another shape,
    assert b.predicted_seconds(model) < b.predicted_seconds(old_shape)  # one the model expects slower
    b.plan(64, 1)
    b.record_step(old_shape, 0.0080)
    schedule.warm.discard((0, model[0]))                              # the new shape is cold
    assert schedule.sizes(64, 10) == model and b.reshaping and b.probing  # probed in its own shape
    assert schedule.cold_shards(model)                                # (a warm-up, then measured)
    b.record_step(old_shape, 0.0080)                                  # the old shape again
    b.plan(64, 1)
    assert not b.reshaping                                            # once per set
    state = b.state_dict()
    resumed = ThroughputBalancer(2)
    resumed.load_state_dict(state)
    assert resumed.reshape_probes == {"0,1"} and resumed.record_shapes["0,1|64"] == old_shape


# -- the tail: a device whose speed varies from step to step


def _observed(ratios_per_step, sizes=(4096, 61440), tail_window: int = 32) -> ThroughputBalancer:
    """An H200-like balancer that observed steps of `sizes` whose devices took `ratios` times
    their calibrated time."""
    b = _h200_like_balancer()
    b.tail_window = tail_window
    b.ratios = type(b.ratios)(maxlen=max(tail_window, 1))
    for ratios in ratios_per_step:
        b.observe(sizes, [r * (b.overhead[i] + b.per_sample[i] * n) for i, (r, n) in enumerate(zip(ratios, sizes))])
    return b


def _mean_step(b: ThroughputBalancer, sizes, draws) -> float:
    return sum(max(r[i] * (b.overhead[i] + b.per_sample[i] * sizes[i]) + b.transfer[i] for i in (0, 1))
               for r in draws) / len(draws)


def test_a_device_that_never_varies_keeps_the_equal_finish_split():
    steady = _observed([(1.0, 1.0)] * 32)
    plain = _observed([(1.0, 1.0)] * 32, tail_window=0)
    assert steady.split(BATCH, 1024) == plain.split(BATCH, 1024)
    assert steady.split(BATCH, 1024)[0] > 0


def test_a_host_device_with_slow_steps_gets_fewer_rows_and_the_steps_get_shorter():
    """One step in five of the CPU-plugin device takes 2.5x its usual time (the H200's fixed
    splits measured up to 4x on some steps): the split moves rows to the GPU, and over fresh
    draws of the same pattern its mean step is shorter than the equal-finish split's."""
    rng = random.Random(7)

    def draw(k):
        return (2.5 if k % 5 == 2 else rng.uniform(0.95, 1.05), rng.uniform(0.99, 1.01))

    seen = [draw(k) for k in range(32)]
    tail = _observed(seen)
    plain = _observed(seen, tail_window=0)
    tail_sizes, plain_sizes = tail.split(BATCH, 1024), plain.split(BATCH, 1024)
    assert sum(tail_sizes) == sum(plain_sizes) == BATCH
    assert 0 < tail_sizes[0] < plain_sizes[0]
    fresh = [draw(k) for k in range(2000)]
    assert _mean_step(tail, tail_sizes, fresh) < 0.97 * _mean_step(tail, plain_sizes, fresh)


def test_devices_that_slow_down_together_are_not_rebalanced_for_it():
    """A busy host slows both devices in the same steps: the slow steps are slow whatever the
    split, so the split stays the equal-finish one of the typical speed."""
    steps = [(2.0, 2.0) if k % 5 == 0 else (1.0, 1.0) for k in range(32)]
    assert _observed(steps).split(BATCH, 1024) == _observed([(1.2, 1.2)] * 32, tail_window=0).split(BATCH, 1024)


def test_the_tail_waits_for_enough_steps_and_survives_a_checkpoint():
    rng = random.Random(3)
    steps = [(2.5 if rng.random() < 0.3 else 1.0, 1.0) for _ in range(32)]
    few = _observed(steps[:ThroughputBalancer.TAIL_MIN - 1])
    assert few.split(BATCH, 1024) == _observed(steps[:ThroughputBalancer.TAIL_MIN - 1], tail_window=0).split(BATCH, 1024)
    b = _observed(steps)
    restored = ThroughputBalancer(2)
    restored.load_state_dict(b.state_dict())
    assert list(restored.ratios) == list(b.ratios)
    assert restored.split(BATCH, 1024) == b.split(BATCH, 1024)
    with pytest.raises(ValueError, match="tail_window"):
        ThroughputBalancer(2, tail_window=-1)


def test_the_tail_leaves_every_device_of_the_split_a_whole_piece():
    """The device holding the rounding remainder (batch 65541: 1029 rows at granularity 1024)
    kept 5 rows after the search before: its whole fixed cost for nothing, and a new shape."""
    steps = [(4.0 if k % 3 == 0 else 1.0, 1.0) for k in range(32)]
    for batch, q in ((65541, 1024), (65536, 1024), (65536, 64), (4000, 16)):
        tail, plain = _observed(steps), _observed(steps, tail_window=0)
        sizes, before = tail.split(batch, q), plain.split(batch, q)
        assert sum(sizes) == batch
        for i in device_set(before):
            assert sizes[i] >= q, (batch, q, before, sizes)


def test_the_tail_search_at_granularity_one_moves_coarse_pieces_first():
    """granularity=1 searched one row per round (0.3 s per split with two devices, 3.5 s with
    eight); moves now start at batch/8 rows and halve, so the rounds stay few, and the split
    lands where the granularity-1024 search does, within a piece."""
    rng = random.Random(5)
    steps = [(2.5 if k % 5 == 2 else rng.uniform(0.95, 1.05), 1.0) for k in range(32)]
    fine, coarse = _observed(steps), _observed(steps)
    calls = 0
    measure = fine.expected_seconds

    def counted(*args):
        nonlocal calls
        calls += 1
        return measure(*args)

    fine.expected_seconds = counted
    fine_sizes = fine.split(BATCH, 1)
    assert calls < 400
    assert abs(fine_sizes[0] - coarse.split(BATCH, 1024)[0]) <= 1024
    assert fine.expected_seconds(fine_sizes, fine.tail_steps((0, 1))) <= coarse.expected_seconds(
        coarse.split(BATCH, 1024), coarse.tail_steps((0, 1))) + 1e-12


def test_a_resumed_balancer_keeps_its_own_tail_switch_and_recalibration_drops_the_steps():
    steps = [(2.5 if k % 4 == 0 else 1.0, 1.0) for k in range(32)]
    saved = _observed(steps).state_dict()
    off = ThroughputBalancer(2, tail_window=0)
    off.load_state_dict(saved)
    assert off.tail_window == 0
    assert off.split(BATCH, 1024) == _observed(steps, tail_window=0).split(BATCH, 1024)
    b = _observed(steps)
    b.calibrate(0, [(16384, 0.03), (65536, 0.1)])
    assert len(b.ratios) == 0
