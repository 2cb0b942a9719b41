"""torch.autocast("fl") and torch.amp.GradScaler("fl")."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import assert_same

BF16 = dict(rtol=1.6e-2, atol=1e-2)


def test_autocast_available_for_fl():
    assert torch.amp.is_autocast_available("fl")
    with torch.autocast("fl", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("fl")
        assert torch.get_autocast_dtype("fl") == torch.bfloat16
    assert not torch.is_autocast_enabled("fl")


def test_matmul_family_runs_in_bfloat16():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    fa, fb = a.to("fl"), b.to("fl")
    with torch.autocast("fl", dtype=torch.bfloat16):
        mm = fa @ fb
        lin = F.linear(fa, fb.t(), fb[0])
        addmm = torch.addmm(fb[0], fa, fb)
        bmm = torch.bmm(fa.unsqueeze(0), fb.unsqueeze(0))
    assert mm.dtype == lin.dtype == addmm.dtype == bmm.dtype == torch.bfloat16
    ref = a.bfloat16() @ b.bfloat16()
    assert_same(mm, ref, **BF16)
    assert_same(lin, F.linear(a.bfloat16(), b.t().bfloat16(), b[0].bfloat16()), **BF16)
    assert_same(bmm[0], ref, **BF16)


def test_conv_runs_in_bfloat16():
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    with torch.autocast("fl", dtype=torch.bfloat16):
        out = F.conv2d(x.to("fl"), w.to("fl"), padding=1)
    assert out.dtype == torch.bfloat16
    assert_same(out, F.conv2d(x.bfloat16(), w.bfloat16(), padding=1), rtol=2e-2, atol=5e-2)


def test_fp32_policy_ops_upcast():
    x = torch.randn(4, 10).bfloat16()
    fx = x.to("fl")
    with torch.autocast("fl", dtype=torch.bfloat16):
        sm = torch.softmax(fx, 1)
        lsm = F.log_softmax(fx, 1)
        ln = F.layer_norm(fx, (10,))
        ex = torch.exp(fx)
        s = fx.sum()
    for t in (sm, lsm, ln, ex, s):
        assert t.dtype == torch.float32
    assert_same(sm, torch.softmax(x.float(), 1), rtol=1e-5, atol=1e-6)
    assert_same(lsm, F.log_softmax(x.float(), 1), rtol=1e-5, atol=1e-6)
    assert_same(ln, F.layer_norm(x.float(), (10,)), rtol=1e-5, atol=1e-5)


def test_unlisted_ops_keep_their_dtype_and_promote_ops_widen():
    a = torch.randn(5).to("fl")
    b = torch.randn(5).to("fl").bfloat16()
    with torch.autocast("fl", dtype=torch.bfloat16):
        assert torch.relu(a).dtype == torch.float32
        assert (a + a).dtype == torch.float32
        assert torch.relu(b).dtype == torch.bfloat16
        assert torch.addcmul(a, b, b).dtype == torch.float32


def test_autocast_disabled_inside_and_cpu_tensors_untouched():
    a = torch.randn(4, 4)
    with torch.autocast("fl", dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.float32            # CPU tensors are not fl's business
        with torch.autocast("fl", enabled=False):
            assert (a.to("fl") @ a.to("fl")).dtype == torch.float32


def test_autocast_forward_backward_grads_are_fp32():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to("fl")
    x, y = torch.randn(6, 8).to("fl"), torch.tensor([0, 1, 2, 0, 1, 2]).to("fl")
    with torch.autocast("fl", dtype=torch.bfloat16):
        out = model(x)
        loss = F.cross_entropy(out, y)
    assert out.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    for p in model.parameters():
        assert p.grad.dtype == torch.float32 and p.grad.device.type == "fl"
    # Reference: the same bf16 casts done by hand on CPU.
    ref = copy.deepcopy(model).to("cpu")
    for p in ref.parameters():
        p.grad = None
    xc = x.cpu()
    h = F.relu(F.linear(xc.bfloat16(), ref[0].weight.bfloat16(), ref[0].bias.bfloat16()))
    o = F.linear(h, ref[2].weight.bfloat16(), ref[2].bias.bfloat16())
    assert_same(out, o.detach(), rtol=2e-2, atol=2e-2)


def _scaler_run(device, inject_inf_at=None, steps=5):
    torch.manual_seed(3)
    model = nn.Linear(4, 2)
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=2)
    x = torch.randn(8, 4).to(device)
    y = torch.randn(8, 2).to(device)
    scales = []
    for i in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if i == inject_inf_at:
            model.weight.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return [p.detach().cpu() for p in model.parameters()], scales


@pytest.mark.parametrize("inject_inf_at", [None, 2])
def test_grad_scaler_matches_cpu(inject_inf_at):
    fl_params, fl_scales = _scaler_run("fl", inject_inf_at)
    cpu_params, cpu_scales = _scaler_run("cpu", inject_inf_at)
    assert fl_scales == cpu_scales
    if inject_inf_at is not None:
        assert fl_scales[inject_inf_at] < fl_scales[inject_inf_at - 1]     # backed off
    for a, b in zip(fl_params, cpu_params):
        assert_same(a, b, rtol=1e-6, atol=1e-7)


def test_grad_scaler_with_autocast_training_step():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).to("fl")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("fl")
    x, y = torch.randn(16, 8).to("fl"), torch.randn(16, 1).to("fl")
    losses = []
    for _ in range(10):
        opt.zero_grad()
        with torch.autocast("fl", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
