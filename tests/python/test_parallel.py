"""torch_fl.parallel: the throughput balancer's split, and HeteroDataParallel on fl:0 + fl:1 (and
across two plugins when another plugin has a device)
giving the parameters of a single-device big-batch run, bit-identical replicas, and exact
checkpoint/resume."""
from __future__ import annotations

import collections
import copy
import dataclasses
import io
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl

from torch_fl.balancer import ThroughputBalancer
from torch_fl.parallel import HeteroDataParallel


# ---- the balancer -----------------------------------------------------------------------


def test_split_is_proportional_to_throughput_without_fixed_costs():
    b = ThroughputBalancer(2)
    b.calibrate(0, [(10, 0.010), (40, 0.040)])   # 1 ms / sample
    b.calibrate(1, [(10, 0.030), (40, 0.120)])   # 3 ms / sample
    assert b.split(100) == [75, 25]
    assert sum(b.split(37)) == 37


def test_split_equalises_predicted_finish_times_with_fixed_costs():
    b = ThroughputBalancer(2)
    b.calibrate(0, [(8, 0.010 + 8e-3), (64, 0.010 + 64e-3)])   # a=10 ms, b=1 ms
    b.calibrate(1, [(8, 0.002 + 16e-3), (64, 0.002 + 128e-3)])  # a=2 ms, b=2 ms
    sizes = b.split(60)
    assert sum(sizes) == 60
    t0 = 0.010 + 1e-3 * sizes[0]
    t1 = 0.002 + 2e-3 * sizes[1]
    assert abs(t0 - t1) <= 2e-3  # within one sample of each other
    assert b.predicted_seconds(sizes) < b.predicted_seconds([60, 0])
    assert b.predicted_seconds(sizes) < b.predicted_seconds([0, 60])


def test_a_device_that_cannot_help_gets_no_shard():
    b = ThroughputBalancer(2)
    b.calibrate(0, [(4, 0.004), (16, 0.016)])           # 1 ms/sample, no fixed cost
    b.calibrate(1, [(4, 0.5), (16, 0.5)], transfer_s=0.1)  # huge fixed cost
    assert b.split(16) == [16, 0]


def test_observe_moves_the_estimate_towards_measured_times():
    b = ThroughputBalancer(2, ema=0.5)
    b.calibrate(0, [(10, 0.01), (20, 0.02)])
    b.calibrate(1, [(10, 0.01), (20, 0.02)])
    assert b.split(100) == [50, 50]
    for _ in range(20):  # device 1 turns out 4x slower in real steps
        b.observe([50, 50], [0.05, 0.20])
    sizes = b.split(100)
    assert sizes[0] == pytest.approx(80, abs=2) and sum(sizes) == 100


def test_plan_runs_the_fastest_measured_set_and_probes_the_others():
    b = ThroughputBalancer(2, probe_every=4)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])   # 1 ms / sample alone
    b.calibrate(1, [(16, 0.032), (64, 0.128)])   # 2 ms / sample alone
    assert b.fastest_alone() == 0
    per_sample = {(43, 21): 1.4e-3, (64, 0): 1.0e-3, (0, 64): 2.0e-3}  # the pair is slower

    def run(plans):
        chosen = []
        for _ in range(plans):
            sizes = tuple(b.plan(64))
            chosen.append(sizes)
            b.record_step(sizes, per_sample[sizes] * 64)
        return chosen

    chosen = run(20)
    assert chosen[0] == (43, 21)                 # not measured together yet: the model's split
    assert chosen.count((64, 0)) >= 14           # then the fastest, fl:0 alone...
    assert {(43, 21), (0, 64)} <= set(chosen[1:])  # ...with one-step probes of the others
    assert chosen[2] == (0, 64)                  # fl:1 alone's record was only calibrated: one real step
    assert all(c == (64, 0) for k, c in enumerate(chosen[1:], start=2) if k % 4 and k != 3)
    per_sample[(43, 21)] = 0.6e-3                # the pair becomes faster than fl:0 alone
    chosen = run(20)
    assert chosen[-8:].count((43, 21)) >= 6


def test_probes_skip_a_device_far_slower_than_the_best():
    b = ThroughputBalancer(2, probe_every=2, probe_limit=3.0)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])   # 1 ms / sample alone
    b.calibrate(1, [(16, 0.16), (64, 0.64)])     # 10 ms / sample alone: 10x slower
    per_sample = {(64, 0): 1.0e-3, (0, 64): 10e-3}
    chosen = []
    for _ in range(30):
        sizes = tuple(b.plan(64))
        chosen.append(sizes)
        b.record_step(sizes, per_sample.get(sizes, 1.2e-3) * 64)
    assert (0, 64) not in chosen                  # the slow device alone is never probed
    assert chosen.count((64, 0)) >= 14            # the best between probes of the split,
    assert chosen.count((64, 0)) + chosen.count((59, 5)) == 30  # which is within the limit


def test_a_device_far_slower_is_probed_only_at_the_longest_interval():
    """More than probe_limit times slower than the best: not probed for probe_every·2^6 plans
    from when it last ran, then once per such interval — a record spoiled by one bad step is
    not final, and the probes cost little."""
    b = ThroughputBalancer(2, probe_every=2, probe_limit=2.0)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])   # 1 ms / sample alone
    b.calibrate(1, [(16, 0.16), (64, 0.64)])     # 10 ms / sample alone
    probed = []
    for plan in range(1, 401):
        sizes = tuple(b.plan(64))
        if sizes == (0, 64):
            probed.append(plan)
        b.record_step(sizes, {(64, 0): 1.0e-3, (0, 64): 10e-3}.get(sizes, 1.2e-3) * 64)
    assert probed and probed[0] >= 128 and len(probed) <= 3, probed


def test_a_split_that_keeps_losing_is_probed_ever_more_rarely():
    b = ThroughputBalancer(2, probe_every=2, probe_limit=3.0)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])   # 1 ms / sample alone
    b.calibrate(1, [(16, 0.032), (64, 0.128)])   # 2 ms / sample alone
    probes: dict[tuple, list[int]] = {}
    for plan in range(1, 301):
        sizes = tuple(b.plan(64))
        if sizes != (64, 0):
            probes.setdefault(sizes, []).append(plan)
        b.record_step(sizes, (1.0e-3 if sizes == (64, 0) else 1.5e-3) * 64)  # others lose
    # Without backoff: a probe every 2 plans, 150 in all. With it, each losing candidate's
    # gaps double per loss (2, 4, ..., 128 plans, then stay at 128).
    assert sum(len(v) for v in probes.values()) <= 20, probes
    assert len(probes) == 2 and all(len(v) >= 4 for v in probes.values()), probes
    for plans in probes.values():
        gaps = [later - earlier for earlier, later in zip(plans, plans[1:])]
        assert gaps == sorted(gaps) and gaps[-1] >= 64, plans
    assert b.losses["0,1"] >= 5 and b.losses["1"] >= 5


def test_a_probe_that_wins_resets_the_backoff():
    b = ThroughputBalancer(2, probe_every=2)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])
    b.calibrate(1, [(16, 0.032), (64, 0.128)])
    pair_cost = [1.5e-3]
    chosen = []
    for plan in range(120):
        if plan == 60:
            pair_cost[0] = 0.5e-3  # the machine changes: the pair becomes the fastest
        sizes = tuple(b.plan(64))
        chosen.append(sizes)
        b.record_step(sizes, (1.0e-3 if sizes == (64, 0) else 2.0e-3 if sizes == (0, 64) else pair_cost[0]) * 64)
    pair = chosen[0]
    assert pair not in ((64, 0), (0, 64))
    assert chosen[-20:].count(pair) >= 17        # found at its next probe, and kept
    assert b.losses[b._key([0, 1])] == 0


def _run_plans(b: ThroughputBalancer, plans: int, seconds_per_sample) -> list[tuple[str, bool]]:
    """Runs `plans` plans of a batch of 64, one recorded step each, the step taking
    seconds_per_sample(plan, device set) per sample; returns (device set, rechecking) per plan."""
    chosen = []
    for plan in range(plans):
        sizes = b.plan(64)
        key = b._key(i for i, n in enumerate(sizes) if n > 0)
        chosen.append((key, b.rechecking))
        b.record_step(sizes, seconds_per_sample(plan, key) * 64)
    return chosen


