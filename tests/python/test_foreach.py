"""The CPU plugin's _foreach_* entries: optimizers' multi-tensor steps run in the native tier
and equal PyTorch's CPU results."""
from __future__ import annotations

import pytest
import torch

import torch_fl
from conftest import op_calls


def _params():
    torch.manual_seed(0)
    return [torch.randn(5, 3), torch.randn(7), torch.randn(2, 4, 3, 3).to(memory_format=torch.channels_last)]


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    lambda p: torch.optim.Adam(p, lr=0.01),
    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
], ids=["sgd", "adam", "adamw"])
def test_optimizer_steps_run_native_and_match_cpu(make):
    ref = [p.clone().requires_grad_() for p in _params()]
    dev = [p.to("fl:0").requires_grad_() for p in _params()]
    grads = [torch.randn_like(p) for p in ref]
    opt_ref, opt_dev = make(ref), make(dev)
    with torch_fl.profile(warn_above=1.0) as prof:
        for step in range(3):
            for r, d, g in zip(ref, dev, grads):
                r.grad = g * (step + 1)
                d.grad = (g * (step + 1)).to("fl:0")
            opt_ref.step()
            opt_dev.step()
    for r, d in zip(ref, dev):
        assert d.is_contiguous(memory_format=torch.channels_last) == r.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(d.detach().cpu(), r.detach(), rtol=1e-6, atol=1e-6)
    foreach_ops = [name for name in prof.ops if "_foreach_" in name]
    assert foreach_ops
    for name in foreach_ops:
        assert prof.ops[name]["generic"] == 0 and prof.ops[name]["cpu_fallback"] == 0, name
        assert prof.ops[name]["native"] > 0, name


def test_scalar_overloads_promote_as_aten():
    xs = [torch.randn(4), torch.randn(2, 3)]
    ds = [x.to("fl:0") for x in xs]
    cases = [
        (lambda t: torch._foreach_add(t, 2), "aten::_foreach_add"),
        (lambda t: torch._foreach_sub(t, 0.5), "aten::_foreach_sub"),
        (lambda t: torch._foreach_div(t, [1.0, 4.0]), "aten::_foreach_div"),
        (lambda t: torch._foreach_mul(t, torch.tensor(3.0, device=t[0].device)), "aten::_foreach_mul"),
        (lambda t: torch._foreach_sqrt([a.abs() for a in t]), "aten::_foreach_sqrt"),
        (lambda t: torch._foreach_lerp(t, [a * 2 for a in t], [a * 0 + 0.25 for a in t]), "aten::_foreach_lerp"),
    ]
    for fn, name in cases:
        torch_fl.reset_fallback_stats()
        for got, want in zip(fn(ds), fn(xs)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want)
        assert op_calls(torch_fl.fallback_stats(), name)["native"] == 1, name
    half = torch._foreach_mul([torch.ones(2, dtype=torch.float16).to("fl:0")], 2.5)
    assert half[0].dtype == torch.float16 and half[0].cpu().tolist() == [2.5, 2.5]


def test_integer_lists_take_the_generic_tier():
    xs = [torch.arange(4), torch.arange(3)]
    torch_fl.reset_fallback_stats()
    got = torch._foreach_add([x.to("fl:0") for x in xs], 1)
    assert [g.cpu().tolist() for g in got] == [[1, 2, 3, 4], [1, 2, 3]]
    calls = op_calls(torch_fl.fallback_stats(), "aten::_foreach_add")
    assert calls["native"] == 0 and calls["generic"] == 1


def test_lists_of_different_lengths_are_an_error():
    a = [torch.randn(3).to("fl:0"), torch.randn(3).to("fl:0")]
    with pytest.raises(RuntimeError):
        torch._foreach_add(a, a[:1])
