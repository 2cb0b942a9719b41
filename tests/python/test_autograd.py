"""Autograd through fl: gradients of the usual CNN building blocks equal CPU gradients;
moving a model keeps its Parameter objects (so optimizers built before .to() still work)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import assert_same


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


def _grads(model):
    return {n: p.grad for n, p in model.named_parameters()}


def test_cnn_gradients_match_cpu():
    torch.manual_seed(0)
    cpu_model = SmallCNN().double()
    fl_model = copy.deepcopy(cpu_model).to("fl")
    x = torch.randn(3, 2, 6, 6, dtype=torch.float64)
    y = torch.tensor([0, 3, 4])
    F.nll_loss(cpu_model(x), y).backward()
    F.nll_loss(fl_model(x.to("fl")), y.to("fl")).backward()
    for name, g in _grads(cpu_model).items():
        assert_same(_grads(fl_model)[name], g, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name,fn,shapes", [
    ("linear", lambda x, w: F.linear(x, w).sum(), [(4, 5), (3, 5)]),
    ("relu", lambda x, w: (F.relu(x) * w).sum(), [(4, 5), (4, 5)]),
    ("conv2d", lambda x, w: F.conv2d(x, w, stride=2, padding=1).pow(2).sum(), [(2, 3, 7, 7), (4, 3, 3, 3)]),
    ("max_pool2d", lambda x, w: (F.max_pool2d(x, 2) * w).sum(), [(2, 3, 6, 6), (2, 3, 3, 3)]),
    ("log_softmax", lambda x, w: (F.log_softmax(x, 1) * w).sum(), [(4, 6), (4, 6)]),
    ("softmax", lambda x, w: (F.softmax(x, 0) * w).sum(), [(4, 6), (4, 6)]),
    ("nll", lambda x, w: F.nll_loss(F.log_softmax(x, 1), w.argmax(1)), [(5, 4), (5, 4)]),
    ("cross_entropy", lambda x, w: F.cross_entropy(x, w.argmax(1), label_smoothing=0.1), [(5, 4), (5, 4)]),
    ("layer_norm", lambda x, w: (F.layer_norm(x, (6,)) * w).sum(), [(3, 6), (3, 6)]),
    ("gelu_tanh_sigmoid", lambda x, w: (F.gelu(x) + torch.tanh(x) * torch.sigmoid(w)).sum(), [(3, 4), (3, 4)]),
    ("matmul_broadcast", lambda x, w: (x @ w).mean(), [(2, 3, 4), (4, 5)]),
    ("embedding", lambda x, w: F.embedding(torch.tensor([[0, 2], [2, 1]], device=x.device), w).mul(x[0, 0]).sum(),
     [(2, 2), (4, 3)]),
    ("dropout_p0", lambda x, w: (F.dropout(x, 0.0) * w).sum(), [(3, 3), (3, 3)]),
])
def test_op_gradients_match_cpu(name, fn, shapes):
    g = torch.Generator().manual_seed(len(name))
    cpu_in = [torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]
    fl_in = [t.detach().to("fl").requires_grad_() for t in cpu_in]
    fn(*cpu_in).backward()
    fn(*fl_in).backward()
    assert cpu_in[0].grad is not None
    for c, f in zip(cpu_in, fl_in):
        assert (f.grad is None) == (c.grad is None)     # e.g. targets from argmax have none
        if c.grad is not None:
            assert f.grad.device.type == "fl"
            assert_same(f.grad, c.grad, rtol=1e-9, atol=1e-10)


def test_model_to_fl_keeps_parameter_identity():
    model = nn.Linear(4, 3)
    w, b = model.weight, model.bias
    model.to("fl")
    assert model.weight is w and model.bias is b
    assert w.device.type == "fl"
    model.to("fl:1")
    assert model.weight is w and w.device == torch.device("fl:1")
    model.to("cpu")
    assert model.weight is w and w.device.type == "cpu"


def test_optimizer_created_before_to_keeps_working():
    torch.manual_seed(1)
    ref = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    model = copy.deepcopy(ref)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)   # built on CPU parameters
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    model.to("fl")
    x, y = torch.randn(10, 6), torch.randn(10, 2)
    for _ in range(3):
        for m, o, xb, yb in ((model, opt, x.to("fl"), y.to("fl")), (ref, ref_opt, x, y)):
            o.zero_grad()
            F.mse_loss(m(xb), yb).backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_same(p, q.detach(), rtol=1e-5, atol=1e-6)
    state = opt.state[model[0].weight]["momentum_buffer"]
    assert state.device.type == "fl"


def test_adam_state_on_fl_matches_cpu():
    torch.manual_seed(2)
    ref = nn.Linear(5, 3)
    model = copy.deepcopy(ref).to("fl")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    x = torch.randn(7, 5)
    for _ in range(4):
        for m, o, xb in ((model, opt, x.to("fl")), (ref, ref_opt, x)):
            o.zero_grad()
            m(xb).pow(2).mean().backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_same(p, q.detach(), rtol=1e-5, atol=1e-6)
    st = opt.state[model.weight]
    assert st["exp_avg"].device.type == "fl"
    assert_same(st["exp_avg_sq"], ref_opt.state[ref.weight]["exp_avg_sq"], rtol=1e-5, atol=1e-7)


def test_grad_accumulation_and_no_grad():
    w_cpu = torch.randn(3, requires_grad=True)
    w_fl = w_cpu.detach().to("fl").requires_grad_()
    for w in (w_cpu, w_fl):
        (w * 2).sum().backward()
        (w ** 2).sum().backward()
        with torch.no_grad():
            w.add_(1)
    assert_same(w_fl.grad, w_cpu.grad)
    assert_same(w_fl, w_cpu.detach())


def test_backward_across_devices():
    a = torch.randn(4, requires_grad=True)
    x = a.to("fl:0")
    y = (x * 3).to("fl:1").exp().to("cpu").sum()
    y.backward()
    assert_same(a.grad, (3 * torch.exp(3 * a)).detach(), rtol=1e-5, atol=1e-6)
