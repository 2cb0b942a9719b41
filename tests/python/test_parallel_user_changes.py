"""HeteroDataParallel at the edges of its API, on fl:0 + fl:1 of the CPU plugin: what the user
does to the master copy between steps (eval mode, unfreezing, in-place clipping) reaches the
replicas; autocast covers every shard; devices without an index, bad splits, a closed
instance, a calibration that raises, batches that require grad and a checkpoint of other
devices give either the right result or a clear error that changes nothing."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl  # noqa: F401  (registers the fl device)

from torch_fl.parallel import HeteroDataParallel


def _bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)).double()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def _batches(steps: int, batch: int = 16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (batch,), generator=g))
            for _ in range(steps)]


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def _trained_alone(model: nn.Module, device: str, batches, before_step=None) -> nn.Module:
    """The reference: `model` trained on `device` alone by a plain loop, one whole batch a step
    (`before_step(model)` between backward and step, as HeteroDataParallel's argument)."""
    model = model.to(device)
    optimizer = _sgd(model.parameters())
    for x, y in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(x.to(device)), y.to(device)).backward()
        if before_step is not None:
            before_step(model)
        optimizer.step()
    return model


def _reference_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    F.cross_entropy(model(x.to("fl:0")), y.to("fl:0")).backward()
    opt.step()


def _assert_same_parameters(a: nn.Module, b: nn.Module) -> None:
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("change", ["eval", "unfreeze", "clip_in_place"])
def test_changes_to_the_master_between_steps_reach_the_replicas(change):
    # Batch norm in train mode normalises each shard by its own statistics, so only a model
    # without it (or in eval mode) makes a split step exactly the big batch's step.
    make = _bn_model if change == "eval" else _mlp
    model, reference = make(), make().to("fl:0")
    if change == "unfreeze":  # frozen before wrapping; both optimizers hold it anyway
        model[0].weight.requires_grad_(False)
        reference[0].weight.requires_grad_(False)
    ref_opt = _sgd(reference.parameters())
    hdp = HeteroDataParallel(model, ["fl:0", "fl:1"], _sgd, split=[1, 1], reduce_device="fl:0")
    try:
        for k, (x, y) in enumerate(_batches(4)):
            if k == 1:  # after one step, the same change on the master and on the reference
                if change == "eval":
                    reference.load_state_dict(hdp.module.state_dict())  # the train-mode step as it ran
                    hdp.module.eval()
                    reference.eval()
                elif change == "unfreeze":
                    hdp.module[0].weight.requires_grad_(True)
                    reference[0].weight.requires_grad_(True)
            if change == "clip_in_place" and k > 0:
                for m in (hdp.module, reference):
                    with torch.no_grad():
                        m[0].weight.clamp_(-0.05, 0.05)
            hdp.train_step(x, y, F.cross_entropy)
            if change != "eval" or k > 0:
                _reference_step(reference, ref_opt, x, y)
        assert hdp.last_shards == [8, 8]
        assert all(r.training == hdp.module.training for r in hdp.replicas)
        _assert_same_parameters(hdp.module, reference)
        hdp.broadcast()
        hdp.assert_replicas_identical()
    finally:
        hdp.close()


def test_every_shard_runs_under_the_callers_autocast():
    seen = {}

    def loss_fn(out, y):
        seen[str(out.device)] = out.dtype
        return F.cross_entropy(out.float(), y)

    torch.manual_seed(0)
    hdp = HeteroDataParallel(nn.Linear(6, 3), ["fl:0", "fl:1"], _sgd, split=[1, 1], reduce_device="fl:1")
    try:
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        with torch.autocast("fl", dtype=torch.bfloat16):
            hdp.train_step(x, y, loss_fn)
        assert seen == {"fl:0": torch.bfloat16, "fl:1": torch.bfloat16}
        seen.clear()
        hdp.train_step(x, y, loss_fn)  # and not after the caller left it
        assert seen == {"fl:0": torch.float32, "fl:1": torch.float32}
    finally:
        hdp.close()


