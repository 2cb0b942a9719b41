"""The CPU plugin's linalg_vector_norm, _foreach_norm, cat and mse_loss kernels: what a
training loop with `clip_grad_norm_` or an MSE loss calls every step. Each equals PyTorch's
CPU result, runs in the native tier, and fails where ATen fails."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_fl
from conftest import op_calls

ORDERS = [2, 1, 0, math.inf, -math.inf, 3, 0.5, -1.5]
TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-13, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _native_calls(op):
    return op_calls(torch_fl.fallback_stats(), op)


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
def test_vector_norm_matches_cpu_for_every_order_dim_and_layout(dtype):
    torch.manual_seed(0)
    x = torch.randn(5, 7, 3, dtype=dtype)
    x[0, 0, 0] = 0  # ord 0 counts it out
    torch_fl.reset_fallback_stats()
    cases = 0
    for ord in ORDERS:
        for dim in (None, 1, (0, 2), -1):
            for keepdim in (False, True):
                for layout in (x, x.transpose(0, 2), x[:, ::2]):
                    want = torch.linalg.vector_norm(layout, ord, dim, keepdim)
                    got = torch.linalg.vector_norm(layout.to("fl:0"), ord, dim, keepdim)
                    assert got.dtype == want.dtype and got.shape == want.shape, (ord, dim, keepdim)
                    torch.testing.assert_close(got.cpu(), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype],
                                               msg=f"ord {ord} dim {dim} keepdim {keepdim}")
                    cases += 1
    calls = _native_calls("aten::linalg_vector_norm")
    assert calls["native"] == cases and calls["cpu_fallback"] == 0


def test_vector_norm_nan_empty_and_dtype_as_aten():
    x = torch.tensor([1.0, float("nan"), -3.0])
    for ord in ORDERS:
        got = torch.linalg.vector_norm(x.to("fl:0"), ord).cpu()
        want = torch.linalg.vector_norm(x, ord)
        torch.testing.assert_close(got, want, equal_nan=True, msg=str(ord))
    empty = torch.zeros(0, 3)
    for ord in (2, 1, 0, math.inf, -1):
        for dim in (None, 0, 1):
            try:
                want = torch.linalg.vector_norm(empty, ord, dim)
            except RuntimeError:
                with pytest.raises(RuntimeError, match="does not have an identity"):
                    torch.linalg.vector_norm(empty.to("fl:0"), ord, dim)
                continue
            assert torch.equal(torch.linalg.vector_norm(empty.to("fl:0"), ord, dim).cpu(), want), (ord, dim)
    # dtype=float64: the float32 input read as double, as ATen converts it first.
    y = torch.randn(4, 5)
    got = torch.linalg.vector_norm(y.to("fl:0"), dtype=torch.float64)
    assert got.dtype == torch.float64
    assert got.item() == torch.linalg.vector_norm(y, dtype=torch.float64).item()
    with pytest.raises(RuntimeError, match="floating point or complex"):
        torch.linalg.vector_norm(torch.arange(3).to("fl:0"))


def test_vector_norm_gradient_matches_cpu():
    torch.manual_seed(1)
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    xf = x.detach().to("fl:0").requires_grad_()
    for ord in (2, 1, math.inf, 3):
        torch.linalg.vector_norm(x, ord, dim=1).sum().backward()
        torch.linalg.vector_norm(xf, ord, dim=1).sum().backward()
    torch.testing.assert_close(xf.grad.cpu(), x.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ord", [2.0, 1.0, math.inf])
def test_clip_grad_norm_runs_natively_and_matches_cpu(ord):
    torch.manual_seed(2)
    ref = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    dev = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).to("fl:0")
    dev.load_state_dict(ref.state_dict())
    for p, q in zip(ref.parameters(), dev.parameters()):
        p.grad = torch.randn_like(p) * 3
        q.grad = p.grad.to("fl:0")
    torch_fl.reset_fallback_stats()
    want = nn.utils.clip_grad_norm_(ref.parameters(), 0.5, norm_type=ord)
    got = nn.utils.clip_grad_norm_(dev.parameters(), 0.5, norm_type=ord)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)
    for p, q in zip(ref.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-6, atol=1e-7)
    stats = torch_fl.fallback_stats()
    assert op_calls(stats, "aten::_foreach_norm")["native"] == 1
    assert all(v["cpu_fallback"] == 0 and v["generic"] == 0 for v in stats.values()), \
        {k: v for k, v in stats.items() if v["cpu_fallback"] or v["generic"]}


def test_foreach_norm_output_dtype_and_empty_tensors():
    xs = [torch.randn(3), torch.randn(2, 2), torch.zeros(0)]
    got = torch._foreach_norm([x.to("fl:0") for x in xs], 1, dtype=torch.float64)
    want = torch._foreach_norm(xs, 1, dtype=torch.float64)
    for g, w in zip(got, want):
        assert g.dtype == torch.float64 and g.shape == ()
        assert g.item() == pytest.approx(w.item(), rel=1e-15)
    with pytest.raises(RuntimeError):
        torch._foreach_norm([x.to("fl:0") for x in xs], math.inf)


CAT_CASES = [
    ([(2, 3), (4, 3)], 0),
    ([(2, 3), (2, 5)], 1),
    ([(2, 3), (2, 5)], -1),
    ([(2, 3, 4), (2, 1, 4), (2, 2, 4)], 1),
    ([(2, 3), (0,), (1, 3)], 0),  # the legacy empty 1-D tensor is skipped
    ([(0, 3), (2, 3)], 0),
    ([(0,), (0,)], 0),
    ([(2, 3)], 0),
]


@pytest.mark.parametrize("shapes,dim", CAT_CASES)
def test_cat_matches_cpu(shapes, dim):
    torch.manual_seed(3)
    ts = [torch.randn(s) for s in shapes]
    torch_fl.reset_fallback_stats()
    got = torch.cat([t.to("fl:0") for t in ts], dim)
    want = torch.cat(ts, dim)
    assert got.shape == want.shape and torch.equal(got.cpu(), want)
    assert _native_calls("aten::cat")["cpu_fallback"] == 0


def test_cat_of_strided_and_mixed_dtype_inputs_matches_cpu():
    torch.manual_seed(4)
    cases = [
        ([torch.randn(3, 2).t(), torch.randn(2, 1)], 1),
        ([torch.randn(2, 6, 4)[:, ::2], torch.randn(2, 1, 4)], 1),
        ([torch.randint(0, 5, (3,)), torch.randn(2)], 0),  # int64 + float32 -> float32
        ([torch.randn(2).half(), torch.randn(2)], 0),
        ([torch.tensor([True, False]), torch.tensor([True])], 0),
    ]
    torch_fl.reset_fallback_stats()
    for ts, dim in cases:
        got = torch.cat([t.to("fl:0") for t in ts], dim)
        want = torch.cat(ts, dim)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    assert _native_calls("aten::cat") == {"native": len(cases), "generic": 0, "cpu_fallback": 0}
    stacked = torch.stack([torch.ones(2, 3, device="fl:0"), torch.zeros(2, 3, device="fl:0")], 1)
    assert torch.equal(stacked.cpu(), torch.stack([torch.ones(2, 3), torch.zeros(2, 3)], 1))


@pytest.mark.parametrize("shapes,dim", [([(2, 3), (2, 4)], 0), ([(2, 3), (3,)], 0), ([(), ()], 0)])
def test_cat_refuses_what_aten_refuses(shapes, dim):
    ts = [torch.randn(s) for s in shapes]
    with pytest.raises(RuntimeError):
        torch.cat(ts, dim)
    with pytest.raises(RuntimeError):
        torch.cat([t.to("fl:0") for t in ts], dim)


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_and_its_gradient_match_cpu(dtype, reduction):
    """The elementwise values and the gradient bit for bit (each operation rounded to the
    dtype, as ATen); a reduced loss to the last bits (summed in double here)."""
    torch.manual_seed(5)
    torch_fl.reset_fallback_stats()
    for shape in ((7, 3), (5,), (), (300, 200)):
        x = torch.randn(shape, dtype=dtype, requires_grad=True)
        y = torch.randn(shape, dtype=dtype)
        xf = x.detach().to("fl:0").requires_grad_()
        want, got = F.mse_loss(x, y, reduction=reduction), F.mse_loss(xf, y.to("fl:0"), reduction=reduction)
        g = torch.randn_like(want)
        want.backward(g)
        got.backward(g.to("fl:0"))
        assert got.dtype == want.dtype and got.shape == want.shape
        tol = 0 if reduction == "none" else TOLERANCE[dtype]
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=tol, atol=0, msg=str(shape))
        assert torch.equal(xf.grad.cpu(), x.grad), shape
    for op in ("aten::mse_loss", "aten::mse_loss_backward"):
        assert _native_calls(op)["native"] == 4 and _native_calls(op)["cpu_fallback"] == 0, op


def test_vector_norm_of_a_float_overflows_as_atens_float_sum():
    # ATen sums a float32 norm in float: 10 x 1e20 squared is past FLT_MAX, so the norm is inf
    # (and clip_grad_norm_ raises with error_if_nonfinite); in float64 it is not.
    torch_fl.reset_fallback_stats()
    for x, ord in ((torch.full((10,), 1e20), 2), (torch.full((3,), 1e20).bfloat16(), 2),
                   (torch.full((10,), 1e38), 1), (torch.full((10,), 3e37), 1), (torch.tensor([1e-30]), 2),
                   (torch.full((10,), 1e20).double(), 2)):
        want = torch.linalg.vector_norm(x, ord)
        got = torch.linalg.vector_norm(x.to("fl:0"), ord).cpu()
        assert torch.isinf(got) == torch.isinf(want), (x[0].item(), ord, got, want)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert _native_calls("aten::linalg_vector_norm")["cpu_fallback"] == 0
    p = torch.nn.Parameter(torch.ones(10, device="fl:0"))
    p.grad = torch.full((10,), 1e20, device="fl:0")
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


def test_mse_loss_of_an_empty_batch_and_a_broadcast_target_as_aten():
    """torch's Meta kernel of mse_loss_backward divides by the input's numel (ZeroDivisionError
    for an empty input, where the CPU kernel returns an empty gradient): the router then does
    not serve the op natively, and ATen's own kernel decides."""
    for device in ("cpu", "fl:0"):
        x = torch.zeros(0, 3, device=device, requires_grad=True)
        loss = F.mse_loss(x, torch.zeros(0, 3, device=device))
        assert math.isnan(loss.item())
        loss.backward()
        assert x.grad.shape == (0, 3)
    x, y = torch.randn(4, 3), torch.randn(3)
    with pytest.warns(UserWarning, match="target size"):
        got = F.mse_loss(x.to("fl:0"), y.to("fl:0"))
    torch.testing.assert_close(got.cpu(), F.mse_loss(x, y.expand(4, 3)))