def test_a_set_that_loses_its_place_to_a_slow_spell_is_rechecked_at_the_next_plan():
    """A host slow spell inflates the record of whatever runs (fl:1 alone), a stale record of
    the pair displaces it; the next plan runs fl:1 alone once more, not the probe clock's turn
    many plans later, and it wins its place back."""
    b = ThroughputBalancer(2, ema=0.5, probe_every=50)
    b.calibrate(0, [(16, 0.04), (64, 0.16)])     # 2.5 ms / sample alone: over probe_limit² x any best
    b.calibrate(1, [(16, 0.0064), (64, 0.0256)])  # 0.4 ms / sample alone
    b.measured["0,1"] = 0.5e-3                   # the pair, measured once long ago
    b.last_seen["0,1"] = 0
    normal = {"1": 0.4e-3, "0,1": 0.5e-3, "0": 2.5e-3}
    spell = {"1": 0.7e-3, "0,1": 0.55e-3, "0": 2.8e-3}  # a split is hit less by a spell
    chosen = _run_plans(b, 12, lambda plan, key: (spell if plan in (3, 4) else normal)[key])
    keys = [k for k, _ in chosen]
    assert keys[:4] == ["1"] * 4
    assert keys[4] == "0,1"                       # the spell's step lifted fl:1's record past the pair's
    assert chosen[5] == ("1", True)               # rechecked at the next plan (the spell is over)...
    assert keys[6:] == ["1"] * 6                  # ...won, and kept
    assert b.measured["1"] == pytest.approx(0.4e-3)
    assert b.losses.get("1", 0) == 0
    rechecks = [e for e in b.history if e.get("recheck")]
    assert [e["chose"] for e in rechecks] == ["1"]


def test_one_step_far_slower_than_normal_does_not_exile_the_fastest_device():
    """One step of fl:1 alone 80x slower than normal (a page-in, a driver hiccup) lifts its
    record far past the probe limit. It was the best when it took its place, so it is
    rechecked at the next plan, wins, and keeps its place; it does not wait the longest probe
    interval (probe_every·64 plans) while the slower pair runs."""
    b = ThroughputBalancer(2, ema=0.5, probe_every=5)
    b.calibrate(0, [(16, 0.04), (64, 0.16)])     # 2.5 ms / sample alone
    b.calibrate(1, [(16, 0.0064), (64, 0.0256)])  # 0.4 ms / sample alone
    b.measured["0,1"] = 0.5e-3
    b.last_seen["0,1"] = 0
    chosen = _run_plans(b, 12, lambda plan, key: {"1": 32e-3 if plan == 3 else 0.4e-3,
                                                  "0,1": 0.5e-3, "0": 2.5e-3}[key])
    keys = [k for k, _ in chosen]
    assert keys[:4] == ["1"] * 4
    assert keys[4] == "0,1"                       # the hiccup's record (16.2 ms) is far past the pair's
    assert chosen[5] == ("1", True)               # rechecked at the next plan all the same...
    assert keys[6:].count("1") >= 5               # ...won, and kept (the probe clock may run the pair once)
    assert b.measured["1"] == pytest.approx(0.4e-3)


def test_a_set_known_only_from_calibration_runs_once_when_the_best_has_run():
    """Calibrated passes can be far off (cold caches, no optimizer step): a device alone whose
    record is only its calibration's is probed at the first counted plan after the best set
    ran for real, not the probe clock's turn; if it is faster it takes over at once."""
    b = ThroughputBalancer(2, probe_every=50)
    b.calibrate(0, [(16, 0.04), (64, 0.16)])      # 2.5 ms / sample alone
    b.calibrate(1, [(16, 0.016), (64, 0.064)])    # 1.0 ms / sample calibrated, 0.4 for real
    real = {"1": 0.4e-3, "0,1": 0.6e-3, "0": 2.5e-3}
    chosen = _run_plans(b, 8, lambda plan, key: real[key])
    assert chosen[0] == ("0,1", False)            # the model's split, never measured
    assert chosen[1] == ("1", True)               # then fl:1 alone, whose record was a calibration
    assert [k for k, _ in chosen[2:]] == ["1"] * 6
    assert "0" not in [k for k, _ in chosen]       # far slower than the best: not probed early


def test_a_calibration_off_by_more_than_the_probe_limit_is_still_probed_early():
    """fl:1 alone calibrated 3x slower than it runs (over probe_limit = 2 times the split's
    record, under its square): probed once early all the same, its first real step replaces
    the calibrated record, and it takes over."""
    b = ThroughputBalancer(2, probe_every=50, probe_limit=2.0)
    b.calibrate(0, [(16, 0.08), (64, 0.32)])      # 5 ms / sample alone: beyond probe_limit², never probed
    b.calibrate(1, [(16, 0.024), (64, 0.096)])    # 1.5 ms / sample calibrated, 0.5 for real
    real = {"1": 0.5e-3, "0,1": 0.6e-3, "0": 5e-3}
    chosen = [key for key, _ in _run_plans(b, 6, lambda plan, key: real[key])]
    assert chosen == ["0,1", "1", "1", "1", "1", "1"]
    assert b.measured["1"] == pytest.approx(0.5e-3)   # replaced, not averaged with 1.5e-3


def test_the_early_probe_of_a_calibrated_set_fires_once_even_if_its_step_is_not_recorded():
    """A probe at a shape new to a device is a warm-up, not recorded (HeteroDataParallel): the
    set stays calibration-only, but it is not probed early again (that ran a CPU alone for
    many steps in a row when batch sizes varied)."""
    b = ThroughputBalancer(2, probe_every=50)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])    # 1 ms / sample
    b.calibrate(1, [(16, 0.048), (64, 0.192)])    # 3 ms / sample: under probe_limit² x the best
    b.last_seen["0"] = 0                          # fl:0 alone has run
    early = []
    for plan in range(6):
        sizes = b.plan(64)
        if sizes == [0, 64]:
            early.append(plan)
            continue                              # a warm-up: nothing recorded
        b.record_step(sizes, 1e-3 * 64 if sizes == [64, 0] else 0.9e-3 * 64)
    assert len(early) == 1, early


def test_a_first_real_step_slower_than_the_calibration_is_averaged_faster_replaces():
    b = ThroughputBalancer(2, ema=0.3)
    b.calibrate(0, [(16, 0.016), (64, 0.064)])    # 1 ms / sample calibrated
    b.calibrate(1, [(16, 0.016), (64, 0.064)])
    b.record_step([64, 0], 3e-3 * 64)             # one-off costs in the first step: averaged
    assert b.measured["0"] == pytest.approx(0.7 * 1e-3 + 0.3 * 3e-3)
    b.record_step([0, 64], 0.4e-3 * 64)           # the calibration was pessimistic: replaced
    assert b.measured["1"] == pytest.approx(0.4e-3)


def test_a_split_that_took_its_place_unmeasured_is_rechecked_after_a_spell():
    """The model's split runs first with no record; its first record counts as the one it took
    the place with, so a spell that lifts it past fl:1 alone is rechecked too."""
    b = ThroughputBalancer(2, ema=0.5, probe_every=50)
    b.calibrate(0, [(16, 0.0128), (64, 0.0512)])  # 0.8 ms / sample alone
    b.calibrate(1, [(16, 0.0128), (64, 0.0512)])  # 0.8 ms / sample alone
    b.last_seen.update({"0": 0, "1": 0})          # both ran before (their records are real)
    # The spell (plans 2 and 3) hits the split hard; fl:1 alone would not be.
    chosen = _run_plans(b, 10, lambda plan, key: {"0,1": 1.6e-3 if plan in (2, 3) else 0.5e-3,
                                                  "0": 0.8e-3, "1": 0.8e-3}[key])
    keys = [k for k, _ in chosen]
    assert keys[:3] == ["0,1"] * 3
    assert keys[3] in ("0", "1")                  # the spell lifted the split's record past them
    assert ("0,1", True) in chosen[4:6]           # rechecked...
    assert keys[-3:] == ["0,1"] * 3               # ...and back


def test_balancer_state_round_trips_a_pending_recheck():
    b = ThroughputBalancer(2, ema=0.5, probe_every=50)
    b.calibrate(0, [(16, 0.04), (64, 0.16)])
    b.calibrate(1, [(16, 0.0064), (64, 0.0256)])
    b.measured["0,1"] = 0.5e-3
    b.last_seen["0,1"] = 0
    for plan in range(5):
        sizes = b.plan(64)
        b.record_step(sizes, (0.7e-3 if plan == 3 else 0.4e-3) * 64 if sizes[0] == 0 else 0.55e-3 * 64)
    assert b.recheck == {"1"}                     # lost its place at plan 5, not yet rechecked
    c = ThroughputBalancer(2)
    c.load_state_dict(b.state_dict())
    assert c.state_dict() == b.state_dict()
    assert c.plan(64) == b.plan(64) == [0, 64] and c.rechecking and b.rechecking
    old = b.state_dict()
    for k in ("incumbent", "incumbent_record", "recheck"):
        del old[k]
    d = ThroughputBalancer(2)
    d.load_state_dict(old)                        # a checkpoint from before the recheck loads
    assert d.incumbent is None and d.recheck == set()


