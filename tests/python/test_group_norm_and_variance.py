"""The plugins' native_group_norm_backward and var/std/var_mean/std_mean (.correction_out)
kernels: what a diffusion UNet's GroupNorm layers call every step, and torch.var & co. Each
equals PyTorch's CPU result, runs in the native tier, and fails where ATen fails."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import torch_fl
from conftest import op_calls

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
# Forward outputs and gradients against CPU of the same dtype (16-bit: both round their inputs
# and results, the fl forward runs ATen's composite, the CPU one its own kernel).
TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-12, torch.float16: 2e-2, torch.bfloat16: 6e-2}


def _calls(op):
    return op_calls(torch_fl.fallback_stats(), op)


def _group_norm_step(x, groups, affine, x_grad=True, weight_grad=True, seed=0):
    """y, x.grad, weight.grad, bias.grad of one GroupNorm forward and backward on x's device."""
    torch.manual_seed(seed)
    norm = nn.GroupNorm(groups, x.shape[1], affine=affine).to(device=x.device, dtype=x.dtype)
    if affine:
        with torch.no_grad():
            norm.weight.copy_(torch.linspace(0.5, 1.5, x.shape[1]))
            norm.bias.copy_(torch.linspace(-0.3, 0.3, x.shape[1]))
        norm.weight.requires_grad_(weight_grad)
        norm.bias.requires_grad_(weight_grad)
    x = x.detach().clone().requires_grad_(x_grad)
    y = norm(x)
    grad = torch.cos(torch.arange(y.numel(), dtype=torch.float64)).reshape(y.shape).to(device=y.device, dtype=y.dtype)
    y.backward(grad)
    return (y.detach(), x.grad, norm.weight.grad if affine else None, norm.bias.grad if affine else None)


def _assert_step_matches(got, want, dtype):
    for name, g, w in zip(("y", "x.grad", "weight.grad", "bias.grad"), got, want):
        if w is None:
            assert g is None, name
            continue
        assert g.dtype == w.dtype and g.shape == w.shape, name
        # Parameter gradients sum over N*HxW products: scale the tolerance with their magnitude.
        tol = TOLERANCE[dtype] * (4 if name.endswith("weight.grad") or name.endswith("bias.grad") else 1)
        torch.testing.assert_close(g.cpu(), w, rtol=tol, atol=tol, msg=name)


SHAPES = [  # (input shape, groups)
    ((2, 6, 5, 4), 3),
    ((3, 8, 7, 3), 8),   # one channel per group
    ((2, 4, 9, 9), 1),   # one group: LayerNorm over (C, H, W)
    ((5, 6), 2),         # [N, C]: HxW = 1
    ((2, 6, 11), 3),     # [N, C, L]
    ((1, 32, 40, 40), 8),  # HxW > 1024: the CUDA plugin's block-per-row kernels
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
def test_group_norm_forward_backward_match_cpu(dtype, affine):
    torch_fl.reset_fallback_stats()
    for shape, groups in SHAPES:
        torch.manual_seed(len(shape) * 7 + groups)
        x = (torch.randn(shape, dtype=torch.float64) * 2 + 0.5).to(dtype)
        want = _group_norm_step(x, groups, affine)
        got = _group_norm_step(x.to("fl:0"), groups, affine)
        _assert_step_matches(got, want, dtype)
    calls = _calls("aten::native_group_norm_backward")
    assert calls["native"] == len(SHAPES) and calls["cpu_fallback"] == 0, calls


@pytest.mark.parametrize("x_grad,weight_grad", [(True, False), (False, True)], ids=["input_only", "weights_only"])
def test_group_norm_backward_output_mask(x_grad, weight_grad):
    """Frozen weights or a frozen input: output_mask asks for some gradients only."""
    torch.manual_seed(3)
    x = torch.randn(3, 6, 4, 5)
    torch_fl.reset_fallback_stats()
    want = _group_norm_step(x, 3, True, x_grad, weight_grad)
    got = _group_norm_step(x.to("fl:0"), 3, True, x_grad, weight_grad)
    _assert_step_matches(got, want, torch.float32)
    calls = _calls("aten::native_group_norm_backward")
    assert calls["native"] == 1 and calls["cpu_fallback"] == 0, calls


def test_group_norm_backward_op_with_masked_outputs_and_no_weight():
    """The operator called directly: masked-off outputs come back undefined, as on CPU."""
    torch.manual_seed(4)
    n, c, hw, group = 2, 6, 10, 3
    x = torch.randn(n, c, hw, dtype=torch.float64)
    dy = torch.randn(n, c, hw, dtype=torch.float64)
    w = torch.rand(c, dtype=torch.float64) + 0.5
    _, mean, rstd = torch.ops.aten.native_group_norm(x, w, None, n, c, hw, group, 1e-5)
    # Without weight, ATen's CPU kernel computes the input gradient alone.
    for weight, masks in ((w, ([True, False, False], [False, True, False], [False, False, True], [True, True, True])),
                          (None, ([True, False, False],))):
        for mask in masks:
            want = torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, weight, n, c, hw, group, mask)
            got = torch.ops.aten.native_group_norm_backward(
                dy.to("fl:0"), x.to("fl:0"), mean.to("fl:0"), rstd.to("fl:0"),
                None if weight is None else weight.to("fl:0"), n, c, hw, group, mask)
            for k, (g, e) in enumerate(zip(got, want)):
                if not mask[k]:
                    assert g is None and e is None, (mask, k)
                    continue
                torch.testing.assert_close(g.cpu(), e, rtol=1e-12, atol=1e-12, msg=f"{mask} output {k}")