def test_cat_into_an_output_that_overlaps_its_inputs_raises_as_aten():
    # The list's members are inputs too: writing cat's result over them would read what it
    # had just written (before: [0, 1, 0, 1, 1, 0, 6, 7] with no error).
    for device in ("cpu", "fl:0"):
        buf = torch.arange(8.0, device=device)
        with pytest.raises(RuntimeError, match="input tensor and the written-to tensor refer to a single"):
            torch.cat([buf[0:2], buf[1:3]], out=buf[2:6])
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            torch.cat([buf[0:2], buf[1:3]], out=torch.zeros(1, device=device).expand(4))
        assert torch.equal(buf.cpu(), torch.arange(8.0))
    a = torch.arange(4.0, device="fl:0")
    out = torch.empty(8, device="fl:0")
    torch.cat([a, a], out=out)  # the same input twice, no overlap with out: fine
    assert torch.equal(out.cpu(), torch.arange(4.0).repeat(2))


def test_a_regression_step_with_clipping_has_no_fallback():
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 1)).to("fl:0")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 16, device="fl:0"), torch.randn(64, 1, device="fl:0")
    torch_fl.reset_fallback_stats()
    for _ in range(2):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    stats = torch_fl.fallback_stats()
    slow = {k: v for k, v in stats.items() if v["cpu_fallback"] or v["generic"]}
    assert not slow, slow