def test_a_recheck_that_loses_is_averaged_in_without_backoff():
    b = ThroughputBalancer(2, ema=0.5, probe_every=50)
    b.calibrate(0, [(16, 0.04), (64, 0.16)])
    b.calibrate(1, [(16, 0.0064), (64, 0.0256)])
    b.measured["0,1"] = 0.5e-3
    b.last_seen["0,1"] = 0
    # From plan 3 on fl:1 alone really is slower: the pair wins for good.
    chosen = _run_plans(b, 10, lambda plan, key: {"1": 0.7e-3 if plan >= 3 else 0.4e-3,
                                                  "0,1": 0.5e-3, "0": 2.5e-3}[key])
    assert [k for k, _ in chosen].count("1") == 5  # plans 0-3, and one recheck
    assert sum(1 for _, r in chosen if r) == 1
    assert chosen[-3:] == [("0,1", False)] * 3
    assert b.losses.get("1", 0) == 0


def test_beaten_compares_with_the_other_candidates_of_the_last_plan():
    b = ThroughputBalancer(2)
    b.calibrate(0, [(64, 0.064), (16, 0.016)])  # records: '0' 1e-3 s per sample...
    b.calibrate(1, [(64, 0.032), (16, 0.008)])  # ...'1' 0.5e-3
    b.plan(64)
    b.measured["0,1"] = 0.8e-3
    assert b.beaten([32, 32])      # slower than fl:1 alone
    assert not b.beaten([0, 64])   # fl:1 alone is the best record
    b.measured["0,1"] = 0.4e-3
    assert not b.beaten([32, 32])
    assert b.beaten([0, 64])


def test_split_granularity():
    b = ThroughputBalancer(3)
    for i, ms in enumerate((1.0, 2.0, 3.0)):
        b.calibrate(i, [(64, 0.064 * ms), (256, 0.256 * ms)])
    sizes = b.split(1000, granularity=64)
    assert sum(sizes) == 1000
    assert sum(1 for n in sizes if n % 64) <= 1    # one device takes the remainder
    assert sizes[0] > sizes[1] > sizes[2] > 0
    fine = b.split(1000)                          # granularity 1: proportional to speed
    assert sum(fine) == 1000
    assert all(abs(n - 1000 * w / (11 / 6)) <= 1 for n, w in zip(fine, (1, 1 / 2, 1 / 3))), fine


def test_balancer_state_round_trips():
    b = ThroughputBalancer(3, ema=0.2)
    for i in range(3):
        b.calibrate(i, [(4, 0.01 * (i + 1)), (8, 0.03 * (i + 1))], transfer_s=0.001 * i)
    b.observe([4, 4, 4], [0.02, 0.05, 0.1])
    c = ThroughputBalancer(3)
    c.load_state_dict(b.state_dict())
    assert c.state_dict() == b.state_dict()
    assert c.split(101) == b.split(101)
    with pytest.raises(ValueError):
        ThroughputBalancer(2).load_state_dict(b.state_dict())


# ---- HeteroDataParallel on fl:0 + fl:1 --------------------------------------------------


def _bn_mlp(dtype=torch.float64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).to(dtype)


def _model(dtype, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4)).to(dtype)


def _data(dtype, steps, batch, seed=1):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(batch, 12, generator=g, dtype=dtype) for _ in range(steps)]
    ys = [torch.randint(0, 4, (batch,), generator=g) for _ in range(steps)]
    return xs, ys


def _optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _single_device_run(dtype, xs, ys, device="fl:0"):
    model = _model(dtype).to(device)
    opt = _optimizer(model.parameters())
    for x, y in zip(xs, ys):
        opt.zero_grad()
        F.cross_entropy(model(x.to(device)), y.to(device)).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("split", [None, [3, 1]], ids=["measured", "fixed3to1"])
def test_hetero_equals_single_device_big_batch(dtype, atol, split):
    xs, ys = _data(dtype, steps=6, batch=40)
    expected = _single_device_run(dtype, xs, ys)
    hdp = HeteroDataParallel(_model(dtype), ["fl:0", "fl:1"], _optimizer, split=split,
                             rebalance_every=2, debug=True)
    try:
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
        assert sum(hdp.last_shards) == 40
        if split is not None:
            assert hdp.last_shards == [30, 10]
        got = [p.detach().cpu() for p in hdp.module.parameters()]
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=0, atol=atol)
        # debug=True asserted before every step that the computing replicas held the
        # master's bits. Both devices are the CPU plugin's, so the replica that computed the
        # last step was sent the new weights right after it (a replica of another plugin is
        # updated when it next runs); broadcast() brings every replica up to date.
        master = hdp.devices.index(hdp.reduce_device)
        assert hdp.replicas[master] is hdp.module
        assert all(p.device == hdp.reduce_device for p in hdp.module.parameters())
        assert hdp._push_after_step == (1 - master,)
        assert hdp._stale == (set() if hdp.last_shards[1 - master] > 0 else {1 - master})
        hdp.broadcast()
        for p0, p1 in zip(hdp.replicas[0].parameters(), hdp.replicas[1].parameters()):
            assert p0.device == torch.device("fl:0") and p1.device == torch.device("fl:1")
            assert torch.equal(p0.detach().cpu(), p1.detach().cpu())
    finally:
        hdp.close()


@pytest.mark.parametrize("master_timed", [True, False], ids=["master_timed_by_events", "master_waited"])
def test_split_steps_on_a_stream_of_its_own_equal_the_big_batch(master_timed):
    """The step's thread may run on a stream of its own on the master's device: the master's
    shard, the gradients the other replica's thread sends, and their sums all queue on it. The
    master's shard is either timed by events (not waited for) or, on a plugin that cannot time
    events, waited for like the others; both give the big-batch result and a time per device."""
    xs, ys = _data(torch.float64, steps=4, batch=40)
    expected = _single_device_run(torch.float64, xs, ys)
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "fl:1"], _optimizer, split=[1, 1], debug=True)
    assert hdp.reduce_device == torch.device("fl:0") and hdp._master_times_with_events  # the CPU plugin times
    hdp._master_times_with_events = master_timed
    try:
        with torch.fl.stream(torch.Stream(device="fl:0")):
            for x, y in zip(xs, ys):
                hdp.train_step(x, y, F.cross_entropy)
            assert torch.fl.current_stream(0).stream_id != 0
        assert hdp.last_shards == [20, 20]
        assert all(s is not None and s > 0 for s in hdp.last_device_seconds)
        for g, e in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_a_host_replica_waits_for_a_batch_still_computed_on_fl():
    """A replica on the native CPU beside fl:0, fed a batch that fl:0 is still computing when
    the step starts (queued behind half a second of products): the host's shard is copied back
    blocking, since nothing on the host would wait for a copy left queued on fl:0; the step
    equals the big batch."""
    xs, ys = _data(torch.float64, steps=2, batch=40)
    expected = _single_device_run(torch.float64, xs, ys, device="cpu")
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "cpu"], _optimizer, split=[1, 1])
    try:
        for x, y in zip(xs, ys):
            x_fl, y_fl = x.to("fl:0"), y.to("fl:0")  # (a copy from pageable memory waits here)
            a = torch.full((1536, 1536), 1e-3, device="fl:0")
            for _ in range(4):
                a = a @ a  # queued on fl:0's stream thread
            batch = x_fl + a[0, 0] * 0.0  # ready only once the products ran
            hdp.train_step(batch, y_fl, F.cross_entropy)
        assert hdp.last_shards == [20, 20]
        for g, e in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_calibration_makes_the_fastest_device_the_reduction_device(monkeypatch):
    xs, ys = _data(torch.float64, steps=4, batch=32)
    expected = _single_device_run(torch.float64, xs, ys)
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "fl:1"], _optimizer, debug=True)
    run_shard = hdp._run_shard

    def fl0_is_slow(index, *args, **kwargs):  # fl:0 measures 20 ms slower than fl:1
        loss, seconds = run_shard(index, *args, **kwargs)
        if index == 0 and seconds is not None:
            time.sleep(0.02)
            seconds += 0.02
        return loss, seconds

    monkeypatch.setattr(hdp, "_run_shard", fl0_is_slow)
    try:
        assert hdp.reduce_device == torch.device("fl:0")  # until calibrated
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.reduce_device == torch.device("fl:1")
        assert hdp.replicas[1] is hdp.module and hdp.replicas[0] is not hdp.module
        assert all(p.device == torch.device("fl:0") for p in hdp.replicas[0].parameters())
        assert all(p.device == torch.device("fl:1") for p in hdp.module.parameters())
        # The optimizer still steps the master's parameters (the same Parameter objects),
        # with its momentum buffers beside them.
        opt_params = [p for g in hdp.optimizer.param_groups for p in g["params"]]
        assert all(a is b for a, b in zip(opt_params, hdp.module.parameters()))
        for st in hdp.optimizer.state.values():
            assert st["momentum_buffer"].device == torch.device("fl:1")
        for g, e in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
        assert hdp.state_dict()["reduce_device"] == "fl:1"
    finally:
        hdp.close()