def test_group_norm_backward_of_channels_last_and_zero_batch():
    """A channels_last input reaches the kernel as the core's contiguous copy. (The forward on
    fl, ATen's composite math_group_norm, views a channels_last input and fails: not covered.)"""
    torch.manual_seed(5)
    n, c, hw, group = 2, 8, 30, 4
    x = torch.randn(n, c, 5, 6).to(memory_format=torch.channels_last)
    dy = torch.randn(n, c, 5, 6).to(memory_format=torch.channels_last)
    w = torch.rand(c) + 0.5
    _, mean, rstd = torch.ops.aten.native_group_norm(x, w, None, n, c, hw, group, 1e-5)
    args = (mean, rstd, w, n, c, hw, group, [True, True, True])
    want = torch.ops.aten.native_group_norm_backward(dy, x, *args)
    got = torch.ops.aten.native_group_norm_backward(dy.to("fl:0"), x.to("fl:0"), *(a.to("fl:0") if isinstance(
        a, torch.Tensor) else a for a in args))
    for k, (g, e) in enumerate(zip(got, want)):
        torch.testing.assert_close(g.cpu(), e, rtol=2e-5, atol=2e-5, msg=str(k))
    # N = 0: no input gradient to compute, zero parameter gradients.
    empty = torch.randn(0, 6, 3, 3)
    _assert_step_matches(_group_norm_step(empty.to("fl:0"), 2, True), _group_norm_step(empty, 2, True), torch.float32)