def test_a_device_without_an_index_is_the_current_one():
    hdp = HeteroDataParallel(nn.Linear(6, 3).double(), ["fl", "fl:1"], _sgd, split=[1, 1], reduce_device="fl")
    try:
        assert hdp.devices == [torch.device("fl:0"), torch.device("fl:1")]
        assert hdp.reduce_device == torch.device("fl:0")
        (x, y), = _batches(1)
        hdp.train_step(x[:1], y[:1], F.cross_entropy)  # one row: the master alone, fl:1 sits out
        assert hdp.last_shards == [1, 0]
        hdp.train_step(x, y, F.cross_entropy)  # fl:1 pulls the master's update on a side stream
        assert hdp.last_shards == [8, 8]
    finally:
        hdp.close()
    with pytest.raises(ValueError, match="distinct"):
        HeteroDataParallel(nn.Linear(6, 3), ["fl", "fl:0"], _sgd)


@pytest.mark.parametrize("split", [[-1, 2], [0, 0], [float("nan"), 1], [1, float("inf")]])
def test_a_split_that_is_not_a_set_of_proportions_is_refused(split):
    with pytest.raises(ValueError, match="finite proportions >= 0 with a positive sum"):
        HeteroDataParallel(nn.Linear(6, 3), ["fl:0", "fl:1"], _sgd, split=split)


def test_training_after_close_raises_and_evaluation_still_works():
    hdp = HeteroDataParallel(nn.Linear(6, 3).double(), ["fl:0", "fl:1"], _sgd, split=[1, 1])
    hdp.close()
    hdp.close()
    (x, y), = _batches(1)
    for rows in (1, 16):  # the master alone, and a split step
        with pytest.raises(RuntimeError, match="HeteroDataParallel is closed"):
            hdp.train_step(x[:rows], y[:rows], F.cross_entropy)
    assert hdp(x.to(hdp.reduce_device)).shape == (16, 3)


def test_a_calibration_that_raises_leaves_the_model_as_it_was():
    calls = {"fl:1": 0}

    def flaky_loss(out, y):
        if out.device == torch.device("fl:1"):
            calls["fl:1"] += 1
            if calls["fl:1"] == 1:
                raise RuntimeError("transient failure on fl:1")
        return F.cross_entropy(out, y)

    model = _bn_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    hdp = HeteroDataParallel(model, ["fl:0", "fl:1"], _sgd, reduce_device="fl:0", calibration_reps=1)
    try:
        (x, y), = _batches(1)
        with pytest.raises(RuntimeError, match="transient failure on fl:1"):
            hdp.train_step(x, y, flaky_loss)
        for k, v in hdp.module.state_dict().items():  # batch norm's statistics included
            assert torch.equal(v.cpu(), before[k]), k
        assert all(p.grad is None for r in hdp.replicas for p in r.parameters())
        hdp.assert_replicas_identical()
        hdp.train_step(x, y, flaky_loss)  # calibrates again, then one step
        # One step counted, none of calibration's timed passes. (The measured split may give
        # the master no rows on a busy host; its statistics then come from fl:1's shard.)
        assert int(hdp.module[1].num_batches_tracked) == 1
    finally:
        hdp.close()


def test_a_leaf_batch_that_requires_grad_gets_the_big_batch_gradient():
    # Adversarial training and saliency maps need d loss / d input; the calibration's timed
    # passes must not add into it.
    torch.manual_seed(0)
    hdp = HeteroDataParallel(nn.Linear(6, 3).double(), ["fl:0", "fl:1"], _sgd, reduce_device="fl:0",
                             calibration_reps=1, granularity=4)
    try:
        (x, y), = _batches(1)
        for _ in range(3):  # the first step calibrates; then the measured split runs
            reference = nn.Linear(6, 3).double()
            reference.load_state_dict({k: v.cpu() for k, v in hdp.module.state_dict().items()})
            expected = x.clone().requires_grad_()
            F.cross_entropy(reference(expected), y).backward()
            leaf = x.clone().requires_grad_()
            hdp.train_step(leaf, y, F.cross_entropy)
            torch.testing.assert_close(leaf.grad, expected.grad, rtol=0, atol=1e-12)
    finally:
        hdp.close()