def test_calibration_times_copying_devices_on_the_callers_batch_and_in_place_ones_on_a_copy(monkeypatch):
    """A device that copies its shard is timed on the caller's batch, pinned as it is (a clone
    would be pageable: an H200 was calibrated at half its real speed); a device that reads the
    batch in place is timed on a copy, so a model writing its inputs leaves the batch alone."""
    xs, ys = _data(torch.float64, steps=1, batch=40)
    x, y = xs[0].pin_memory(), ys[0].pin_memory()
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "fl:1"], _optimizer)
    try:
        hdp._in_place_from_host = [True, False]  # fl:0 reads host batches in place, fl:1 copies
        seen: dict[int, list[torch.Tensor]] = {0: [], 1: []}
        run_shard = hdp._run_shard

        def spy(index, inputs, targets, *args, **kwargs):
            seen[index].append(inputs)
            return run_shard(index, inputs, targets, *args, **kwargs)

        monkeypatch.setattr(hdp, "_run_shard", spy)
        hdp.calibrate(x, y, F.cross_entropy)
        storage = x.untyped_storage().data_ptr()
        assert seen[0] and seen[1]
        assert all(t.untyped_storage().data_ptr() == storage and t.is_pinned() for t in seen[1])
        assert all(t.untyped_storage().data_ptr() != storage for t in seen[0])
        assert {t.shape[0] for t in seen[1]} == {10, 40}
    finally:
        hdp.close()


def test_the_master_alone_is_timed_before_each_rebalance_and_corrects_its_slowdown(monkeypatch):
    """When the master computes alone, the step before each re-balance times its shard with
    events and folds it into its slowdown (the other steps are not timed), so that a split
    planned later starts from the master's real speed, not only its calibration's."""
    xs, ys = _data(torch.float64, steps=9, batch=40)
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "fl:1"], _optimizer, rebalance_every=4)
    try:
        hdp.train_step(xs[0], ys[0], F.cross_entropy)  # calibration and a first step
        master = hdp._master_index
        assert hdp._master_times_with_events  # the CPU plugin times events
        alone = [0, 0]
        alone[master] = 40
        monkeypatch.setattr(hdp.balancer, "plan", lambda *args, **kwargs: list(alone))
        hdp.balancer.probing = False
        hdp.schedule.forget()
        hdp.balancer.slowdown[master] = 50.0  # as if its calibration had been far off
        changed = []
        for x, y in zip(xs[1:], ys[1:]):
            step, before = hdp.steps, hdp.balancer.slowdown[master]
            hdp.train_step(x, y, F.cross_entropy)
            assert hdp.last_shards == alone
            if hdp.balancer.slowdown[master] != before:
                changed.append(step)
        assert changed == [3, 7]  # (step + 1) % rebalance_every == 0
        assert hdp.balancer.slowdown[master] < 50.0 * (1 - hdp.balancer.ema) + 1e-9
        assert hdp.last_device_seconds[master] is None  # step 8, the last, was not timed
    finally:
        hdp.close()


def test_a_reduction_device_outside_the_training_devices():
    """The master on a device that computes no shard (here the host): every training device
    holds a replica, gradients meet on the master, results equal the big-batch run."""
    xs, ys = _data(torch.float64, steps=3, batch=32)
    expected = _single_device_run(torch.float64, xs, ys, device="cpu")
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "fl:1"], _optimizer, reduce_device="cpu",
                             split=[1, 1], debug=True)
    try:
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.last_shards == [16, 16] and hdp.module.training is True
        for g, e in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_returned_loss_is_the_big_batch_mean():
    xs, ys = _data(torch.float64, steps=1, batch=30)
    model = _model(torch.float64)
    with torch.no_grad():
        expected = F.cross_entropy(model(xs[0]), ys[0]).item()
    hdp = HeteroDataParallel(model, ["fl:0", "fl:1"], _optimizer, split=[2, 1])
    try:
        assert hdp.train_step(xs[0], ys[0], F.cross_entropy) == pytest.approx(expected, abs=1e-12)
    finally:
        hdp.close()


Record = collections.namedtuple("Record", "features mask scale")


class _RecordModel(nn.Module):
    """Takes a namedtuple batch as one argument, as nn.DataParallel passes it: a tensor of
    features, a per-row mask, and a float that every shard must receive as it is."""

    def __init__(self, dtype):
        super().__init__()
        self.net = _model(dtype)

    def forward(self, record: Record) -> torch.Tensor:
        assert isinstance(record, Record) and record.scale == 0.5
        return self.net(record.features * record.mask * record.scale)


@pytest.mark.parametrize("split", [[1, 1], [3, 1]], ids=["fixed1to1", "fixed3to1"])
def test_a_namedtuple_batch_is_split_along_its_tensors_and_equals_the_big_batch(split):
    xs, ys = _data(torch.float64, steps=4, batch=40)
    g = torch.Generator().manual_seed(7)
    masks = [(torch.rand(40, 1, generator=g) > 0.2).double() for _ in xs]
    torch.manual_seed(0)
    reference = _RecordModel(torch.float64).to("fl:0")
    opt = _optimizer(reference.parameters())
    for x, m, y in zip(xs, masks, ys):
        opt.zero_grad()
        F.cross_entropy(reference(Record(x.to("fl:0"), m.to("fl:0"), 0.5)), y.to("fl:0")).backward()
        opt.step()
    torch.manual_seed(0)
    hdp = HeteroDataParallel(_RecordModel(torch.float64), ["fl:0", "fl:1"], _optimizer, split=split,
                             rebalance_every=2, debug=True)
    try:
        for x, m, y in zip(xs, masks, ys):
            # the targets as a dict, to a loss that reads it
            hdp.train_step(Record(x, m, 0.5), {"label": y}, lambda out, t: F.cross_entropy(out, t["label"]))
        assert hdp.last_shards == ([20, 20] if split == [1, 1] else [30, 10])  # every step split
        for got, want in zip(hdp.module.parameters(), reference.parameters()):
            torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_batch_containers_of_any_subclass_are_split_and_moved():
    """Subclasses of dict and list (which torch.utils._pytree would take for leaves) are
    followed and keep their type; a 0-dimensional tensor and a string go to every shard
    whole; tensors move with their container."""
    from torch_fl.parallel import _batch_size, _split_batch, _to

    class Fields(dict):
        pass

    class Rows(list):
        pass

    rows = torch.arange(40.0).view(20, 2)
    temperature = torch.tensor(0.5)
    batch = {"x": rows, "extra": Fields(w=torch.arange(20.0)), "rows": Rows([rows, 3]),
             "temperature": temperature, "tag": "a"}
    assert _batch_size(batch) == 20
    first, second = _split_batch(batch, [15, 5])
    assert type(first["extra"]) is Fields and type(second["rows"]) is Rows
    assert torch.equal(first["extra"]["w"], torch.arange(15.0)) and second["rows"][0].shape == (5, 2)
    assert second["rows"][1] == 3 and first["temperature"] is temperature and second["tag"] == "a"
    moved = _to(second, torch.device("fl:1"))
    assert type(moved["extra"]) is Fields and moved["tag"] == "a"
    assert moved["extra"]["w"].device == moved["temperature"].device == torch.device("fl:1")
    assert torch.equal(moved["extra"]["w"].cpu(), torch.arange(15.0, 20.0))


@dataclasses.dataclass
class _Sample:
    features: torch.Tensor
    mask: torch.Tensor
    scale: float = 0.5
    rows: int = dataclasses.field(init=False)  # derived: __post_init__ computes it per shard

    def __post_init__(self):
        self.rows = len(self.features)


