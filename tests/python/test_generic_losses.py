"""Smooth L1, Huber and xlogy (KL divergence) on fl through the generic tier: written once in
the binding in other ATen ops, so every plugin with elementwise and reduction kernels serves
them on its own device instead of the CPU fallback. Each equals torch's CPU result."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from conftest import op_calls

TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2}


def _pair(dtype):
    torch.manual_seed(0)
    x = (torch.randn(40, 9, dtype=torch.float64) * 2).to(dtype)
    y = (torch.randn(40, 9, dtype=torch.float64) * 2).to(dtype)
    x[0, :3] = y[0, :3] + torch.tensor([0.0, 1.0, -1.0], dtype=dtype)  # at zero and at the bounds
    return x, y


LOSSES = {
    "smooth_l1": (lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r), "aten::smooth_l1_loss"),
    "smooth_l1_beta": (lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.5), "aten::smooth_l1_loss"),
    "smooth_l1_beta0": (lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.0), "aten::smooth_l1_loss"),
    "huber": (lambda x, y, r: F.huber_loss(x, y, reduction=r), "aten::huber_loss"),
    "huber_delta": (lambda x, y, r: F.huber_loss(x, y, reduction=r, delta=2.5), "aten::huber_loss"),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("name", list(LOSSES))
def test_loss_and_gradient_match_cpu_in_the_generic_tier(name, dtype, reduction):
    fn, kernel = LOSSES[name]
    x, y = _pair(dtype)
    torch_fl.reset_fallback_stats()
    a, b = x.clone().requires_grad_(), x.clone().to("fl:0").requires_grad_()
    la, lb = fn(a, y, reduction), fn(b, y.to("fl:0"), reduction)
    torch.testing.assert_close(lb.detach().cpu(), la.detach(), rtol=TOL[dtype], atol=TOL[dtype])
    g = torch.randn(la.shape, dtype=dtype)
    la.backward(g)
    lb.backward(g.to("fl:0"))
    torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=TOL[dtype], atol=TOL[dtype])
    if name == "smooth_l1_beta0":  # F.smooth_l1_loss computes the L1 loss itself for beta 0
        assert not any(v["cpu_fallback"] for v in torch_fl.fallback_stats().values())
        return
    fwd = op_calls(torch_fl.fallback_stats(), kernel)
    bwd = op_calls(torch_fl.fallback_stats(), kernel + "_backward")
    assert fwd == {"native": 0, "generic": 1, "cpu_fallback": 0}, fwd
    assert bwd == {"native": 0, "generic": 1, "cpu_fallback": 0}, bwd


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_xlogy_and_kl_div_match_cpu(dtype):
    x = torch.tensor([[0.0, 1.5, 2.0, 0.0, 3.0], [1.0, 0.0, -1.0, 2.0, 0.5]], dtype=dtype)
    y = torch.tensor([[0.0, 2.0, float("nan"), float("nan"), -1.0], [0.5, 7.0, 3.0, 0.0, 1.0]], dtype=dtype)
    torch_fl.reset_fallback_stats()
    torch.testing.assert_close(torch.xlogy(x.to("fl:0"), y.to("fl:0")).cpu(), torch.xlogy(x, y), equal_nan=True,
                               rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(torch.xlogy(x.to("fl:0"), y[1:].to("fl:0")).cpu(), torch.xlogy(x, y[1:]),
                               equal_nan=True, rtol=TOL[dtype], atol=TOL[dtype])  # broadcast
    logits = torch.randn(8, 10, dtype=dtype)
    target = torch.softmax(torch.randn(8, 10, dtype=dtype), 1)
    want = F.kl_div(F.log_softmax(logits, 1), target, reduction="batchmean")
    got = F.kl_div(F.log_softmax(logits.to("fl:0"), 1), target.to("fl:0"), reduction="batchmean")
    torch.testing.assert_close(got.cpu(), want, rtol=TOL[dtype], atol=TOL[dtype])
    calls = op_calls(torch_fl.fallback_stats(), "aten::xlogy")
    assert calls["generic"] == 3 and calls["cpu_fallback"] == 0, calls


def test_xlogy_of_integers_takes_the_fallback_and_stays_right():
    x, y = torch.tensor([0, 2, 3]), torch.tensor([5, 1, 2])
    assert torch.equal(torch.xlogy(x.to("fl:0"), y.to("fl:0")).cpu(), torch.xlogy(x, y))