def test_a_batch_produced_by_a_graph_that_requires_grad_is_refused_and_changes_nothing():
    hdp = HeteroDataParallel(nn.Linear(6, 3).double(), ["fl:0", "fl:1"], _sgd, split=[1, 1])
    try:
        before = [p.detach().cpu().clone() for p in hdp.module.parameters()]
        (x, y), = _batches(1)
        encoder = nn.Linear(6, 6).double()
        with pytest.raises(ValueError, match="output of a graph that requires grad"):
            hdp.train_step(encoder(x), y, F.cross_entropy)
        assert encoder.weight.grad is None
        for p, b in zip(hdp.module.parameters(), before):
            assert torch.equal(p.detach().cpu(), b)
        hdp.train_step(x, y, F.cross_entropy)
    finally:
        hdp.close()


@pytest.mark.parametrize("split,reduce_device", [([0, 1], "fl:0"), ([1, 1], "cpu")],
                         ids=["master_sits_out", "reduce_outside"])
def test_a_parameter_frozen_after_wrapping_stays_as_it_is(split, reduce_device):
    torch.manual_seed(0)
    hdp = HeteroDataParallel(_mlp(), ["fl:0", "fl:1"], _sgd, split=split, reduce_device=reduce_device)
    try:
        batches = _batches(3)
        hdp.train_step(*batches[0], F.cross_entropy)
        hdp.module[0].weight.requires_grad_(False)
        frozen = hdp.module[0].weight.detach().cpu().clone()
        trained = hdp.module[2].weight.detach().cpu().clone()
        for x, y in batches[1:]:
            hdp.train_step(x, y, F.cross_entropy)
        assert torch.equal(hdp.module[0].weight.detach().cpu(), frozen)
        assert not torch.equal(hdp.module[2].weight.detach().cpu(), trained)
    finally:
        hdp.close()


def test_a_checkpoint_of_other_devices_restores_the_model_and_calibrates_again():
    batches = _batches(2)
    two = HeteroDataParallel(nn.Linear(6, 3).double(), ["fl:0", "fl:1"], _sgd, calibration_reps=1)
    for x, y in batches:
        two.train_step(x, y, F.cross_entropy)
    buffer = io.BytesIO()
    torch.save(two.state_dict(), buffer)
    saved = [p.detach().cpu().clone() for p in two.module.parameters()]
    two.close()
    buffer.seek(0)
    one = HeteroDataParallel(nn.Linear(6, 3).double(), ["fl:1"], _sgd)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            one.load_state_dict(torch.load(buffer, weights_only=False))
        assert any("the next step calibrates" in str(w.message) for w in caught), [str(w.message) for w in caught]
        assert one.steps == 2 and not one.balancer.calibrated
        for p, s in zip(one.module.parameters(), saved):
            assert torch.equal(p.detach().cpu(), s)
        one.train_step(*batches[0], F.cross_entropy)
        assert one.balancer.calibrated and one.last_shards == [16]
    finally:
        one.close()


def test_batch_norm_statistics_follow_steps_that_leave_the_master_out():
    # The split gives the master no rows: its statistics must still follow training (they had
    # stayed at their initial values, so evaluation ran on mean 0 and variance 1).
    batches = _batches(3)
    reference = _trained_alone(_bn_model(), "fl:1", batches)
    hdp = HeteroDataParallel(_bn_model(), ["fl:0", "fl:1"], _sgd, reduce_device="fl:0", split=[0, 1])
    try:
        for x, y in batches:
            hdp.train_step(x, y, F.cross_entropy)
        master_bn, reference_bn = hdp.module[1], reference[1]
        assert int(master_bn.num_batches_tracked) == len(batches)
        assert torch.allclose(master_bn.running_mean.cpu(), reference_bn.running_mean.cpu(), rtol=0, atol=1e-12)
        assert torch.allclose(master_bn.running_var.cpu(), reference_bn.running_var.cpu(), rtol=0, atol=1e-12)
        hdp.assert_replicas_identical()
    finally:
        hdp.close()