def test_a_dataclass_batch_is_split_along_its_fields_and_equals_the_big_batch():
    """A dataclass (a common batch type, taken whole by torch.utils._pytree) is split field by
    field and rebuilt with its constructor, so derived fields follow the shard."""
    from torch_fl.parallel import _split_batch

    first, second = _split_batch(_Sample(torch.arange(20.0).view(10, 2), torch.ones(10, 1)), [7, 3])
    assert type(first) is _Sample and (first.rows, second.rows) == (7, 3) and second.scale == 0.5
    assert torch.equal(second.features, torch.arange(14.0, 20.0).view(3, 2))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _model(torch.float64)

        def forward(self, sample: _Sample) -> torch.Tensor:
            assert isinstance(sample, _Sample) and sample.rows == len(sample.mask)
            return self.net(sample.features * sample.mask * sample.scale)

    xs, ys = _data(torch.float64, steps=3, batch=40)
    g = torch.Generator().manual_seed(7)
    masks = [(torch.rand(40, 1, generator=g) > 0.2).double() for _ in xs]
    torch.manual_seed(0)
    reference = Model().to("fl:0")
    opt = _optimizer(reference.parameters())
    for x, m, y in zip(xs, masks, ys):
        opt.zero_grad()
        F.cross_entropy(reference(_Sample(x.to("fl:0"), m.to("fl:0"))), y.to("fl:0")).backward()
        opt.step()
    torch.manual_seed(0)
    hdp = HeteroDataParallel(Model(), ["fl:0", "fl:1"], _optimizer, split=[3, 1])
    try:
        for x, m, y in zip(xs, masks, ys):
            hdp.train_step(_Sample(x, m), y, F.cross_entropy)
        assert hdp.last_shards == [30, 10]
        for got, want in zip(hdp.module.parameters(), reference.parameters()):
            torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_a_dataclass_that_cannot_be_rebuilt_per_shard_is_refused_clearly():
    from torch_fl.parallel import _split_batch

    @dataclasses.dataclass
    class WithInitVar:
        features: torch.Tensor
        scale: dataclasses.InitVar[float]

        def __post_init__(self, scale):
            self.factor = scale

    with pytest.raises(TypeError, match="cannot rebuild a WithInitVar per shard"):
        _split_batch(WithInitVar(torch.zeros(4, 2), 0.5), [2, 2])


@pytest.mark.parametrize("split", [None, [1, 1]], ids=["measured", "fixed"])
def test_targets_may_be_none_when_the_loss_needs_only_the_output(split):
    xs, _ = _data(torch.float64, steps=2, batch=40)
    reference = _model(torch.float64).to("fl:0")
    opt = _optimizer(reference.parameters())
    for x in xs:
        opt.zero_grad()
        reference(x.to("fl:0")).pow(2).mean().backward()
        opt.step()
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "fl:1"], _optimizer, split=split)
    try:
        for x in xs:
            hdp.train_step(x, None, lambda out, _: out.pow(2).mean())
        for got, want in zip(hdp.module.parameters(), reference.parameters()):
            torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_a_batch_whose_tensors_disagree_on_its_size_is_refused_and_changes_nothing():
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "fl:1"], _optimizer, split=[1, 1])
    try:
        before = [p.detach().cpu().clone() for p in hdp.module.parameters()]
        x = torch.randn(40, 12, dtype=torch.float64)
        with pytest.raises(ValueError, match=r"targets' batch size \(39\) differs from the inputs' \(40\)"):
            hdp.train_step(x, torch.zeros(39, dtype=torch.long), F.cross_entropy)
        with pytest.raises(ValueError, match=r"must have the batch's size there; got shapes \[\(40, 12\), \(8,\)\]"):
            hdp.train_step((x, torch.ones(8)), torch.zeros(40, dtype=torch.long), F.cross_entropy)
        with pytest.raises(TypeError, match="at least one tensor with a batch dimension .dim 0.; got str"):
            hdp.train_step("rows", torch.zeros(40, dtype=torch.long), F.cross_entropy)
        assert hdp.steps == 0
        for p, b in zip(hdp.module.parameters(), before):
            assert torch.equal(p.detach().cpu(), b)
    finally:
        hdp.close()


def test_buffers_are_broadcast_from_the_master():
    model = _bn_mlp(torch.float32)
    first_layer = copy.deepcopy(model[0])  # before the step changes it
    hdp = HeteroDataParallel(model, ["fl:0", "fl:1"], _optimizer, split=[1, 1], debug=True)
    try:
        x, y = torch.randn(16, 6), torch.randint(0, 2, (16,))
        hdp.train_step(x, y, F.cross_entropy)
        bn0, bn1 = hdp.replicas[0][1], hdp.replicas[1][1]
        assert int(bn0.num_batches_tracked.cpu()) == 1
        hdp.broadcast()  # replicas take the master's weights and buffers
        assert torch.equal(bn0.running_mean.cpu(), bn1.running_mean.cpu())
        # the master's statistics are those of its own shard (the first 8 rows)
        expected = 0.1 * first_layer(x[:8]).detach().mean(0)
        torch.testing.assert_close(bn0.running_mean.cpu(), expected, rtol=1e-5, atol=1e-6)
    finally:
        hdp.close()


def test_debug_mode_detects_diverged_replicas():
    hdp = HeteroDataParallel(_model(torch.float32), ["fl:0", "fl:1"], _optimizer, split=[1, 1])
    try:
        with torch.no_grad():
            next(hdp.replicas[1].parameters()).add_(1.0)
        with pytest.raises(AssertionError, match="fl:1"):
            hdp.assert_replicas_identical()
        hdp.broadcast()
        hdp.assert_replicas_identical()
    finally:
        hdp.close()


def test_debug_checks_are_left_out_of_the_balancers_step_times(monkeypatch):
    # debug=True checks the replicas before every step (copies of every tensor to the host);
    # the balancer's record of the split must not count that, or debug mode would split
    # differently than a run without it. Each comparison is slowed down here.
    xs, ys = _data(torch.float32, steps=4, batch=32)
    hdp = HeteroDataParallel(_model(torch.float32), ["fl:0", "fl:1"], _optimizer, debug=True, calibration_reps=1)
    comparisons, recorded = [], []
    equal, after_step = torch.equal, hdp.schedule.after_step

    def slow_equal(a, b):
        comparisons.append(1)
        time.sleep(0.05)  # 6 checks a step: 0.3 s, far above a step on a loaded 2-core machine (~0.05 s)
        return equal(a, b)

    def spy(batch, sizes, step_seconds, *rest):
        recorded.append(step_seconds)
        after_step(batch, sizes, step_seconds, *rest)

    hdp.schedule.after_step = spy
    try:
        hdp.train_step(xs[0], ys[0], F.cross_entropy)  # calibration, unslowed
        # Every step splits (both replicas compute, so both are checked), recorded as usual.
        monkeypatch.setattr(hdp.schedule, "sizes", lambda batch, step: [batch // 2, batch - batch // 2])
        monkeypatch.setattr(torch, "equal", slow_equal)
        recorded.clear()
        for x, y in zip(xs[1:], ys[1:]):
            hdp.train_step(x, y, F.cross_entropy)
        assert len(comparisons) >= 3 * 6 and len(recorded) == 3  # 6 tensors checked before each step
        assert max(recorded) < 0.2, recorded
    finally:
        hdp.close()


def test_a_replica_that_pulls_its_update_lazily_checks_identical_after_a_step():
    # A replica of another kind than the master (here the native CPU beside fl:0; on the H200
    # machine a CPU-plugin device beside a CUDA master) receives each update when it next
    # computes, so after a step it still holds the weights before it: the check compares the
    # state it computes from, not that lag.
    xs, ys = _data(torch.float32, steps=2, batch=16)
    hdp = HeteroDataParallel(_model(torch.float32), ["fl:0", "cpu"], _optimizer, split=[1, 1], reduce_device="fl:0")
    try:
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
        host = next(hdp.replicas[1].parameters())
        assert not torch.equal(host.detach(), next(hdp.module.parameters()).detach().cpu())  # the lag
        hdp.assert_replicas_identical()
        assert torch.equal(host.detach(), next(hdp.module.parameters()).detach().cpu())
    finally:
        hdp.close()


def test_checkpoint_resume_equals_uninterrupted_run():
    dtype = torch.float32
    xs, ys = _data(dtype, steps=6, batch=24)

    straight = HeteroDataParallel(_model(dtype), ["fl:0", "fl:1"], torch.optim.Adam, split=[2, 1])
    for x, y in zip(xs, ys):
        straight.train_step(x, y, F.cross_entropy)
    expected = [p.detach().cpu() for p in straight.module.parameters()]
    straight.close()

    first = HeteroDataParallel(_model(dtype), ["fl:0", "fl:1"], torch.optim.Adam, split=[2, 1])
    for x, y in zip(xs[:3], ys[:3]):
        first.train_step(x, y, F.cross_entropy)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    first.close()

    buffer.seek(0)
    resumed = HeteroDataParallel(_model(dtype, seed=123), ["fl:0", "fl:1"], torch.optim.Adam,
                                 split=[2, 1], debug=True)
    resumed.load_state_dict(torch.load(buffer, weights_only=False))
    assert resumed.steps == 3
    for x, y in zip(xs[3:], ys[3:]):
        resumed.train_step(x, y, F.cross_entropy)
    for g, e in zip((p.detach().cpu() for p in resumed.module.parameters()), expected):
        assert torch.equal(g, e)
    resumed.close()


def _state_after_two_steps(devices: list[str]) -> dict:
    """The state_dict of a HeteroDataParallel on `devices` after two training steps."""
    xs, ys = _data(torch.float32, steps=2, batch=32)
    hdp = HeteroDataParallel(_model(torch.float32), devices, _optimizer, calibration_reps=1)
    for x, y in zip(xs, ys):
        hdp.train_step(x, y, F.cross_entropy)
    state = hdp.state_dict()
    hdp.close()
    return state


def test_balancer_state_is_checkpointed():
    state = _state_after_two_steps(["fl:0", "fl:1"])
    # Two steps: both measured, or the first a warm-up of a new split (not measured).
    assert state["balancer"]["calibrated"] and state["balancer"]["observations"] in (1, 2)
    other = HeteroDataParallel(_model(torch.float32), ["fl:0", "fl:1"], _optimizer)
    other.load_state_dict(state)
    assert other.balancer.state_dict() == state["balancer"]
    assert other.balancer.calibrated  # a resumed run does not re-calibrate
    other.close()


def test_tail_window_reaches_the_balancer_and_a_rebuilt_one():
    """HeteroDataParallel(tail_window=0) turns the tail-aware split off; a checkpoint from other
    devices, which makes a fresh balancer, and one from the same devices both keep it off."""
    state = _state_after_two_steps(["fl:1", "fl:0"])
    for devices in (["fl:0", "fl:1"], ["fl:1", "fl:0"]):
        hdp = HeteroDataParallel(_model(torch.float32), devices, _optimizer, tail_window=0)
        assert hdp.balancer.tail_window == 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hdp.load_state_dict(state)
        assert hdp.balancer.tail_window == 0, devices
        hdp.close()


class _SlowOn(nn.Module):
    """Identity that sleeps on one device — a stand-in for a slower chip (sleep releases the
    GIL, as a device's kernels do)."""

    def __init__(self, device: str, fixed_s: float = 0.0, per_sample_s: float = 0.0):
        super().__init__()
        self.device, self.fixed_s, self.per_sample_s = torch.device(device), fixed_s, per_sample_s

    def forward(self, x):
        if x.device == self.device:
            time.sleep(self.fixed_s + self.per_sample_s * x.shape[0])
        return x


def _slow_model(**slow):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), _SlowOn("fl:1", **slow), nn.Tanh(), nn.Linear(16, 4))


