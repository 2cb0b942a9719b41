"""F.rms_norm / nn.RMSNorm on fl: the binding routes ATen's _fused_rms_norm (and, through its
derivative, _fused_rms_norm_backward) to the plugin's entries (native on the CPU plugin), with
ATen's composite and a closed-form backward as the generic tier for a plugin without them (the
stub plugin). Results are checked against ATen's CPU composite and its autograd."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl
from conftest import STUB_PLUGIN, op_calls, run_python

TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
             torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def _compare(shape, normalized, dtype, with_weight=True, eps=1e-6):
    torch.manual_seed(7)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    w = torch.randn(normalized, dtype=dtype, requires_grad=True) if with_weight else None
    y = F.rms_norm(x, normalized, w, eps)
    g = torch.randn_like(y)
    y.backward(g)
    xf = x.detach().to("fl:0").requires_grad_()
    wf = w.detach().to("fl:0").requires_grad_() if with_weight else None
    yf = F.rms_norm(xf, normalized, wf, eps)
    yf.backward(g.to("fl:0"))
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(yf.cpu(), y, **tol)
    torch.testing.assert_close(xf.grad.cpu(), x.grad, **tol)
    if with_weight:
        torch.testing.assert_close(wf.grad.cpu(), w.grad, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_rms_norm_forward_and_backward_match_cpu(dtype):
    torch_fl.reset_fallback_stats()
    _compare((4, 7, 32), (32,), dtype)
    for op in ("aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"):
        calls = op_calls(torch_fl.fallback_stats(), op)
        assert calls == {"native": 1, "generic": 0, "cpu_fallback": 0}, (op, calls)


def test_rms_norm_without_weight_over_two_dims_and_default_eps():
    _compare((3, 4, 5, 6), (5, 6), torch.float32, with_weight=False, eps=None)
    _compare((6,), (6,), torch.float32)  # one row, no batch dims: grad_weight is the row itself


def test_rms_norm_module_trains_like_on_cpu():
    torch.manual_seed(3)
    cpu = nn.Sequential(nn.Linear(16, 16), nn.RMSNorm(16), nn.Linear(16, 4))
    fl = nn.Sequential(nn.Linear(16, 16), nn.RMSNorm(16), nn.Linear(16, 4))
    fl.load_state_dict(cpu.state_dict())
    fl.to("fl:0")
    opt_cpu, opt_fl = torch.optim.SGD(cpu.parameters(), lr=0.1), torch.optim.SGD(fl.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(8, 16)
        for model, opt, inp in ((cpu, opt_cpu, x), (fl, opt_fl, x.to("fl:0"))):
            opt.zero_grad()
            model(inp).square().mean().backward()
            opt.step()
    for (name, a), b in zip(cpu.state_dict().items(), fl.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-5, msg=name)


def test_rms_norm_input_without_grad_still_gives_the_weight_gradient():
    torch.manual_seed(5)
    x = torch.randn(5, 8)
    w = torch.randn(8, requires_grad=True)
    F.rms_norm(x, (8,), w).sum().backward()
    wf = w.detach().to("fl:0").requires_grad_()
    F.rms_norm(x.to("fl:0"), (8,), wf).sum().backward()
    torch.testing.assert_close(wf.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)


GENERIC_CODE = r"""
import torch, torch.nn.functional as F, torch_fl
torch.manual_seed(1)
for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
    x = torch.randn(3, 5, 16, dtype=dtype, requires_grad=True)
    w = torch.randn(16, dtype=dtype, requires_grad=True)
    y = F.rms_norm(x, (16,), w)
    g = torch.randn_like(y)
    y.backward(g)
    xf = x.detach().to("fl:0").requires_grad_()
    wf = w.detach().to("fl:0").requires_grad_()
    yf = F.rms_norm(xf, (16,), wf)
    yf.backward(g.to("fl:0"))
    for a, b in ((yf, y), (xf.grad, x.grad), (wf.grad, w.grad)):
        torch.testing.assert_close(a.cpu(), b, rtol=tol, atol=tol)
stats = torch_fl.fallback_stats()
print("TIERS", stats["aten::_fused_rms_norm"]["generic"], stats["aten::_fused_rms_norm_backward"]["generic"])
"""


def test_rms_norm_on_a_plugin_without_the_entries_takes_the_generic_tier():
    r = run_python(GENERIC_CODE, env={"FL_PLUGIN_PATH": str(STUB_PLUGIN), "FL_CPU_DEVICES": None})
    assert r.returncode == 0, r.stderr
    assert "TIERS 2 2" in r.stdout, r.stdout