@pytest.mark.parametrize("split", [[16, 1], None])
def test_a_one_row_shard_is_folded_into_the_largest_when_the_model_has_batch_norm(split):
    # Batch norm in training refuses one row ("Expected more than 1 value per channel"); a
    # measured split hands a device one row when a granularity's last piece is 1: here fl:1
    # is modelled 20x slower, so a batch of 33 in pieces of 2 splits [32, 1]. The balancer
    # folds it itself, so that the device set it plans and records is the one that ran.
    from torch_fl.parallel import ThroughputBalancer
    x = torch.randn(17 if split else 33, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (len(x),))
    for model, folded in ((_bn_model(), True), (_mlp(), False)):
        hdp = HeteroDataParallel(model, ["fl:0", "fl:1"], _sgd, reduce_device="fl:0", split=split,
                                 granularity=2, rebalance_every=1)
        try:
            if split is None:
                balancer = ThroughputBalancer(2)
                balancer.calibrate(0, [(33, 0.033), (8, 0.008)])
                balancer.calibrate(1, [(33, 0.66), (8, 0.16)])
                assert balancer.split(33, 2) == [32, 1]
                balancer.min_rows = hdp.balancer.min_rows
                hdp.balancer = balancer
            hdp.train_step(x, y, F.cross_entropy)
            assert hdp.last_shards == ([len(x), 0] if folded else [len(x) - 1, 1])
            if split is None:
                assert balancer.history[-1]["chose"] == ("0" if folded else "0,1")
                if folded:  # "0,1" never ran, so it has no record (a warm-up step records nothing)
                    assert "0,1" not in balancer.measured
        finally:
            hdp.close()


@pytest.mark.parametrize("split,reduce_device", [([3, 1], "fl:0"), ([0, 1], "fl:0"), ([3, 1], "cpu")])
def test_a_loss_that_reads_the_master_parameters_gets_their_whole_gradient(split, reduce_device):
    # A regulariser over hdp.module: each shard's backward adds its part into the master's
    # gradients, from its own thread. On a step the master sat out (or a master on another
    # device than the shards') the reduction had replaced them: the regulariser's gradient,
    # 0.38 here, was lost.
    (x, y), = _batches(1)

    def loss_reading(model):
        return lambda out, t: F.cross_entropy(out, t) + 0.5 * model[0].weight.to(out.device).pow(2).sum()

    reference = _mlp().to("fl:0")
    loss_reading(reference)(reference(x.to("fl:0")), y.to("fl:0")).backward()
    hdp = HeteroDataParallel(_mlp(), ["fl:0", "fl:1"], _sgd, reduce_device=reduce_device, split=split)
    try:
        for step in range(2):  # the second step starts from cleared gradients, not the first's
            hdp.train_step(x, y, loss_reading(hdp.module))
            got = [p.grad.cpu() for p in hdp.module.parameters()]
            want = [p.grad.cpu() for p in reference.parameters()]
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=0, atol=1e-12)
            hdp.broadcast()  # lr 0.1 moved the master: make the reference's step too
            with torch.no_grad():
                for p, q in zip(reference.parameters(), hdp.module.parameters()):
                    p.copy_(q)
            reference.zero_grad()
            loss_reading(reference)(reference(x.to("fl:0")), y.to("fl:0")).backward()
    finally:
        hdp.close()


def test_before_step_sees_the_whole_batch_gradient_and_can_clip_it():
    batches = _batches(3)
    reference = _trained_alone(_mlp(), "fl:0", batches,
                               before_step=lambda m: nn.utils.clip_grad_norm_(m.parameters(), 0.05))
    initial = _mlp()
    hdp = HeteroDataParallel(_mlp(), ["fl:0", "fl:1"], _sgd, reduce_device="fl:0", split=[3, 1])
    norms = []
    try:
        for x, y in batches:
            hdp.train_step(x, y, F.cross_entropy,
                           before_step=lambda m: norms.append(float(nn.utils.clip_grad_norm_(m.parameters(), 0.05))))
        assert len(norms) == 3 and all(n > 0.05 for n in norms)  # clipping did something
        for got, want in zip(hdp.module.parameters(), reference.parameters()):
            torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=0, atol=1e-12)
        assert not all(torch.equal(p.detach().cpu(), q.detach()) for p, q in
                       zip(hdp.module.parameters(), initial.parameters()))  # the steps moved them
    finally:
        hdp.close()