def test_a_slower_device_gets_a_smaller_shard_and_results_stay_exact():
    xs, ys = _data(torch.float64, steps=4, batch=64)
    torch.manual_seed(0)
    reference = _slow_model().to(torch.float64).to("fl:0")
    opt = _optimizer(reference.parameters())
    for x, y in zip(xs, ys):
        opt.zero_grad()
        F.cross_entropy(reference(x.to("fl:0")), y.to("fl:0")).backward()
        opt.step()
    # fl:1 costs 2 ms per sample more than fl:0: it should get well under half of the batch
    hdp = HeteroDataParallel(_slow_model(per_sample_s=2e-3).to(torch.float64), ["fl:0", "fl:1"],
                             _optimizer, rebalance_every=1, calibration_reps=1)
    try:
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
        assert sum(hdp.last_shards) == 64
        assert hdp.last_shards[1] < 64 // 4, hdp.last_shards
        assert hdp.balancer.per_sample[1] > 1e-3
        for got, expected in zip(hdp.module.parameters(), reference.parameters()):
            torch.testing.assert_close(got.detach().cpu(), expected.detach().cpu(), rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_a_device_with_a_large_fixed_cost_sits_out():
    # The model never gives fl:1 rows; the pair is tried once (one granularity piece on fl:1:
    # a warm-up step, then the measured one), loses, and fl:0 runs alone again.
    xs, ys = _data(torch.float32, steps=8, batch=32)
    hdp = HeteroDataParallel(_slow_model(fixed_s=0.15), ["fl:0", "fl:1"], _optimizer,
                             rebalance_every=1, calibration_reps=1)
    try:
        shards = []
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
            shards.append(list(hdp.last_shards))
        assert hdp.balancer.overhead[1] > 0.1
        assert hdp.balancer.split(32) == [32, 0]
        with_fl1 = [s for s in shards if s[1] > 0]
        assert 1 <= len(with_fl1) <= 2 and all(s[1] == hdp.schedule.granularity_for(32) for s in with_fl1), shards
        assert shards[-3:] == [[32, 0]] * 3, shards
    finally:
        hdp.close()


class _InputPointers(nn.Module):
    """Wraps a model; records the device and data pointer of every input it is given."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.seen: list[tuple[torch.device, int]] = []

    def forward(self, x):
        self.seen.append((x.device, x.data_ptr()))
        return self.inner(x)


@pytest.mark.parametrize("zero_copy", [True, False], ids=["in_place", "copied"])
def test_a_host_memory_device_computes_on_its_shard_of_a_host_batch_in_place(zero_copy):
    xs, ys = _data(torch.float64, steps=4, batch=40)
    before = [x.clone() for x in xs]
    expected = _single_device_run(torch.float64, xs, ys)
    hdp = HeteroDataParallel(_InputPointers(_model(torch.float64)), ["fl:0", "fl:1"], _optimizer,
                             split=[1, 1], host_zero_copy=zero_copy)
    try:
        assert hdp._in_place_from_host == [zero_copy, zero_copy]
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
        got = [p.detach().cpu() for p in hdp.module.parameters()]
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
        shards = torch.split(xs[-1], hdp.last_shards)
        for k, replica in enumerate(hdp.replicas):
            device, pointer = replica.seen[-1]
            assert device == torch.device(f"fl:{k}")
            assert (pointer == shards[k].data_ptr()) == zero_copy
        for x, b in zip(xs, before):  # the caller's batches are left as they were
            assert torch.equal(x, b)
    finally:
        hdp.close()


class _ReluInputInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(12, 4, dtype=torch.float64)

    def forward(self, x):
        return self.lin(x.relu_())  # writes its input, as nn.ReLU(inplace=True) first would


@pytest.mark.parametrize("split", [None, [1, 1]], ids=["calibrated", "fixed"])
def test_a_model_writing_its_inputs_in_place_is_noticed_and_then_gets_copies(split):
    xs, ys = _data(torch.float64, steps=3, batch=40)
    before = [x.clone() for x in xs]
    hdp = HeteroDataParallel(_ReluInputInPlace(), ["fl:0", "fl:1"], _optimizer, split=split)
    try:
        with pytest.warns(UserWarning, match="wrote its inputs in place"):
            hdp.train_step(xs[0], ys[0], F.cross_entropy)
        assert hdp._in_place_from_host == [False, False]
        if split is None:  # calibration noticed it, on its copy of the batch
            assert torch.equal(xs[0], before[0])
        for x, y in zip(xs[1:], ys[1:]):
            hdp.train_step(x, y, F.cross_entropy)
        for x, b in zip(xs[1:], before[1:]):  # copies from then on: later batches untouched
            assert torch.equal(x, b)
    finally:
        hdp.close()


@pytest.mark.parametrize("zero_copy", [True, False], ids=["fl_in_place", "fl_copies"])
def test_calibration_leaves_the_callers_batch_alone_beside_a_native_cpu_device(zero_copy):
    """The native CPU's .to() does not copy: calibration times it on a copy of the batch, so a
    model writing its inputs in place does not change the caller's rows."""
    xs, ys = _data(torch.float64, steps=1, batch=40)
    before = xs[0].clone()
    hdp = HeteroDataParallel(_ReluInputInPlace(), ["fl:0", "cpu"], _optimizer, host_zero_copy=zero_copy)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the in-place fl device is noticed and warned about
            hdp.calibrate(xs[0], ys[0], F.cross_entropy)
        assert torch.equal(xs[0], before)
    finally:
        hdp.close()


def test_a_column_major_host_batch_gives_the_same_step_as_a_row_major_one():
    # In place, each device reads its shard with the batch's strides.
    xs, ys = _data(torch.float64, steps=3, batch=40)
    expected = _single_device_run(torch.float64, xs, ys)
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", "fl:1"], _optimizer, split=[3, 1])
    try:
        for x, y in zip(xs, ys):
            column_major = x.t().contiguous().t()
            assert not column_major.is_contiguous()
            hdp.train_step(column_major, y, F.cross_entropy)
        for g, e in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_two_plugins_only_a_device_taking_host_pointers_uses_the_batch_in_place():
    other = _device_of_another_plugin_or_skip()
    if torch.fl.get_device_properties(other)["host_pointers_usable"]:
        pytest.skip(f"{other} takes host pointers too")
    with pytest.raises(RuntimeError, match="cannot use host memory in place"):
        torch_fl._C.device_view_of_host(torch.ones(4), torch.device(other).index)
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", other], _optimizer, split=[1, 1])
    try:
        assert hdp._in_place_from_host == [True, False]
    finally:
        hdp.close()


def _device_of_another_plugin_or_skip() -> str:
    """A device of a plugin other than fl:0's; skips the test when the build has none (the
    template-plugin subprocess test below runs these tests where it has)."""
    devices = torch_fl.list_devices()
    others = [d["device"] for d in devices if d["plugin"] != devices[0]["plugin"]]
    if not others:
        pytest.skip("only one plugin has devices in this build")
    return others[0]


def test_a_probe_reuses_the_last_warm_split_of_its_device_set(monkeypatch):
    """Probing a device set with a split that would be a warm-up (new shapes) runs the set's
    last warm split instead: the probe measures the set, not cuDNN's plan building."""
    xs, ys = _data(torch.float32, steps=6, batch=64)
    hdp = HeteroDataParallel(_model(torch.float32), ["fl:0", "fl:1"], _optimizer, rebalance_every=1)
    plans = iter([([36, 28], False), ([36, 28], False), ([36, 28], False), ([40, 24], True), ([40, 24], True)])

    def plan(batch_size, granularity=1, count=True):
        sizes, hdp.balancer.probing = next(plans)
        return sizes

    try:
        hdp.train_step(xs[0], ys[0], F.cross_entropy)  # calibration
        monkeypatch.setattr(hdp.balancer, "plan", plan)
        hdp.train_step(xs[1], ys[1], F.cross_entropy)  # [36, 28] cold...
        hdp.train_step(xs[2], ys[2], F.cross_entropy)  # ...and its warm rerun
        hdp.train_step(xs[3], ys[3], F.cross_entropy)
        assert hdp.last_shards == [36, 28]
        hdp.train_step(xs[4], ys[4], F.cross_entropy)  # a probe of {0, 1} with new shapes
        assert hdp.last_shards == [36, 28]
        hdp.balancer.probing = False
    finally:
        hdp.close()


def test_a_step_with_a_new_shard_size_is_a_warm_up_and_runs_again():
    """A shard size a device has not run before costs cuDNN plans and allocator blocks once:
    that step is not measured, and the same split runs again to be measured warm."""
    xs, ys = _data(torch.float32, steps=6, batch=64)
    hdp = HeteroDataParallel(_model(torch.float32), ["fl:0", "fl:1"], _optimizer, rebalance_every=0)
    try:
        hdp.train_step(xs[0], ys[0], F.cross_entropy)  # calibrates at 64 and 16, then a step
        hdp.train_step(xs[1], ys[1], F.cross_entropy)  # (the first split's warm rerun, if cold)
        assert hdp.granularity is None and hdp.schedule.granularity_for(64) == 4
        observed = hdp.balancer.observations
        hdp.balancer.second_looks.add("0,1")  # its first measured step, if it loses, is not run a third time
        hdp.schedule.planned[64] = [36, 28]                  # a split neither device has run
        hdp.train_step(xs[2], ys[2], F.cross_entropy)
        assert hdp.last_shards == [36, 28]
        assert hdp.balancer.observations == observed    # the warm-up is not measured...
        hdp.schedule.planned[64] = [64, 0]
        hdp.train_step(xs[3], ys[3], F.cross_entropy)
        assert hdp.last_shards == [36, 28]              # ...the same split runs again, warm
        assert hdp.balancer.observations == observed + 1
        hdp.train_step(xs[4], ys[4], F.cross_entropy)
        assert hdp.last_shards == [64, 0]               # then the plan goes on
    finally:
        hdp.close()


def test_a_split_beaten_by_another_candidate_is_replanned_at_the_next_step(monkeypatch):
    """A split that measures slower than another candidate's record does not run on until the
    next re-balance: the next step plans again."""
    xs, ys = _data(torch.float32, steps=6, batch=64)
    hdp = HeteroDataParallel(_model(torch.float32), ["fl:0", "fl:1"], _optimizer, rebalance_every=100)
    try:
        monkeypatch.setattr(hdp.balancer, "beaten", lambda sizes: False)  # until the steps below
        hdp.train_step(xs[0], ys[0], F.cross_entropy)  # calibration, then the first plan...
        hdp.train_step(xs[1], ys[1], F.cross_entropy)  # ...and its warm rerun if it was cold
        planned = []

        def plan(batch_size, granularity=1, count=True):
            planned.append((batch_size, count))
            return [64, 0]                             # calibrated at 64: warm

        monkeypatch.setattr(hdp.balancer, "plan", plan)
        hdp.train_step(xs[2], ys[2], F.cross_entropy)
        assert planned == []                           # no re-balance due: the split stays
        monkeypatch.setattr(hdp.balancer, "beaten", lambda sizes: True)
        before = hdp.last_shards
        hdp.train_step(xs[3], ys[3], F.cross_entropy)  # measured, and beaten...
        assert planned == [] and hdp.last_shards == before
        monkeypatch.setattr(hdp.balancer, "beaten", lambda sizes: False)
        hdp.train_step(xs[4], ys[4], F.cross_entropy)  # ...so this step plans again, off the
        assert planned == [(64, False)] and hdp.last_shards == [64, 0]  # probe clock
        hdp.train_step(xs[5], ys[5], F.cross_entropy)  # (that split not beaten: it stays)
        monkeypatch.setattr(hdp.balancer, "beaten", lambda sizes: True)
        hdp.train_step(xs[5][:40], ys[5][:40], F.cross_entropy)  # a batch of another size and
        hdp.train_step(xs[5], ys[5], F.cross_entropy)  # the one after it are not compared
        assert [p for p in planned if p[0] == 64] == [(64, False)]
    finally:
        hdp.close()


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_two_plugins_equal_single_device_big_batch(dtype, atol):
    other = _device_of_another_plugin_or_skip()
    xs, ys = _data(dtype, steps=4, batch=40)
    expected = _single_device_run(dtype, xs, ys)
    hdp = HeteroDataParallel(_model(dtype), ["fl:0", other], _optimizer, split=[1, 1], debug=True)
    try:
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.last_shards == [20, 20]
        for g, e in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(g, e, rtol=0, atol=atol)
    finally:
        hdp.close()


def test_two_plugins_replicas_pull_weights_in_their_own_thread():
    """Without debug mode the replica of the other plugin pulls each update in its own thread,
    on a side stream of the master device (parameters, and the buffers as a snapshot taken
    behind the optimizer step): a pull that missed an update would make the result differ from
    the big batch's. (The step's loss read-back already waits for the optimizer step, so this
    cannot catch a missing event wait; it checks that the side-stream path copies the right
    tensors.)"""
    other = _device_of_another_plugin_or_skip()
    xs, ys = _data(torch.float64, steps=5, batch=40)
    expected = _single_device_run(torch.float64, xs, ys)
    hdp = HeteroDataParallel(_model(torch.float64), ["fl:0", other], _optimizer, split=[1, 1])
    try:
        for x, y in zip(xs, ys):
            hdp.train_step(x, y, F.cross_entropy)
        assert list(hdp._pull_streams) == [1]  # the replica's pulls went through its side stream
        for g, e in zip((p.detach().cpu() for p in hdp.module.parameters()), expected):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-12)
        hdp.broadcast()
        hdp.assert_replicas_identical()
    finally:
        hdp.close()


