"""The CPU plugin's predicate, logical, all/any, tril/triu, bitwise_not and arange kernels:
what attention masks, position ids and `F.scaled_dot_product_attention` call. SDPA takes
ATen's math path on fl when the plugin has no fused attention or the call has dropout
(test_fused_attention.py has the fused one); the math path's safe softmax calls isneginf and
all on every call; without these kernels each went through the CPU fallback (two host round trips per attention layer). Each result
equals PyTorch's CPU one bit for bit and runs in the native tier."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_fl
from conftest import op_calls

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8,
          torch.bool]


def _values(dtype):
    """A 4x5 tensor of `dtype` with zeros, and NaN and both infinities where it can hold them."""
    x = torch.tensor([[1.5, 0.0, float("nan"), float("inf"), -2.0],
                      [0.0, 0.0, 0.0, 0.0, 0.0],
                      [-float("inf"), 3.0, 1.0, 0.25, 7.0],
                      [4.0, -1.0, 0.0, 2.0, float("nan")]])
    if dtype.is_floating_point:
        return x.to(dtype)
    return x.nan_to_num(9, 100, 0).abs().to(dtype)


def _fallbacks(*ops):
    stats = torch_fl.fallback_stats()
    return sum(op_calls(stats, op)["cpu_fallback"] + op_calls(stats, op)["generic"] for op in ops)


def _natives(op):
    return op_calls(torch_fl.fallback_stats(), op)["native"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_isnan_isposinf_isneginf_isinf_match_cpu(dtype):
    x = _values(dtype)
    torch_fl.reset_fallback_stats()
    for fn in (torch.isnan, torch.isposinf, torch.isneginf, torch.isinf, torch.isfinite):
        for layout in (x, x.t(), x[:, ::2]):
            got, want = fn(layout.to("fl:0")), fn(layout)
            assert got.device.type == "fl" and got.dtype == want.dtype
            assert torch.equal(got.cpu(), want), (fn.__name__, got, want)
    assert _fallbacks("aten::isnan", "aten::isposinf", "aten::isneginf") == 0
    assert _natives("aten::isneginf") == 3  # one per layout; isinf is abs() == inf


def _reductions():
    return [("all()", lambda a: a.all()), ("any()", lambda a: a.any()),
            ("all(1)", lambda a: a.all(1)), ("any(0, keepdim)", lambda a: a.any(0, keepdim=True)),
            ("all(-1, keepdim)", lambda a: a.all(-1, keepdim=True)),
            ("all(dim=[])", lambda a: a.all(dim=[])), ("any(dim=())", lambda a: a.any(dim=())),
            ("any(dim=(0, 1))", lambda a: a.any(dim=(0, 1))), ("all(dim=None)", lambda a: a.all(dim=None)),
            ("all(dim=[1], keepdim)", lambda a: a.all(dim=[1], keepdim=True))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_and_any_match_cpu_for_every_overload(dtype):
    x = _values(dtype)
    torch_fl.reset_fallback_stats()
    for name, fn in _reductions():
        for layout in (x, x.t(), x[::2]):
            got, want = fn(layout.to("fl:0")), fn(layout)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert torch.equal(got.cpu(), want), (name, got, want)
    assert _fallbacks("aten::all", "aten::any") == 0


def test_all_and_any_over_no_element_and_a_scalar():
    for shape, dim in (((2, 0), 1), ((0, 3), 0), ((0,), 0), ((3, 0, 2), 1)):
        e = torch.zeros(shape)
        for fn in (lambda a: a.all(dim), lambda a: a.any(dim), lambda a: a.all(), lambda a: a.any()):
            assert torch.equal(fn(e.to("fl:0")).cpu(), fn(e))
    for v in (0.0, 2.0, float("nan")):
        s = torch.tensor(v)
        assert torch.equal(s.to("fl:0").all().cpu(), s.all()) and torch.equal(s.to("fl:0").any(0).cpu(), s.any(0))


def test_all_and_any_split_over_threads_keep_every_output():
    torch.manual_seed(0)
    big = torch.rand(300, 700) > 0.001
    for fn in (lambda a: a.all(1), lambda a: a.any(0), lambda a: a.all(), lambda a: (~a).any(1),
               lambda a: a.t().all(1)):
        assert torch.equal(fn(big.to("fl:0")).cpu(), fn(big))


def test_all_dims_rejects_a_repeated_dim_as_aten():
    x = torch.ones(2, 3)
    with pytest.raises(RuntimeError, match="appears multiple times|appears twice"):
        x.to("fl:0").all(dim=[1, 1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_logical_and_or_xor_match_cpu(dtype):
    x = _values(dtype)
    other = _values(dtype)[[3, 2, 1, 0]]
    mask = torch.tensor([True, False, True, True, False])
    torch_fl.reset_fallback_stats()
    for fn in (torch.logical_and, torch.logical_or, torch.logical_xor):
        for a, b in ((x, other), (x, mask), (x.t(), other.t()), (x, x[0])):
            got, want = fn(a.to("fl:0"), b.to("fl:0")), fn(a, b)
            assert got.dtype == torch.bool and torch.equal(got.cpu(), want), (fn.__name__, got, want)
    assert _fallbacks("aten::logical_and", "aten::logical_or", "aten::logical_xor") == 0


def test_logical_or_into_a_float_output_falls_back_with_the_right_values():
    # ATen writes logical ops into any output dtype; the plugin serves bool, the rest falls back.
    a, b = _values(torch.float32), _values(torch.float32).flip(0)
    out = torch.empty(4, 5, device="fl:0")
    torch.logical_or(a.to("fl:0"), b.to("fl:0"), out=out)
    assert torch.equal(out.cpu(), torch.logical_or(a, b, out=torch.empty(4, 5)))
    x = a.to("fl:0").clone()
    x.logical_and_(b.to("fl:0"))
    assert torch.equal(x.cpu(), a.clone().logical_and_(b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
def test_tril_and_triu_match_cpu(dtype):
    torch.manual_seed(0)
    x = (torch.randn(2, 3, 5, 4) * 3).to(dtype)
    torch_fl.reset_fallback_stats()
    for diagonal in (-6, -2, -1, 0, 1, 3, 7):
        for fn in (torch.tril, torch.triu):
            for layout in (x, x.transpose(-1, -2), x[0, 0]):
                assert torch.equal(fn(layout.to("fl:0"), diagonal).cpu(), fn(layout, diagonal)), (fn, diagonal)
            inplace = x.to("fl:0")
            getattr(inplace, fn.__name__ + "_")(diagonal)
            assert torch.equal(inplace.cpu(), fn(x, diagonal))
    assert _fallbacks("aten::tril", "aten::triu") == 0
    for empty in (torch.zeros(0, 3, dtype=dtype), torch.zeros(2, 0, 4, dtype=dtype)):
        assert torch.equal(torch.tril(empty.to("fl:0")).cpu(), empty)
    assert _fallbacks("aten::tril", "aten::triu") == 0
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.tril(torch.ones(3, device="fl:0"))


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64], ids=str)
def test_bitwise_not_matches_cpu(dtype):
    x = _values(dtype)
    torch_fl.reset_fallback_stats()
    assert torch.equal((~x.to("fl:0")).cpu(), ~x)
    assert _natives("aten::bitwise_not") == 1 and _fallbacks("aten::bitwise_not") == 0
    y = x.to("fl:0")
    y.bitwise_not_()
    assert torch.equal(y.cpu(), ~x)


@pytest.mark.parametrize("args,dtype", [((10,), None), ((2, 11, 3), None), ((0, 1, 0.1), None),
                                        ((-3.5, 4, 0.25), torch.float64), ((0, 5), torch.bfloat16),
                                        ((5, -7, -2), torch.int32), ((0, 1, 0.1), torch.float16), ((4, 4), None),
                                        ((2**53 + 1, 2**53 + 4), None), ((0, 2**62, 2**60 + 1), None)])
def test_arange_matches_cpu(args, dtype):
    torch_fl.reset_fallback_stats()
    got = torch.arange(*args, dtype=dtype, device="fl:0")
    want = torch.arange(*args, dtype=dtype)
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)  # int64 past 2^53 exactly
    assert _fallbacks("aten::arange") == 0 and _natives("aten::arange") == 1


def _attention_inputs(dtype=torch.float32):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, dtype=dtype, requires_grad=True) for _ in range(3))
    return q, k, v


@pytest.mark.parametrize("mask_kind", ["causal", "bool", "bool with a fully masked row", "float"])
def test_scaled_dot_product_attention_runs_natively_and_matches_cpu(mask_kind):
    q, k, v = _attention_inputs()
    kwargs = {}
    if mask_kind == "causal":
        kwargs["is_causal"] = True
    elif mask_kind.startswith("bool"):
        mask = torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3
        if "fully masked" in mask_kind:
            mask[5] = False  # safe softmax: that row's output is zeros, not NaN
        kwargs["attn_mask"] = mask
    else:
        kwargs["attn_mask"] = torch.randn(16, 16)
    want = F.scaled_dot_product_attention(q, k, v, **{k_: v_ for k_, v_ in kwargs.items()})
    want.square().sum().backward()
    fq, fk, fv = (t.detach().to("fl:0").requires_grad_() for t in (q, k, v))
    fl_kwargs = {k_: (v_.to("fl:0") if torch.is_tensor(v_) else v_) for k_, v_ in kwargs.items()}
    torch_fl.reset_fallback_stats()
    with sdpa_kernel(SDPBackend.MATH):  # the math path, as without a fused kernel
        got = F.scaled_dot_product_attention(fq, fk, fv, **fl_kwargs)
        got.square().sum().backward()
    stats = torch_fl.fallback_stats()
    fell_back = {k_: v_["cpu_fallback"] + v_["generic"] for k_, v_ in stats.items() if v_["cpu_fallback"] + v_["generic"]}
    assert not fell_back, fell_back
    assert not torch.isnan(got).any().item()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)
    for a, b in ((fq, q), (fk, k), (fv, v)):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)
    if "fully masked" in mask_kind:
        assert torch.equal(got[:, :, 5].detach().cpu(), torch.zeros(2, 4, 8))
