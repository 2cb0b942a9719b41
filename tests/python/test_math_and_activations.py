"""The CPU plugin's sin, cos, erf, expm1, log1p, the rounding ops, bitwise and/or/xor, pow
with a Scalar base, and the activations leaky_relu, hardtanh, elu, softplus with their
backward ops: what rotary embeddings, GAN discriminators and smooth losses call. Each equals
PyTorch's CPU result, in every layout and dtype it takes, and runs in the native tier."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from conftest import op_calls

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
TOLERANCE = {torch.float32: 2e-6, torch.float64: 1e-14, torch.float16: 1e-3, torch.bfloat16: 8e-3}


def _layouts(x):
    """Contiguous, transposed, strided, expanded (a stride-0 dim)."""
    return {"contiguous": x, "transposed": x.t(), "strided": x[:, ::2], "expanded": x[:1].expand(3, -1)}


def _sample(dtype, special=True):
    torch.manual_seed(0)
    x = (torch.randn(6, 8, dtype=torch.float64) * 3).to(dtype)
    if special and dtype.is_floating_point:
        x[0, :6] = torch.tensor([0.0, -0.0, 0.5, -2.5, float("inf"), float("nan")], dtype=torch.float64).to(dtype)
    return x


UNARY = {
    "sin": torch.sin, "cos": torch.cos, "erf": torch.erf, "expm1": torch.expm1, "log1p": torch.log1p,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math_matches_cpu_in_every_layout(name, dtype):
    fn = UNARY[name]
    x = _sample(dtype)
    if name == "log1p":
        x = x.abs()
    torch_fl.reset_fallback_stats()
    for layout, v in _layouts(x).items():
        want = fn(v)
        got = fn(v.to("fl:0"))
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype], equal_nan=True,
                                   msg=f"{name} {layout}")
        # in place and out=
        inplace = v.clone().to("fl:0")
        getattr(inplace, name + "_")()
        torch.testing.assert_close(inplace.cpu(), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype], equal_nan=True)
    calls = op_calls(torch_fl.fallback_stats(), "aten::" + name)
    assert calls["native"] == 8 and calls["cpu_fallback"] == 0, calls


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc"])
def test_rounding_integers_is_the_identity_and_round_ties_to_even(name):
    x = torch.tensor([[-3, 7, 2**62 + 1]], dtype=torch.int64)
    assert torch.equal(UNARY[name](x.to("fl:0")).cpu(), x)
    halves = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 1e20, -3.7])
    assert torch.equal(UNARY[name](halves.to("fl:0")).cpu(), UNARY[name](halves))


def test_unary_math_of_integers_promotes_to_float():
    x = torch.arange(-4, 5, dtype=torch.int32)
    for name in ("sin", "cos", "erf", "expm1"):
        got = UNARY[name](x.to("fl:0"))
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), UNARY[name](x), msg=name)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int8, torch.bool], ids=str)
def test_bitwise_ops_match_cpu(dtype):
    torch.manual_seed(1)
    if dtype == torch.bool:
        a, b = torch.rand(5, 6) > 0.5, torch.rand(5, 6) > 0.5
        scalar = True
    else:
        a = torch.randint(0, 100, (5, 6)).to(dtype)
        b = torch.randint(0, 100, (5, 6)).to(dtype)
        scalar = 6
    torch_fl.reset_fallback_stats()
    for op in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        assert torch.equal(op(a.to("fl:0"), b.to("fl:0")).cpu(), op(a, b))
        assert torch.equal(op(a.t().to("fl:0"), b.t()[:, :1].to("fl:0")).cpu(), op(a.t(), b.t()[:, :1]))  # broadcast
        assert torch.equal(op(a.to("fl:0"), scalar).cpu(), op(a, scalar))
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        calls = op_calls(torch_fl.fallback_stats(), "aten::" + op)
        assert calls["native"] == 3 and calls["cpu_fallback"] == 0, (op, calls)
    # the operators, in place
    x = a.clone().to("fl:0")
    x &= b.to("fl:0")
    x |= b.to("fl:0")
    x ^= a.to("fl:0")
    want = a.clone()
    want &= b
    want |= b
    want ^= a
    assert torch.equal(x.cpu(), want)


def test_bitwise_of_mixed_integer_dtypes_promotes():
    a = torch.tensor([0b1100, 0b1010], dtype=torch.uint8)
    b = torch.tensor([0b1010, 0b0110], dtype=torch.int64)
    got = torch.bitwise_xor(a.to("fl:0"), b.to("fl:0"))
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), torch.bitwise_xor(a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_pow_with_a_scalar_base_matches_cpu(dtype):
    e = torch.linspace(-2, 2, 9, dtype=dtype)
    torch_fl.reset_fallback_stats()
    for base in (10000.0, 2, 0.5):
        torch.testing.assert_close((base ** e.to("fl:0")).cpu(), base ** e, rtol=TOLERANCE[dtype], atol=0)
    assert op_calls(torch_fl.fallback_stats(), "aten::pow")["native"] == 3
    # an integer exponent with a float base gives float32, as ATen, natively
    torch_fl.reset_fallback_stats()
    got = 2.0 ** torch.arange(4).to("fl:0")
    assert got.dtype == torch.float32 and torch.equal(got.cpu(), 2.0 ** torch.arange(4))
    assert op_calls(torch_fl.fallback_stats(), "aten::pow")["native"] == 1
    # integer ** integer is declined by the kernel and still right through the fallback
    assert torch.equal((3 ** torch.arange(5).to("fl:0")).cpu(), 3 ** torch.arange(5))


def test_rotary_embedding_runs_native():
    d, L = 16, 12
    torch_fl.reset_fallback_stats()
    for dev in ("cpu", "fl:0"):
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=dev).float() / d))
        f = torch.outer(torch.arange(L, device=dev).float(), inv)
        if dev == "cpu":
            want = torch.cat([f.cos(), f.sin()], -1)
        else:
            got = torch.cat([f.cos(), f.sin()], -1)
    torch.testing.assert_close(got.cpu(), want)
    stats = torch_fl.fallback_stats()
    assert all(s["cpu_fallback"] == 0 for s in stats.values()), {k: v for k, v in stats.items() if v["cpu_fallback"]}


ACTIVATIONS = {
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "leaky_relu_default": lambda x: F.leaky_relu(x),
    "hardtanh": lambda x: F.hardtanh(x, -1.5, 2.0),
    "relu6": F.relu6,
    "elu": lambda x: F.elu(x, 0.7),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 1.3),
    "softplus": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
    "softplus_default": F.softplus,
}
KERNEL_OF = {"leaky_relu": "leaky_relu", "hardtanh": "hardtanh", "relu6": "hardtanh", "elu": "elu", "selu": "elu",
             "celu": "elu", "softplus": "softplus"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_and_its_gradient_match_cpu(name, dtype):
    fn = ACTIVATIONS[name]
    x = _sample(dtype, special=False)
    x[0, :3] = torch.tensor([0.0, -1.5, 2.0], dtype=dtype)  # hardtanh's bounds and zero
    for layout, v in _layouts(x).items():
        leaf_cpu = v.detach().clone().requires_grad_()
        leaf_fl = v.detach().clone().to("fl:0").requires_grad_()
        grad = torch.randn(leaf_cpu.shape, dtype=torch.float64).to(dtype)
        torch_fl.reset_fallback_stats()
        y_cpu, y_fl = fn(leaf_cpu), fn(leaf_fl)
        y_cpu.backward(grad)
        y_fl.backward(grad.to("fl:0"))
        tol = TOLERANCE[dtype]
        torch.testing.assert_close(y_fl.cpu(), y_cpu, rtol=tol, atol=tol, msg=f"{name} {layout}")
        torch.testing.assert_close(leaf_fl.grad.cpu(), leaf_cpu.grad, rtol=tol, atol=tol, msg=f"{name} {layout} grad")
        kernel = KERNEL_OF[name.replace("_default", "")]
        fwd = op_calls(torch_fl.fallback_stats(), "aten::" + kernel)
        bwd = op_calls(torch_fl.fallback_stats(), "aten::" + kernel + "_backward")
        assert fwd["native"] >= 1 and fwd["cpu_fallback"] == 0, (name, fwd)
        assert bwd["native"] >= 1 and bwd["cpu_fallback"] == 0, (name, bwd)


def test_activation_nan_and_in_place_forms_match_cpu():
    x = torch.tensor([float("nan"), -1.0, 0.0, 3.0, float("-inf"), float("inf")])
    for name, fn in ACTIVATIONS.items():
        torch.testing.assert_close(fn(x.to("fl:0")).cpu(), fn(x), equal_nan=True, msg=name)
    for fn in (lambda t: F.leaky_relu_(t, 0.1), lambda t: F.hardtanh_(t, -0.5, 0.5), lambda t: F.elu_(t, 1.0)):
        a, b = x.clone(), x.clone().to("fl:0")
        fn(a)
        fn(b)
        torch.testing.assert_close(b.cpu(), a, equal_nan=True)


def test_elu_backward_through_its_result_matches_cpu():
    # ELU in place saves its result: elu_backward with is_result=True
    x = torch.randn(40, dtype=torch.float64)
    outs = []
    for dev in ("cpu", "fl:0"):
        leaf = x.clone().to(dev).requires_grad_()
        y = leaf * 1.0
        F.elu_(y, 0.5)
        y.sum().backward()
        outs.append(leaf.grad.cpu())
    torch.testing.assert_close(outs[1], outs[0])


def test_hardtanh_of_integers_matches_cpu():
    x = torch.tensor([-5, -1, 0, 1, 5], dtype=torch.int64)
    assert torch.equal(F.hardtanh(x.to("fl:0"), -2, 3).cpu(), F.hardtanh(x, -2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.bool], ids=str)
def test_max_and_min_of_every_element_run_native(dtype):
    torch.manual_seed(0)
    x = (torch.randn(5, 7) * 10).to(dtype)
    torch_fl.reset_fallback_stats()
    for v in (x, x.t(), x[:, ::3]):
        assert torch.equal(v.to("fl:0").max().cpu(), v.max()) and torch.equal(v.to("fl:0").min().cpu(), v.min())
    for op in ("aten::max", "aten::min"):
        calls = torch_fl.fallback_stats()[op]
        assert calls["native"] == 3 and calls["cpu_fallback"] == 0, calls
    if dtype.is_floating_point:
        x[2, 3] = float("nan")
        assert x.to("fl:0").max().isnan().item() and x.to("fl:0").min().isnan().item()
    with pytest.raises(RuntimeError):
        torch.zeros(0, dtype=dtype, device="fl:0").max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_logsigmoid_and_bce_with_logits_match_cpu_natively(dtype):
    torch.manual_seed(0)
    x = torch.randn(50, 7, dtype=torch.float64) * 20
    x[0, :3] = torch.tensor([float("nan"), 0.0, -0.0], dtype=torch.float64)
    x = x.to(dtype)
    target = (torch.rand(50, 7) > 0.5).to(dtype)
    torch_fl.reset_fallback_stats()
    a, b = x.clone().requires_grad_(), x.clone().to("fl:0").requires_grad_()
    ya, yb = F.logsigmoid(a), F.logsigmoid(b)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(yb.detach().cpu(), ya.detach(), rtol=tol, atol=tol, equal_nan=True)
    g = torch.randn(ya.shape, dtype=dtype)
    ya.backward(g)
    yb.backward(g.to("fl:0"))
    torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=tol, atol=tol, equal_nan=True)
    for reduction in ("mean", "sum", "none"):
        want = F.binary_cross_entropy_with_logits(x[1:], target[1:], reduction=reduction)
        got = F.binary_cross_entropy_with_logits(x[1:].to("fl:0"), target[1:].to("fl:0"), reduction=reduction)
        torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
    fwd = torch_fl.fallback_stats()["aten::log_sigmoid_forward"]
    bwd = torch_fl.fallback_stats()["aten::log_sigmoid_backward"]
    assert fwd["native"] == 4 and fwd["cpu_fallback"] == 0 and bwd["native"] == 1, (fwd, bwd)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_logical_not_matches_cpu_natively(dtype):
    x = torch.tensor([[0, 1, -2], [3, 0, 0]]).to(dtype)
    if dtype.is_floating_point:
        x[1, 2] = float("nan")
    torch_fl.reset_fallback_stats()
    for v in (x, x.t()):
        assert torch.equal(torch.logical_not(v.to("fl:0")).cpu(), torch.logical_not(v))
    assert op_calls(torch_fl.fallback_stats(), "aten::logical_not")["native"] == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.uint8, torch.bool],
                         ids=str)
def test_sign_and_sgn_match_cpu_natively(dtype):
    x = torch.tensor([[-3, 0, 2], [5, -1, 0]]).to(dtype)
    if dtype.is_floating_point:
        x[1, 2] = float("nan")
        x[0, 1] = -0.0
    torch_fl.reset_fallback_stats()
    for fn in (torch.sign, torch.sgn):
        for v in (x, x.t()):
            assert torch.equal(fn(v.to("fl:0")).cpu(), fn(v))
    assert op_calls(torch_fl.fallback_stats(), "aten::sign")["native"] == 2
    assert op_calls(torch_fl.fallback_stats(), "aten::sgn")["native"] == 2


def test_l1_loss_gradient_runs_native():
    x = torch.randn(6, 5, requires_grad=True)
    y = torch.randn(6, 5)
    b = x.detach().to("fl:0").requires_grad_()
    torch_fl.reset_fallback_stats()
    F.l1_loss(b, y.to("fl:0")).backward()
    F.l1_loss(x, y).backward()
    torch.testing.assert_close(b.grad.cpu(), x.grad)
    assert not any(v["cpu_fallback"] for v in torch_fl.fallback_stats().values())