def test_group_norm_training_steps_match_cpu():
    """A few optimizer steps of conv + GroupNorm + SiLU (a UNet block) stay with CPU's."""
    torch.manual_seed(6)
    block = nn.Sequential(nn.Conv2d(4, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(), nn.Conv2d(16, 4, 1))
    fl_block = nn.Sequential(nn.Conv2d(4, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(), nn.Conv2d(16, 4, 1))
    fl_block.load_state_dict(block.state_dict())
    fl_block.to("fl:0")
    opt = torch.optim.SGD(block.parameters(), lr=0.05)
    fl_opt = torch.optim.SGD(fl_block.parameters(), lr=0.05)
    torch_fl.reset_fallback_stats()
    for step in range(3):
        x = torch.randn(2, 4, 8, 8)
        for model, optimizer, inp in ((block, opt, x), (fl_block, fl_opt, x.to("fl:0"))):
            optimizer.zero_grad()
            model(inp).square().mean().backward()
            optimizer.step()
    for (name, p), q in zip(block.named_parameters(), fl_block.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5, msg=name)
    assert _calls("aten::native_group_norm_backward") == {"native": 3, "generic": 0, "cpu_fallback": 0}


# ---- var / std / var_mean / std_mean -------------------------------------------------------

VAR_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 2e-3, torch.bfloat16: 1e-2}
VARIANCE_OPS = {
    "var": torch.var,
    "std": torch.std,
    "var_mean": torch.var_mean,
    "std_mean": torch.std_mean,
}


def _assert_outputs_close(got, want, tol, msg):
    """One tensor or a (var, mean) pair; NaN where CPU has NaN."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want), msg
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (msg, k)
        torch.testing.assert_close(g.cpu(), w, rtol=tol, atol=tol * 10, equal_nan=True, msg=f"{msg} output {k}")


def _layouts(x):
    return {"contiguous": x, "transposed": x.transpose(0, 2), "sliced": x[:, ::2]}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(VARIANCE_OPS))
def test_variance_ops_match_cpu_for_dims_corrections_and_layouts(name, dtype):
    fn = VARIANCE_OPS[name]
    torch.manual_seed(7)
    x = (torch.randn(5, 6, 4, dtype=torch.float64) * 3 + 10).to(dtype)  # an offset mean
    torch_fl.reset_fallback_stats()
    cases = 0
    for layout_name, layout in _layouts(x).items():
        for dim in (None, 1, (0, 2), -1, []):
            for keepdim in (False, True):
                for correction in (0, 1, 2, 0.5):
                    want = fn(layout, dim, correction=correction, keepdim=keepdim)
                    got = fn(layout.to("fl:0"), dim, correction=correction, keepdim=keepdim)
                    _assert_outputs_close(got, want, VAR_TOLERANCE[dtype],
                                          f"{layout_name} dim {dim} keepdim {keepdim} correction {correction}")
                    cases += 1
    calls = _calls(f"aten::{name}")
    assert calls["native"] == cases and calls["cpu_fallback"] == 0, calls


def test_variance_unbiased_forms_and_methods():
    torch.manual_seed(8)
    x = torch.randn(4, 9)
    xf = x.to("fl:0")
    torch_fl.reset_fallback_stats()
    pairs = [
        (torch.var(xf, unbiased=False), torch.var(x, unbiased=False)),
        (torch.std(xf, 1, unbiased=False), torch.std(x, 1, unbiased=False)),
        (xf.var(), x.var()),
        (xf.std(dim=0, keepdim=True), x.std(dim=0, keepdim=True)),
        (torch.var_mean(xf, 1, unbiased=True)[0], torch.var_mean(x, 1, unbiased=True)[0]),
        (torch.std_mean(xf, unbiased=False)[1], torch.std_mean(x, unbiased=False)[1]),
    ]
    for k, (got, want) in enumerate(pairs):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6, msg=str(k))
    for op in ("aten::var", "aten::std", "aten::var_mean", "aten::std_mean"):
        assert _calls(op)["cpu_fallback"] == 0, op


def test_variance_edge_cases_as_aten():
    """One element (n - correction = 0), correction above n, NaN and inf inputs, an empty
    reduction: NaN and inf exactly where ATen has them."""
    cases = [
        (torch.tensor([3.0]), None, 1),
        (torch.tensor([1.0, 2.0]), None, 2),
        (torch.tensor([1.0, 2.0, 4.0]), None, 5),
        (torch.tensor([[1.0, float("nan")], [2.0, 3.0]]), 1, 1),
        (torch.tensor([[1.0, float("inf")], [2.0, 3.0]]), 1, 0),
        (torch.zeros(0, 3), 0, 1),
        (torch.zeros(2, 0), 1, 1),
    ]
    for x, dim, correction in cases:
        for name, fn in VARIANCE_OPS.items():
            _assert_outputs_close(fn(x.to("fl:0"), dim, correction=correction), fn(x, dim, correction=correction),
                                  1e-6, f"{name} {x.tolist()} dim {dim} correction {correction}")


def test_variance_gradient_matches_cpu():
    torch.manual_seed(9)
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    xf = x.detach().to("fl:0").requires_grad_()
    for fn in (lambda t: t.var(1).sum(), lambda t: t.std(0, correction=0).sum(),
               lambda t: sum(o.sum() for o in torch.var_mean(t, 1))):
        fn(x).backward()
        fn(xf).backward()
    torch.testing.assert_close(xf.grad.cpu(), x.grad, rtol=1e-12, atol=1e-12)


def test_variance_rejects_integer_input_as_aten():
    with pytest.raises(RuntimeError, match="floating point"):
        torch.var(torch.arange(6).to("fl:0"))
