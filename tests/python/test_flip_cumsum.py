"""The CPU plugin's flip and cumsum kernels: each equals PyTorch's CPU result value for value
(cumsum adds in ATen's CPU accumulate type and order), runs in the native tier for every layout
and dtype argument, in place too, and fails where ATen fails."""
from __future__ import annotations

import pytest
import torch

import torch_fl
from conftest import layouts, op_calls

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.uint8,
          torch.bool]


def _calls(op):
    return op_calls(torch_fl.fallback_stats(), op)


def _values(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0 if dtype == torch.uint8 else -50, 50, shape, generator=g).to(dtype)


def _same(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flip_matches_cpu_for_every_dims_and_layout(dtype):
    x = _values((3, 4, 5), dtype)
    torch_fl.reset_fallback_stats()
    cases = 0
    for dims in ([0], [2], [-1], [0, 2], [2, 0, 1], [-3, -2], []):
        for _, xv in layouts(x):
            _same(torch.flip(xv.to("fl:0"), dims), torch.flip(xv, dims))
            cases += 1
    assert _calls("aten::flip") == {"native": cases, "generic": 0, "cpu_fallback": 0}


def test_flip_0dim_empty_out_and_repeated_dims():
    torch_fl.reset_fallback_stats()
    _same(torch.flip(torch.tensor(3.5).to("fl:0"), [0]), torch.flip(torch.tensor(3.5), [0]))
    _same(torch.flip(torch.zeros(0, 3).to("fl:0"), [1]), torch.flip(torch.zeros(0, 3), [1]))
    x = torch.randn(4, 6)
    buf = torch.zeros(6, 8).to("fl:0")
    torch.ops.aten.flip.out(x.to("fl:0"), [0, 1], out=buf.t()[::2])  # torch.flip has no out=
    want = torch.zeros(6, 8)
    torch.ops.aten.flip.out(x, [0, 1], out=want.t()[::2])
    _same(buf, want)
    assert _calls("aten::flip") == {"native": 3, "generic": 0, "cpu_fallback": 0}
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.flip(x.to("fl:0"), [0, -2])


def test_flip_gradient_is_native():
    x = torch.randn(3, 4, requires_grad=True)
    xf = x.detach().to("fl:0").requires_grad_()
    w = torch.randn(3, 4)
    torch_fl.reset_fallback_stats()
    (torch.flip(x, [1]) * w).sum().backward()
    (torch.flip(xf, [1]) * w.to("fl:0")).sum().backward()
    _same(xf.grad, x.grad)
    assert _calls("aten::flip") == {"native": 2, "generic": 0, "cpu_fallback": 0}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cumsum_matches_cpu_for_every_dim_and_layout(dtype):
    x = _values((4, 37, 3), dtype)
    torch_fl.reset_fallback_stats()
    cases = 0
    for dim in (0, 1, 2, -1):
        for _, xv in layouts(x):
            _same(torch.cumsum(xv.to("fl:0"), dim), torch.cumsum(xv, dim))
            cases += 1
    assert _calls("aten::cumsum") == {"native": cases, "generic": 0, "cpu_fallback": 0}


@pytest.mark.parametrize("out_dtype", [torch.float64, torch.float32, torch.bfloat16, torch.int64, torch.int32],
                         ids=str)
def test_cumsum_dtype_argument_converts_first_as_aten(out_dtype):
    torch_fl.reset_fallback_stats()
    cases = 0
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.bool):
        x = _values((5, 300), dtype, seed=2) * (3 if dtype.is_floating_point else 1)
        for dim in (0, 1):
            _same(torch.cumsum(x.to("fl:0"), dim, dtype=out_dtype), torch.cumsum(x, dim, dtype=out_dtype))
            cases += 1
    assert _calls("aten::cumsum") == {"native": cases, "generic": 0, "cpu_fallback": 0}


def test_cumsum_long_float32_line_sums_in_double_as_aten_cpu():
    x = torch.rand(100_000) * 1000  # float sums would drift from ATen's double-accumulated ones
    _same(torch.cumsum(x.to("fl:0"), 0), torch.cumsum(x, 0))


def test_cumsum_in_place_0dim_empty_and_out():
    torch_fl.reset_fallback_stats()
    x = torch.randn(6, 5)
    xf = x.to("fl:0")
    view = xf.t()[:, 1:]
    view.cumsum_(1)
    x.t()[:, 1:].cumsum_(1)
    _same(xf, x)
    _same(torch.cumsum(torch.tensor(2.5).to("fl:0"), 0), torch.cumsum(torch.tensor(2.5), 0))
    _same(torch.cumsum(torch.tensor(True).to("fl:0"), -1), torch.cumsum(torch.tensor(True), -1))
    _same(torch.cumsum(torch.zeros(0, 4).to("fl:0"), 1), torch.cumsum(torch.zeros(0, 4), 1))
    buf = torch.zeros(6, 10, dtype=torch.float64).to("fl:0")
    torch.cumsum(x.to("fl:0"), 0, dtype=torch.float64, out=buf[:, ::2])
    want = torch.zeros(6, 10, dtype=torch.float64)
    torch.cumsum(x, 0, dtype=torch.float64, out=want[:, ::2])
    _same(buf, want)
    assert _calls("aten::cumsum") == {"native": 5, "generic": 0, "cpu_fallback": 0}


def test_cumsum_gradient_is_native():
    x = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    xf = x.detach().to("fl:0").requires_grad_()
    w = torch.randn(4, 7, dtype=torch.float64)
    torch_fl.reset_fallback_stats()
    (torch.cumsum(x, 1) * w).sum().backward()
    (torch.cumsum(xf, 1) * w.to("fl:0")).sum().backward()
    torch.testing.assert_close(xf.grad.cpu(), x.grad, rtol=1e-14, atol=1e-14)
    for op in ("aten::cumsum", "aten::flip"):
        assert _calls(op)["cpu_fallback"] == 0, op
    assert _calls("aten::cumsum")["native"] >= 2