def test_two_plugins_replicas_pull_buffers_from_the_snapshot():
    """The replica of the other plugin takes the master's buffers as the optimizer step left
    them (a snapshot on the master's stream), then updates them with its own shard."""
    other = _device_of_another_plugin_or_skip()
    hdp = HeteroDataParallel(_bn_mlp(), ["fl:0", other], _optimizer, split=[1, 1])
    try:
        g = torch.Generator().manual_seed(1)
        x1, x2 = (torch.randn(16, 6, generator=g, dtype=torch.float64) for _ in range(2))
        y = torch.randint(0, 2, (16,), generator=g)
        hdp.train_step(x1, y, F.cross_entropy)
        master_mean = hdp.module[1].running_mean.cpu()
        w, b = hdp.module[0].weight.detach().cpu(), hdp.module[0].bias.detach().cpu()  # after step 1
        hdp.train_step(x2, y, F.cross_entropy)
        assert len(hdp._buffer_snapshot) == 3 and not hdp._side_pulls_ready
        expected = 0.9 * master_mean + 0.1 * F.linear(x2[8:], w, b).mean(0)
        torch.testing.assert_close(hdp.replicas[1][1].running_mean.cpu(), expected, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_two_plugins_master_alone_steps_take_no_snapshot():
    """Steps where the replica of the other plugin sits out record no event and copy no
    buffers: only a step with a side-stream pull prepares one."""
    other = _device_of_another_plugin_or_skip()
    hdp = HeteroDataParallel(_bn_mlp(), ["fl:0", other], _optimizer, split=[1, 0])
    try:
        x, y = torch.randn(16, 6, dtype=torch.float64), torch.randint(0, 2, (16,))
        for _ in range(3):
            hdp.train_step(x, y, F.cross_entropy)
        assert hdp.last_shards == [16, 0]
        assert hdp._weights_ready is None and hdp._buffer_snapshot == [] and not hdp._pull_streams
    finally:
        hdp.close()


def test_two_plugins_events_are_answered_by_their_own_device():
    """An event of one plugin's device, queried, synchronized or timed while another plugin's
    device is current, or waited on by another plugin's stream, reaches its own plugin (c10
    passes only the event; the current device's plugin cannot read another plugin's handle).
    Both directions: fl:0 (CPU plugin) events from the other plugin's side, and the other
    plugin's events from fl:0's side (the CPU plugin would misread a foreign handle)."""
    other = _device_of_another_plugin_or_skip()
    other_index = torch.device(other).index
    for mine, theirs in ((0, other_index), (other_index, 0)):
        torch.fl.set_device(mine)
        x = torch.randn(256, 256, dtype=torch.float64)
        xd = x.to(f"fl:{mine}")
        start = torch.Event(device=f"fl:{mine}", enable_timing=True)
        end = torch.Event(device=f"fl:{mine}", enable_timing=True)
        start.record(torch.fl.current_stream(mine))
        yd = xd @ xd
        end.record(torch.fl.current_stream(mine))
        torch.fl.set_device(theirs)
        try:
            end.synchronize()
            assert end.query() and start.query()
            assert start.elapsed_time(end) >= 0.0
            stream = torch.Stream(device=f"fl:{theirs}")
            stream.wait_event(end)  # another plugin's stream: the host waits for the event
            after = torch.Event(device=f"fl:{theirs}", enable_timing=True)
            after.record(stream)
            after.synchronize()
            assert after.query()
            with pytest.raises(RuntimeError, match="both events must be recorded on one device"):
                start.elapsed_time(after)
            torch.testing.assert_close(yd.cpu(), x @ x, rtol=0, atol=1e-9)
        finally:
            torch.fl.set_device(0)


def test_two_plugins_in_a_process_with_the_template_plugin(tmp_path):
    """The test above, run where it does not skip: the CPU plugin's fl:0 beside the template
    plugin's device (a second vendor's device, in host memory), in a fresh process."""
    from conftest import BUILD, run_python

    plugins = [BUILD / "plugins" / "cpu" / "libfl_cpu.so", BUILD / "plugins" / "template" / "libfl_template.so"]
    if not plugins[1].exists():
        pytest.skip("the template plugin is not in this build tree")
    config = tmp_path / "config.yaml"
    config.write_text("plugins:\n  enable: [cpu, template]\n")
    code = ("import sys, torch; sys.path.insert(0, %r); import test_parallel as t, torch_fl\n"
            "print([d['plugin'] for d in torch_fl.list_devices()])\n"
            "t.test_two_plugins_equal_single_device_big_batch(torch.float64, 1e-12)\n"
            "t.test_two_plugins_equal_single_device_big_batch(torch.float32, 1e-5)\n"
            "t.test_two_plugins_events_are_answered_by_their_own_device()\n"
            "t.test_two_plugins_replicas_pull_weights_in_their_own_thread()\n"
            "t.test_two_plugins_replicas_pull_buffers_from_the_snapshot()\n"
            "t.test_two_plugins_master_alone_steps_take_no_snapshot()\n"
            "t.test_two_plugins_only_a_device_taking_host_pointers_uses_the_batch_in_place()\n"
            "print('ok')") % str(Path(__file__).resolve().parent)
    r = run_python(code, env={"FL_CONFIG": str(config), "FL_CPU_DEVICES": "1",
                              "FL_PLUGIN_PATH": ":".join(str(p) for p in plugins)}, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "['cpu', 'template']" in r.stdout and r.stdout.strip().endswith("ok"), r.stdout


def test_the_step_timeline_records_where_each_multi_device_step_went():
    """HeteroDataParallel.timeline (opt-in) gets one record per step of more than one device,
    with marks in step order, and step_timeline_summary averages them per split."""
    from torch_fl.parallel import step_timeline_summary

    xs, ys = _data(torch.float32, steps=5, batch=40)
    hdp = HeteroDataParallel(_model(torch.float32), ["fl:0", "fl:1"], _optimizer, split=[1, 1])
    try:
        hdp.train_step(xs[0], ys[0], F.cross_entropy)  # before recording: not in the timeline
        hdp.timeline = []
        for x, y in zip(xs[1:], ys[1:]):
            hdp.train_step(x, y, F.cross_entropy)
        assert len(hdp.timeline) == 4
        for rec in hdp.timeline:
            assert rec["shards"] == [20, 20]
            for i, marks in rec["devices"].items():
                assert 0 < marks["dispatched"] <= marks["synced"]
                if i != hdp._master_index:  # waited for before the join (the master is timed
                    assert marks["synced"] <= rec["joined"]  # by events and not waited for)
                    # ... and it sent its gradients to the master itself, after its device was
                    # done and before the join.
                    assert marks["synced"] <= marks["shipping"] <= marks["shipped"] <= rec["joined"]
            assert rec["joined"] <= rec["reduced"] <= rec["optimizer"] <= rec["total"]
        summary = step_timeline_summary(hdp.timeline)
        assert list(summary) == ["[20, 20]"] and summary["[20, 20]"]["steps"] == 4
        mean_total = 1e3 * sum(r["total"] for r in hdp.timeline) / 4
        assert abs(summary["[20, 20]"]["total"] - mean_total) < 1e-3
        assert {"dev0_dispatched", "dev0_synced", "dev1_dispatched", "dev1_synced"} <= set(summary["[20, 20]"])
        replica = 1 - hdp._master_index
        assert {f"dev{replica}_shipping", f"dev{replica}_shipped"} <= set(summary["[20, 20]"])
        hdp.timeline = None
        hdp.train_step(xs[0], ys[0], F.cross_entropy)  # recording off again: no error, nothing kept
    finally:
        hdp.close()


def test_synchronize_device_waits_for_that_device_not_the_current_one():
    """synchronize_device(fl:1) with fl:0 current waits for fl:1's queued work (torch.Event's
    record() without a stream would record on the current device's stream)."""
    from torch_fl.parallel import synchronize_device

    torch.fl.set_device(0)
    a = torch.randn(1200, 1200, dtype=torch.float64, device="fl:1")
    torch.fl.synchronize(1)
    for _ in range(3):
        a = a @ a / 1200.0  # queued on fl:1's current stream: tens of ms on the CPU plugin
    queued = torch.Event(device="fl:1")
    queued.record(torch.fl.current_stream(1))
    synchronize_device(torch.device("fl:1"))
    # (The stream itself may hold more by now: the allocator's own bookkeeping.)
    assert queued.query()
    assert torch.fl.current_device() == 0


def test_the_balancer_logs_its_plans_and_recorded_steps():
    b = ThroughputBalancer(2, probe_every=5)
    b.calibrate(0, [(10, 1.0), (40, 4.0)])
    b.calibrate(1, [(10, 0.5), (40, 2.0)])
    sizes = b.plan(40)  # the model's split has no record yet: it runs
    assert all(n > 0 for n in sizes)
    b.record_step(sizes, 3.0)
    b.plan(40)
    plans = [e for e in b.history if "plan" in e]
    steps = [e for e in b.history if "step" in e]
    assert [e["plan"] for e in plans] == [1, 2]
    assert plans[0]["chose"] == "0,1" and plans[0]["records"] == {"0": 0.1, "1": 0.05}
    assert steps == [{"step": "0,1", "during_plan": 1, "s_per_sample": 3.0 / 40, "record": 3.0 / 40}]
    assert plans[1]["records"]["0,1"] == 3.0 / 40
    assert plans[1]["chose"] == "1" and not plans[1]["probing"]  # the best record: device 1 alone
    b.plan(40, count=False)  # a re-plan between re-balances is not logged
    assert len([e for e in b.history if "plan" in e]) == 2