def test_an_optimizer_factory_that_walks_the_parameters_twice_gets_them_both_times():
    # The usual decay / no-decay grouping: a generator's second walk was empty, so the biases
    # were in no group and never trained.
    def grouped(params):
        return torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
                                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=0.1)

    hdp = HeteroDataParallel(_mlp(), ["fl:0", "fl:1"], grouped, split=[1, 1])
    try:
        assert [len(g["params"]) for g in hdp.optimizer.param_groups] == [2, 2]
    finally:
        hdp.close()


def test_optimizers_that_need_a_closure_and_modules_that_cannot_be_copied_are_refused():
    with pytest.raises(TypeError, match=r"LBFGS.step\(\) needs a closure"):
        HeteroDataParallel(_mlp(), ["fl:0", "fl:1"], lambda p: torch.optim.LBFGS(p), split=[1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # weight_norm's deprecation
        old_style = nn.Sequential(nn.utils.weight_norm(nn.Linear(6, 3)))
        with pytest.raises(TypeError, match="parametrizations.weight_norm instead"):
            HeteroDataParallel(old_style, ["fl:0", "fl:1"], _sgd, split=[1, 1])


def test_an_empty_batch_is_refused_before_anything_changes():
    hdp = HeteroDataParallel(_mlp(), ["fl:0", "fl:1"], _sgd)
    try:
        with pytest.raises(ValueError, match="the batch has 0 rows"):
            hdp.train_step(torch.zeros(0, 6, dtype=torch.float64), torch.zeros(0, dtype=torch.long),
                           F.cross_entropy)
        assert hdp.steps == 0 and not hdp.balancer.calibrated
    finally:
        hdp.close()


def test_a_small_first_batch_calibrates_a_batch_norm_model():
    # Calibration timed a quarter of the batch: one row of a 4-row batch, which batch norm
    # refuses in training.
    x, y = _batches(1, batch=4)[0]
    hdp = HeteroDataParallel(_bn_model(), ["fl:0", "fl:1"], _sgd, calibration_reps=1)
    try:
        hdp.train_step(x, y, F.cross_entropy)
        assert hdp.balancer.calibrated and 0 not in {n for n, _ in hdp.calibration_points["fl:0"]}
        assert min(n for n, _ in hdp.calibration_points["fl:0"]) == 2
    finally:
        hdp.close()


class _Counting(nn.Module):
    """Counts its training rows in a buffer that its forward replaces (not in place)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(6, 3).double()
        self.register_buffer("seen", torch.zeros((), dtype=torch.float64))

    def forward(self, x):
        if self.training:
            self.seen = self.seen + x.shape[0]
        return self.linear(x)


def test_a_buffer_the_forward_replaces_follows_steps_that_leave_the_master_out():
    (x, y), = _batches(1)
    hdp = HeteroDataParallel(_Counting(), ["fl:0", "fl:1"], _sgd, reduce_device="fl:0", split=[1, 3])
    try:
        seen = []
        for rows in (4, 1, 1):  # [1, 3], then [0, 1] twice: the master sits out
            hdp.train_step(x[:rows], y[:rows], F.cross_entropy)
            seen.append((list(hdp.last_shards), float(hdp.module.seen)))
        assert seen == [([1, 3], 1.0), ([0, 1], 2.0), ([0, 1], 3.0)]
    finally:
        hdp.close()


def _float_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


@pytest.mark.parametrize("split", [[3, 1], [0, 1]])
def test_a_grad_scaler_scales_every_shard_and_skips_a_step_with_an_inf_as_one_loop_does(split):
    # Step 2's shard on fl:1 returns inf (an overflow there): the whole step must be skipped
    # and the scale backed off, as in a loop whose loss overflows; other steps unscale the
    # summed gradients, and before_step sees them unscaled.
    batches = [(x.float(), y) for x, y in _batches(5)]
    clip_to = 0.5

    def scaler():
        return torch.amp.GradScaler("fl", init_scale=2.0 ** 10, growth_interval=2)

    reference, ref_scaler = _float_mlp().to("fl:0"), scaler()
    optimizer = _sgd(reference.parameters())
    ref_scales = []
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        loss = F.cross_entropy(reference(x.to("fl:0")), y.to("fl:0")) * (float("inf") if step == 2 else 1.0)
        ref_scaler.scale(loss).backward()
        ref_scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(reference.parameters(), clip_to)
        ref_scaler.step(optimizer)
        ref_scaler.update()
        ref_scales.append(ref_scaler.get_scale())

    hdp = HeteroDataParallel(_float_mlp(), ["fl:0", "fl:1"], _sgd, reduce_device="fl:0", split=split)
    hdp_scaler, scales, norms = scaler(), [], []

    def overflowing_on_fl1_at(step):
        def loss_fn(out, y):
            loss = F.cross_entropy(out, y)
            return loss * float("inf") if step == 2 and out.device == torch.device("fl:1") else loss
        return loss_fn

    def clip(module):
        norms.append(float(nn.utils.clip_grad_norm_(module.parameters(), clip_to)))

    try:
        for step, (x, y) in enumerate(batches):
            hdp.train_step(x, y, overflowing_on_fl1_at(step), before_step=clip, scaler=hdp_scaler)
            scales.append(hdp_scaler.get_scale())
        assert scales == ref_scales and scales[2] < scales[1]  # backed off at the inf
        assert all(n < 100 for k, n in enumerate(norms) if k != 2)  # unscaled (the scale is 1024)
        for got, want in zip(hdp.module.parameters(), reference.parameters()):
            torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=1e-5, atol=1e-6)
    finally:
        hdp.close()


@pytest.mark.parametrize("change", ["module", "parameter", "buffer"])
def test_a_structure_change_of_the_master_after_wrapping_is_refused_at_the_next_step(change):
    batches = _batches(2)
    hdp = HeteroDataParallel(_mlp(), ["fl:0", "fl:1"], _sgd, split=[1, 1])
    try:
        hdp.train_step(*batches[0], F.cross_entropy)
        before = [p.detach().clone() for p in hdp.module.parameters()]
        if change == "module":
            hdp.module[2] = nn.Linear(8, 3).double().to(hdp.reduce_device)
            where = "Sequential.2"
        elif change == "parameter":
            hdp.module[0].bias = nn.Parameter(torch.zeros(8, dtype=torch.float64, device=hdp.reduce_device))
            where = "Linear.bias"
        else:
            hdp.module[0].register_buffer("scale", torch.ones(8, dtype=torch.float64, device=hdp.reduce_device))
            where = "Linear.scale"
        with pytest.raises(RuntimeError, match=rf"{where} was assigned on the master module after wrapping.*wrap the "
                                               r"changed module again"):
            hdp.train_step(*batches[1], F.cross_entropy)
        kept = [p for p in hdp.module.parameters()][: len(before)]
        if change == "buffer":  # nothing was trained by the refused step
            assert all(torch.equal(a, b) for a, b in zip(kept, before))
    finally:
        hdp.close()


def test_changes_elsewhere_and_in_place_ones_are_not_structure_changes_and_close_removes_the_watch():
    hooks = nn.modules.module._global_module_registration_hooks
    count = len(hooks)
    batches = _batches(2)
    hdp = HeteroDataParallel(_mlp(), ["fl:0", "fl:1"], _sgd, split=[1, 1])
    try:
        assert len(hooks) == count + 1
        other = nn.Sequential(nn.Linear(2, 2))
        other.add_module("extra", nn.ReLU())           # another model's change
        with torch.no_grad():
            hdp.module[0].weight.clamp_(-0.1, 0.1)     # an in-place change: followed, not refused
        hdp.module.load_state_dict(hdp.module.state_dict())
        hdp.train_step(*batches[0], F.cross_entropy)
        hdp.train_step(*batches[1], F.cross_entropy)
    finally:
        hdp.close()
    assert len(hooks) == count
