"""The plugin's sort (sort.values_stable) and topk (topk.values) kernels on fl:0: values and
indices equal PyTorch's CPU results (a stable sort keeps equal elements in index order; NaN
sorts above every number; -0.0 equals 0.0), for every dtype, dim, direction and layout, and
each call runs in the native tier. topk's order among equal values is ATen's to choose, so
those cases are held to the plugin's documented rule (the lower index first: the first k of a
stable sort); sorted=False results are compared as sets."""
from __future__ import annotations

import pytest
import torch

import torch_fl
from conftest import layouts, op_calls

SORT_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16,
               torch.int8, torch.uint8, torch.bool]
TOPK_DTYPES = [d for d in SORT_DTYPES if d != torch.bool]  # ATen's CPU topk refuses bool


def _calls(op):
    return op_calls(torch_fl.fallback_stats(), op)


def _native(op, n):
    assert _calls(op) == {"native": n, "generic": 0, "cpu_fallback": 0}, torch_fl.fallback_stats()


def _with_ties(shape, dtype, seed=0):
    """Values from a small set, so that lines hold equal elements."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    v = torch.randint(0 if dtype == torch.uint8 else -4, 5, shape, generator=g)
    return (v * 0.5).to(dtype) if dtype.is_floating_point else v.to(dtype)


def _distinct(shape, dtype, seed=0):
    """Distinct values within the tensor (a shuffled ramp, exact in every dtype here)."""
    g = torch.Generator().manual_seed(seed)
    n = torch.Size(shape).numel()
    v = torch.randperm(n, generator=g).reshape(shape)
    if dtype == torch.uint8 or dtype == torch.int8:
        assert n <= 128
    return v.to(dtype) if dtype in (torch.uint8, torch.int8) else (v - n // 2).to(dtype)


def _same(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.is_floating_point():
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)
    else:
        assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", SORT_DTYPES, ids=str)
def test_stable_sort_matches_cpu_for_every_dim_direction_and_layout(dtype):
    x = _with_ties((4, 5, 6), dtype)
    torch_fl.reset_fallback_stats()
    cases = 0
    for dim in (0, 1, -1):
        for descending in (False, True):
            for _, xv in layouts(x):
                got = torch.sort(xv.to("fl:0"), dim=dim, descending=descending, stable=True)
                want = torch.sort(xv, dim=dim, descending=descending, stable=True)
                _same(got.values, want.values)
                _same(got.indices, want.indices)
                cases += 1
    _native("aten::sort", cases)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_nan_inf_and_signed_zeros(descending):
    x = torch.tensor([1.0, float("nan"), -0.0, 0.0, float("inf"), 2.0, float("nan"), -1.0, 0.0, -0.0,
                      float("-inf"), 2.0])
    torch_fl.reset_fallback_stats()
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        got = torch.sort(x.to(dtype).to("fl:0"), descending=descending, stable=True)
        want = torch.sort(x.to(dtype), descending=descending, stable=True)
        _same(got.values, want.values)
        _same(got.indices, want.indices)
    _native("aten::sort", 4)


def test_sort_default_argsort_and_msort_run_native():
    x = _distinct((6, 7), torch.float32, seed=3)
    xf = x.to("fl:0")
    torch_fl.reset_fallback_stats()
    got, want = torch.sort(xf, 0), torch.sort(x, 0)  # stable=None: distinct values, one answer
    _same(got.values, want.values)
    _same(got.indices, want.indices)
    _same(torch.argsort(xf, dim=1, descending=True), torch.argsort(x, dim=1, descending=True))
    _same(torch.msort(xf), torch.msort(x))
    _same(xf.sort(stable=True).indices, x.sort(stable=True).indices)
    _native("aten::sort", 4)


def test_sort_into_strided_outputs_0dim_and_empty():
    x = _with_ties((5, 4), torch.float32, seed=1)
    torch_fl.reset_fallback_stats()
    values = torch.full((4, 10), 7.0).to("fl:0")
    indices = torch.zeros(4, 10, dtype=torch.int64).to("fl:0")
    torch.sort(x.to("fl:0"), dim=0, stable=True, out=(values.t()[::2], indices.t()[::2]))
    want_v, want_i = torch.full((4, 10), 7.0), torch.zeros(4, 10, dtype=torch.int64)
    torch.sort(x, dim=0, stable=True, out=(want_v.t()[::2], want_i.t()[::2]))
    _same(values, want_v)
    _same(indices, want_i)
    for t in (torch.tensor(2.5), torch.zeros(0, 3), torch.zeros(3, 0)):
        got, want = torch.sort(t.to("fl:0"), stable=True), torch.sort(t, stable=True)
        _same(got.values, want.values)
        _same(got.indices, want.indices)
    _native("aten::sort", 4)


def test_sort_gradient_is_native_for_the_sort():
    x = torch.randn(3, 5, requires_grad=True)
    xf = x.detach().to("fl:0").requires_grad_()
    w = torch.randn(3, 5)
    torch_fl.reset_fallback_stats()
    (torch.sort(x, 1).values * w).sum().backward()
    (torch.sort(xf, 1).values * w.to("fl:0")).sum().backward()
    _same(xf.grad, x.grad)
    assert _calls("aten::sort")["native"] == 1 and _calls("aten::sort")["cpu_fallback"] == 0


@pytest.mark.parametrize("dtype", TOPK_DTYPES, ids=str)
def test_topk_matches_cpu_on_distinct_values(dtype):
    x = _distinct((4, 5, 6), dtype)
    torch_fl.reset_fallback_stats()
    cases = 0
    for dim in (0, 1, -1):
        size = x.shape[dim]
        for k in (0, 1, 3, size):
            for largest in (True, False):
                for _, xv in layouts(x):
                    got = torch.topk(xv.to("fl:0"), k, dim=dim, largest=largest)
                    want = torch.topk(xv, k, dim=dim, largest=largest)
                    _same(got.values, want.values)
                    _same(got.indices, want.indices)
                    cases += 1
    _native("aten::topk", cases)


def _by_index(values, indices, dim):
    order = indices.argsort(dim)
    return values.gather(dim, order), indices.gather(dim, order)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_topk_unsorted_equals_cpu_as_a_set(dtype):
    x = _distinct((6, 9), dtype, seed=2)
    torch_fl.reset_fallback_stats()
    for dim, k, largest in ((1, 4, True), (0, 3, False), (-1, 9, True)):
        got = torch.topk(x.to("fl:0"), k, dim=dim, largest=largest, sorted=False)
        want = torch.topk(x, k, dim=dim, largest=largest, sorted=False)
        gv, gi = _by_index(got.values.cpu(), got.indices.cpu(), dim)
        wv, wi = _by_index(want.values, want.indices, dim)
        _same(gv, wv)
        _same(gi, wi)
    _native("aten::topk", 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_topk_ties_take_the_lower_index_first(dtype):
    x = _with_ties((5, 12), dtype, seed=4)
    torch_fl.reset_fallback_stats()
    for largest in (True, False):
        for k in (1, 4, 12):
            got = torch.topk(x.to("fl:0"), k, dim=1, largest=largest)
            stable = torch.sort(x, dim=1, descending=largest, stable=True)
            _same(got.values, torch.topk(x, k, dim=1, largest=largest).values)  # ATen's values
            _same(got.values, stable.values[:, :k])
            _same(got.indices, stable.indices[:, :k])  # the documented rule for the indices
    _native("aten::topk", 6)


def test_topk_nan_is_the_largest():
    x = torch.tensor([[1.0, float("nan"), 3.0, -2.0, float("nan"), 0.5]])
    torch_fl.reset_fallback_stats()
    for largest, k in ((True, 3), (False, 4), (True, 6)):
        got, want = torch.topk(x.to("fl:0"), k, largest=largest), torch.topk(x, k, largest=largest)
        _same(got.values, want.values)
        _same(got.indices, want.indices)
    _native("aten::topk", 3)


def test_topk_0dim_empty_and_out():
    torch_fl.reset_fallback_stats()
    for t, k in ((torch.tensor(1.5), 1), (torch.tensor(1.5), 0), (torch.zeros(0, 4), 2), (torch.randn(3, 5), 0)):
        got, want = torch.topk(t.to("fl:0"), k), torch.topk(t, k)
        _same(got.values, want.values)
        _same(got.indices, want.indices)
    x = _distinct((3, 7), torch.float32, seed=5)
    values = torch.zeros(8, 3).to("fl:0")
    indices = torch.zeros(8, 3, dtype=torch.int64).to("fl:0")
    torch.topk(x.to("fl:0"), 4, dim=1, out=(values.t()[:, ::2], indices.t()[:, ::2]))
    want = torch.topk(x, 4, dim=1)
    _same(values.t()[:, ::2], want.values)
    _same(indices.t()[:, ::2], want.indices)
    _native("aten::topk", 5)


def test_topk_k_out_of_range_raises():
    x = torch.randn(3, 4).to("fl:0")
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.topk(x, 5)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.topk(x, -1, dim=0)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.topk(torch.tensor(1.0).to("fl:0"), 2)
